"""The expert-parallel flags of `step`, `memory`, `layout` and `plan` (account/time/expert_parallel.py)."""

from __future__ import annotations

import argparse

from trainledger.cli import common


def unit_interval(text: str) -> float:
    """A number in [0, 1]."""
    value = common.positive_float(text) if text.strip() not in ("0", "0.0") else 0.0
    if value > 1:
        raise argparse.ArgumentTypeError(f"must be a number in [0, 1], got {text!r}")
    return value


def add_ep_flag(parser: argparse.ArgumentParser) -> None:
    """--ep alone (memory): the routed experts split over that many of the data-parallel ranks."""
    parser.add_argument("--ep", type=common.positive_int, default=1,
                        help="expert-parallel size: each GPU holds n_experts/ep routed experts; must divide the "
                             "experts, and ep × etp must divide tp·cp·dp (default 1)")


def add_expert_flags(parser: argparse.ArgumentParser) -> None:
    """--ep, --expert-imbalance, --capacity-factor, --ep-overlap, --ep-dispatcher (step, plan)."""
    g = parser.add_argument_group("mixture of experts (account/time/expert_parallel.py)")
    add_ep_flag(g)
    g.add_argument("--etp", type=common.positive_int, default=None,
                   help="expert tensor-parallel size (Megatron's expert_tensor_parallel_size; default: --tp): each "
                        "expert's d_ff split over etp GPUs; with --framework megatron it may differ from --tp and ep "
                        "may reach tp·cp·dp (MoE Parallel Folding)")
    g.add_argument("--expert-imbalance", type=common.positive_float, default=1.0,
                   help="busiest expert's tokens / the mean (>= 1; default 1 = balanced, as published MoE "
                        "benchmarks force it)")
    g.add_argument("--capacity-factor", type=common.positive_float, default=None,
                   help="cap each expert at this × the mean load and drop the excess (default: dropless)")
    g.add_argument("--ep-overlap", type=unit_interval, default=0.0,
                   help="fraction of the all-to-all hidden behind other micro-batches' compute (default 0: exposed)")
    g.add_argument("--ep-dispatcher", default="alltoall",
                   help="token dispatcher: alltoall (one copy per routed expert, Megatron's default) or deepep / "
                        "hybridep (token-based: one copy per GPU, one per node across nodes)")


def expert_settings(args) -> dict:
    """step_time's keyword arguments from the parsed flags."""
    return dict(ep=args.ep, etp=args.etp, expert_imbalance=args.expert_imbalance, capacity_factor=args.capacity_factor,
                ep_overlap=args.ep_overlap, ep_dispatcher=args.ep_dispatcher)


def expert_assumption(result: dict) -> str | None:
    """One line on the all-to-alls of a step with --ep > 1 (None without expert parallelism)."""
    experts = result.get("expert_parallel") or {}
    if result.get("ep", 1) <= 1 or not experts.get("calls"):
        return None
    where = "inside a node (NVLink)" if experts["link"] == "intra" else f"across nodes ({experts['ranks_per_node']} per node)"
    etp = result.get("etp", result.get("tp", 1))
    folded = f", etp {etp}" if etp != result.get("tp", 1) or result["ep"] > result.get("dp", 1) else ""
    return (f"expert parallel ep {result['ep']}{folded} ({experts.get('dispatcher', 'alltoall')} dispatcher): "
            f"{experts['per_step_calls']:g} all-to-alls per step of "
            f"{experts['payload_bytes'] / 2**20:.1f} MiB per rank, {where}; busiest expert {experts['load']:g} × the mean"
            + (f", {experts['dropped_fraction']:.0%} of its tokens dropped" if experts["dropped_fraction"] else "")
            + f"; {experts['overlap']:.0%} of the all-to-all hidden"
            + ("" if result.get("schedule") != "dualpipe" else
               " (DualPipe's default with --schedule dualpipe: hidden behind the paired forward and backward chunks, "
               "DeepSeek-V3 Sec. 3.2.1, dispatched token-based, Sec. 3.2.2; --ep-overlap 0 / --ep-dispatcher alltoall "
               "to expose it)"))
