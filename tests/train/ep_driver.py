"""Run under torchrun (gloo, CPU): expert parallelism against one process (tests/train/test_expert_parallel_train.py).

Every rank trains two copies of a tiny MoE from the same seed for STEPS steps of SGD on the same global batches:
the full model on the whole batch (one process's computation), and the expert-parallel model on its own slice of
the batch with the experts split over the ranks (dense gradients averaged by all-reduce, expert gradients summed by
the all-to-alls' backward and scaled by 1/dp). Prints one JSON line per rank: both loss curves, and the all-to-all
bytes of one forced-balanced step measured by CommCounter beside the prediction of account/time/expert_parallel.
"""

import copy
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from trainledger.account.time.expert_parallel import CALLS_BACKWARD, CALLS_FORWARD, dispatch_bytes
from trainledger.models import Transformer
from trainledger.specs import get_model
from trainledger.train.comm_count import CommCounter
from trainledger.train.expert_parallel import expert_grad_hooks, shard_experts

STEPS, BATCH, SEQ = 10, 4, 16


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    n_experts = int(os.environ.get("EP_EXPERTS", "8"))
    spec = get_model("mixtral-8x7b").with_(vocab_size=64, d_model=32, n_layers=2, n_heads=2, n_kv_heads=2, d_ff=32,
                                           n_experts=n_experts, experts_per_token=2, max_seq_len=SEQ)
    torch.manual_seed(0)
    full = Transformer(spec)
    split = copy.deepcopy(full)
    names = shard_experts(split, dist.group.WORLD)
    expert_grad_hooks(split, names, world)
    dense = [p for n, p in split.named_parameters() if n not in names]
    opt_full, opt_split = (torch.optim.SGD(m.parameters(), lr=0.5) for m in (full, split))
    losses_full, losses_split = [], []
    per_rank = BATCH // world
    for step in range(STEPS):
        tokens = torch.randint(0, spec.vocab_size, (BATCH, SEQ + 1), generator=torch.Generator().manual_seed(step))
        x, y = tokens[:, :-1], tokens[:, 1:]
        _, loss = full(x, y)
        opt_full.zero_grad()
        loss.backward()
        opt_full.step()
        losses_full.append(loss.item())
        rows = slice(rank * per_rank, (rank + 1) * per_rank)
        _, local = split(x[rows], y[rows])
        opt_split.zero_grad()
        local.backward()
        for p in dense:
            dist.all_reduce(p.grad)
            p.grad /= world
        opt_split.step()
        mean = local.detach().clone()
        dist.all_reduce(mean)
        losses_split.append(mean.item() / world)
    for module in split.modules():                 # one forced-balanced step, its all-to-all bytes counted
        if hasattr(module, "force_balance"):
            module.force_balance = True
    counter = CommCounter()
    with counter:
        _, local = split(x[rows], y[rows])
        local.backward()
    measured = sum(b for kind, b, _ in counter.log if kind == "all_to_all" and b > n_experts * 8)
    tokens_local = per_rank * SEQ
    predicted = (spec.n_moe_layers * (CALLS_FORWARD + CALLS_BACKWARD)
                 * dispatch_bytes(spec, tokens_local, 4) * (world - 1) / world)
    # one file per rank: two ranks printing long lines to one pipe can interleave them (a write over PIPE_BUF
    # bytes is not atomic), which made the caller's JSON unreadable now and then
    record = {"rank": rank, "full": losses_full, "split": losses_split, "measured_all_to_all_bytes": measured,
              "predicted_all_to_all_bytes": predicted, "calls": counter.calls}
    Path(sys.argv[1], f"rank{rank}.json").write_text(json.dumps(record))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
