"""The collectives of one training step, the bytes each rank sends for them, and their α–β time. Pure, no torch.

API (others build on it: the distributed trainer compares `bytes_sent_per_rank` with what its run measured):
- `Collective`: one collective of a step — `kind` (all_reduce | reduce_scatter | all_gather | send_recv),
  `payload_bytes` S (the full tensor: an all-reduce's buffer, a reduce-scatter's input, an all-gather's output,
  a point-to-point message), `group_size` n, the `link` it crosses ("intra" inside a node, "inter" between
  nodes), `count` per step, the breakdown `part` (tp_comm, dp_comm, pp_comm, cp_comm), and `overlap`, the
  stated assumption of what hides it. `bytes_per_call` / `bytes_per_step` are what ONE rank sends.
- `ring_bytes_sent(kind, S, n)`: ring volumes — all-reduce 2(n−1)/n·S, reduce-scatter and all-gather
  (n−1)/n·S, send/recv S (Patarasuk & Yuan 2009; NCCL's "bus bandwidth" definition, nccl-tests PERFORMANCE.md).
- `collective_seconds(kind, S, n, link)`: α–β time = call latency + steps·α + ring bytes / bandwidth, with
  steps 2(n−1) for all-reduce, n−1 for reduce-scatter/all-gather, 1 for send/recv.
- `group_seconds(c, intra, inter)`: the time of Collective `c` on the links its group crosses: a group that
  spans nodes with k members on each node drives k NICs at once (NCCL runs one ring per NIC and channel), so
  its ring moves k × one NIC's bus bandwidth, capped by NVLink's (`ranks_per_node`, `group_ranks_per_node`).
- `step_collectives(spec, shard, run, ...)`: every collective of one step of a run's micro-batch `shard`
  (account/time/shard.py) and layout, for an implementation `style` (`layer_collectives`: those of layer passes):
  "megatron" (Megatron-LM: TP all-reduce / SP all-gather + reduce-scatter with its backward re-gather,
  DP all-reduce or distributed-optimizer reduce-scatter + all-gather, 1F1B point-to-point) or "torch" (what
  PyTorch's own parallelisms send: DDP all-reduce of gradients; FSDP2 all-gather of parameters in forward and
  again in backward and reduce-scatter of gradients, per micro-batch; DTensor Colwise/Rowwise TP with one
  backward all-reduce per column-parallel Linear; torch.distributed.pipelining 1F1B sends).
- `bytes_sent_per_rank(spec, shard, run, ...)`: {part: bytes} one rank sends in one step, plus "total".
Payloads follow the precision recipe: activations in the matmul-input dtype, gradients in the recipe's
gradient dtype, parameter all-gathers in the parameter dtype.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from trainledger.account.time.roofline import interpolate_log2
from trainledger.errors import TrainledgerError
from trainledger.specs.dtypes import bytes_per_element
from trainledger.specs.recipes import get_recipe

KINDS = ("all_reduce", "reduce_scatter", "all_gather", "send_recv")
STYLES = ("megatron", "torch")


def style_of(framework: str) -> str:
    """Whose collectives a framework's step runs: Megatron-LM's ("megatron") or PyTorch's own ("torch")."""
    return "megatron" if framework == "megatron" else "torch"


def ring_bytes_sent(kind: str, payload_bytes: float, n: int) -> float:
    """Bytes one rank sends in a ring collective of an S-byte payload over n ranks.

    all-reduce 2(n−1)/n·S (a reduce-scatter then an all-gather); reduce-scatter and all-gather (n−1)/n·S;
    send/recv S (the sender). 0 for a group of one (nothing leaves the GPU).
    """
    if kind not in KINDS:
        raise TrainledgerError(f"collective kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if kind == "send_recv":
        return float(payload_bytes)
    if n <= 1:
        return 0.0
    factor = 2 * (n - 1) / n if kind == "all_reduce" else (n - 1) / n
    return factor * payload_bytes


def ring_steps(kind: str, n: int) -> int:
    """Latency steps of a ring collective: 2(n−1) for all-reduce, n−1 for reduce-scatter/all-gather, 1 for send/recv."""
    if kind == "send_recv":
        return 1
    if n <= 1:
        return 0
    return 2 * (n - 1) if kind == "all_reduce" else n - 1


def collective_seconds(kind: str, payload_bytes: float, n: int, link) -> float:
    """Time of one collective (seconds): α–β, or the link's measured bus bandwidth at this message size.

    `link` is a specs.performance.Link. α–β: call latency + steps·α + ring bytes sent / achieved bandwidth (its
    datasheet rate × NCCL's measured bus-bandwidth fraction, α NCCL's per-step latency); all-reduce: 2(n−1)·α +
    2(n−1)/n·S/β (Thakur et al. 2005; facts.md). A link with a measured all_reduce busbw curve instead costs
    ring bytes sent / busbw(S), busbw interpolated in log2(S) (it includes every latency; below the smallest
    measured size the time is that size's, a latency floor; above the largest, the largest's rate). nccl-tests
    defines busbw so that it compares across group sizes and between all-reduce, reduce-scatter and all-gather
    (nccl-tests PERFORMANCE.md): the curve serves them all, an assumption for n other than the measured 8.
    Point-to-point sends keep α–β. 0 for a group of one.
    """
    steps = ring_steps(kind, n)
    if steps == 0:
        return 0.0
    sent = ring_bytes_sent(kind, payload_bytes, n)
    curve = getattr(link, "busbw_curve", ())
    if curve and kind != "send_recv":
        smallest = curve[0][0]
        if payload_bytes < smallest:
            return ring_bytes_sent(kind, smallest, n) / curve[0][1]
        return sent / interpolate_log2(list(curve), payload_bytes)
    return link.call_latency_seconds + steps * link.step_latency_seconds + sent / link.effective_bytes_per_s


@dataclass(frozen=True)
class Collective:
    """One collective of a training step (see the module docstring); payload in bytes, count per step."""

    name: str
    part: str
    kind: str
    payload_bytes: float
    group_size: int
    link: str
    count: float
    overlap: str = "none: exposed"
    hides_behind: str = ""        # what account.time.step hides it behind: wgrad, dgrad, forward, backward, backward_last
    ranks_per_node: int = 1       # members of the group on one node (their NICs carry an inter-node ring together)


    @property
    def bytes_per_call(self) -> float:
        """Bytes one rank sends per call (ring volume)."""
        return ring_bytes_sent(self.kind, self.payload_bytes, self.group_size)

    @property
    def bytes_per_step(self) -> float:
        """Bytes one rank sends for this collective in one step."""
        return self.bytes_per_call * self.count

    def to_dict(self) -> dict:
        return {"name": self.name, "part": self.part, "kind": self.kind, "payload_bytes": self.payload_bytes,
                "group_size": self.group_size, "link": self.link, "count": self.count, "overlap": self.overlap,
                "bytes_per_call": self.bytes_per_call, "bytes_per_step": self.bytes_per_step,
                "hides_behind": self.hides_behind, "ranks_per_node": self.ranks_per_node}


def group_links(tp: int, cp: int, pp: int, dp: int, gpus_per_node: int) -> dict:
    """Which link each parallel group crosses, with ranks placed TP fastest, then CP, DP, PP (Megatron's order).

    A group stays inside a node when its ranks are consecutive and fit in one: tp ≤ g; cp when tp·cp ≤ g; dp
    when tp·cp·dp ≤ g; pipeline neighbours are tp·cp·dp ranks apart (inside a node only if that total ≤ g).
    """
    g = gpus_per_node
    return {"tp": "intra" if tp <= g else "inter", "cp": "intra" if tp * cp <= g else "inter",
            "dp": "intra" if tp * cp * dp <= g else "inter", "pp": "intra" if tp * cp * dp * pp <= g else "inter"}


def group_ranks_per_node(tp: int, cp: int, dp: int, gpus_per_node: int, replicate: int = 1) -> dict:
    """Members of each parallel group on one node (ranks placed TP fastest, then CP, DP, PP; an HSDP data-parallel
    group shards over its inner dp/replicate ranks and replicates over the outer `replicate`).

    A group whose members are s ranks apart has min(size, g // s) of them on a node (at least 1): TP (s = 1),
    CP (s = tp), DP and the HSDP shard group (s = tp·cp), the HSDP replicate group (s = tp·cp·dp/replicate).
    """
    g = gpus_per_node

    def per_node(size: int, stride: int) -> int:
        return max(1, min(size, g // stride)) if stride <= g else 1

    shard = dp // replicate if replicate and dp % replicate == 0 else dp
    return {"tp": per_node(tp, 1), "cp": per_node(cp, tp), "dp": per_node(dp, tp * cp),
            "dp_shard": per_node(shard, tp * cp), "dp_replicate": per_node(replicate, tp * cp * shard)}


def group_seconds(c: "Collective", intra, inter) -> float:
    """Seconds of all `c.count` calls of Collective `c` on the links its group crosses (`intra`, `inter`: Links).

    Inside a node: `collective_seconds` on the NVLink. Across nodes with k = c.ranks_per_node members per node:
    NCCL builds one ring per NIC (channel), each crossing the network through a different NIC, so the group
    moves k NICs' worth of bus bandwidth ("DGX-A100 ... 8x200Gbit/s IB cards and we measure 192GB/s AllReduce
    BusBW", NVIDIA in NVIDIA/nccl#812; "add more NICs and you should get more bandwidth, up to ... the NVLink
    intra-node bandwidth", NVIDIA/nccl#412), capped by the NVLink bus bandwidth at that size (the rings also
    pass through NVLink inside each node). Latency as NCCL's ring model (src/graph/tuning.cc): call latency +
    (steps − inter-node steps)·α_NVLink + inter-node steps·α_net, with nodes − 1 inter-node steps for
    reduce-scatter and all-gather and 2(nodes − 1) for all-reduce. With k = 1 (one member per node, e.g. DP
    across TP-8 nodes) this is `collective_seconds` on the network link.
    """
    if c.count == 0:
        return 0.0
    if c.link == "intra":
        return c.count * collective_seconds(c.kind, c.payload_bytes, c.group_size, intra)
    k = max(1, min(c.ranks_per_node, c.group_size))
    if k == 1 or c.kind == "send_recv" or intra is None:
        return c.count * collective_seconds(c.kind, c.payload_bytes, c.group_size, inter)
    n = c.group_size
    nodes = -(-n // k)
    sent = ring_bytes_sent(c.kind, c.payload_bytes, n)
    network = sent / (k * inter.effective_bytes_per_s)
    curve = getattr(intra, "busbw_curve", ())
    nvlink_rate = interpolate_log2(list(curve), max(c.payload_bytes, curve[0][0])) if curve else intra.effective_bytes_per_s
    steps = ring_steps(c.kind, n)
    inter_steps = 2 * (nodes - 1) if c.kind == "all_reduce" else nodes - 1
    latency = (inter.call_latency_seconds + (steps - inter_steps) * intra.step_latency_seconds
               + inter_steps * inter.step_latency_seconds)
    return c.count * (latency + max(network, sent / nvlink_rate))


def activation_bytes(spec, shard) -> float:
    """Bytes of one [tokens, d_model] activation of micro-batch `shard` (account.time.shard.Shard) on its rank's
    sequence shard, full (not SP-sharded), in the recipe's activation dtype: what TP, CP and PP collectives move."""
    return shard.tokens * spec.d_model * bytes_per_element(get_recipe(shard.precision).activation_dtype)


def layer_collectives(spec, shard, run, *, style: str = "megatron", passes: float = 1, gpus_per_node: int = 8,
                      mlp_tp: bool = True) -> list[Collective]:
    """The tensor- and context-parallel collectives of `passes` layer passes of micro-batch `shard`
    (account.time.shard.Shard: its tp, sp and cp) under `run` (specs.run.Run: its recomputation, which re-runs
    collectives, and its kernels' tp_overlap), for an implementation `style` (module docstring).
    `mlp_tp` False: the MLP block is not tensor-parallel (a MoE layer with expert TP 1, account/time/folding.py):
    only attention's TP collectives."""
    if style not in STYLES:
        raise TrainledgerError(f"comm style must be one of {', '.join(STYLES)}, got {style!r}")
    tp, cp, recompute = shard.tp, shard.cp, run.levers.recompute
    links = group_links(tp, cp, 1, 1, gpus_per_node)
    per_node = group_ranks_per_node(tp, cp, 1, gpus_per_node)
    out: list[Collective] = []
    if tp > 1:
        out += _tp_collectives(spec, shard, run, style, passes, links["tp"], 2 if mlp_tp else 1)
    if cp > 1:
        act = bytes_per_element(get_recipe(shard.precision).activation_dtype)
        kv = shard.tokens * cp * 2 * spec.kv_heads * spec.head_dim * act / tp      # K and V of the whole sequence
        # the recompute re-gathers K, V (per-op selective keeps the attention output; per-layer: half the blocks)
        regather = {"selective": 2, "full": 2, "selective-layer": 1.5}.get(recompute, 1)
        out.append(Collective("cp_kv_allgather", "cp_comm", "all_gather", kv, cp, links["cp"], regather * passes,
                              "none: exposed (Llama 3 Sec. 3.3.2 all-gathers K, V before attention)",
                              ranks_per_node=per_node["cp"]))
        out.append(Collective("cp_kv_grad_reducescatter", "cp_comm", "reduce_scatter", kv, cp, links["cp"], passes,
                              "none: exposed", ranks_per_node=per_node["cp"]))
    return out


def step_collectives(spec, shard, run, *, style: str = "megatron", micro_batches: int = 1, gpus_per_node: int = 8,
                     layers_per_stage: int | None = None, params_per_gpu: float | None = None) -> list[Collective]:
    """Every collective one rank of the busiest pipeline stage takes part in during one step of micro-batches
    `shard` (account.time.shard.Shard: batch, sequence, compute precision, tp, sp, cp) under `run` (specs.run.Run:
    its layout's pp, interleave, dp and zero, dp None meaning 1 and zero None 0; its recomputation; its kernels'
    tp_overlap and dp_overlap), for an implementation `style` (module docstring).

    `micro_batches` m = gradient-accumulation steps (global batch / (dp · batch_size)). `params_per_gpu` is the
    parameters this rank holds after TP and PP placement (default: account.memory.per_gpu.params_per_gpu of the busiest
    stage; ZeRO/FSDP then shard these over dp); `layers_per_stage` ceil(L/pp). Overlap assumptions are written on each collective and applied by account.time.step.
    `run.kernels.tp_overlap` False: Megatron-style TP input gradients reduced synchronously (the 2021 code,
    `_tp_collectives`); `dp_overlap` False: Megatron-style data-parallel gradients reduced after the last
    micro-batch (`_dp_collectives`).
    """
    lay = run.layout
    tp, sp, cp = shard.tp, shard.sp, shard.cp
    pp, interleave, dp, zero = lay.pp, lay.interleave, lay.dp or 1, lay.zero or 0
    L = layers_per_stage if layers_per_stage is not None else -(-spec.n_layers // pp)
    out = layer_collectives(spec, shard, run, style=style, passes=L * micro_batches,    # layer passes per step
                            gpus_per_node=gpus_per_node)
    recipe = get_recipe(shard.precision)
    links = group_links(tp, cp, pp, dp, gpus_per_node)
    per_node = group_ranks_per_node(tp, cp, dp, gpus_per_node)
    d = spec.d_model
    hidden = activation_bytes(spec, shard)              # one [tokens, d_model] activation, full (not SP-sharded)
    if pp > 1:
        sends = 2 * micro_batches * interleave                         # activations forward, gradients backward
        if style == "megatron" and tp > 1:
            # Megatron-LM's scatter/gather optimisation (Narayanan et al. 2021, Sec. 4.1): each TP rank sends 1/t
            # of the activation over its own NIC; without SP the receiver all-gathers the pieces over NVLink
            out.append(Collective("pp_send_recv", "pp_comm", "send_recv", hidden / tp, 2, links["pp"], sends,
                                  "none: exposed (a stage waits for its input)"))
            if not sp:
                out.append(Collective("pp_scatter_gather_allgather", "pp_comm", "all_gather", hidden, tp, links["tp"],
                                      sends, "none: exposed"))
        else:
            out.append(Collective("pp_send_recv", "pp_comm", "send_recv", hidden, 2, links["pp"], sends,
                                  "none: exposed (a stage waits for its input)"))
        if spec.tied_embeddings:
            out.append(Collective("pp_tied_embedding_allreduce", "pp_comm", "all_reduce",
                                  spec.vocab_size * d / tp * recipe.grads_bytes_per_param, 2, links["pp"], 1,
                                  "none: exposed (first and last stage sum the shared embedding's gradient)"))
    if dp > 1:
        if params_per_gpu is None:
            from trainledger.account.counting.placement import params_per_gpu as placement
            params_per_gpu = placement(spec, tp, pp)["n_params_per_gpu"]
        out += [replace(c, ranks_per_node=per_node["dp"])
                for c in _dp_collectives(recipe, params_per_gpu, dp, zero, micro_batches, style, links["dp"],
                                          run.kernels.dp_overlap)]
    return out


def _tp_collectives(spec, shard, run, style: str, passes: float, link: str, blocks: int = 2):
    """Tensor-parallel collectives of micro-batch `shard` (its tp and sp) under `run` (its recomputation and the
    kernels' tp_overlap), `passes` = layer passes per step (layers × micro-batches). Each of attention and MLP is
    one column-parallel → row-parallel pair (Shoeybi et al. 2019, arXiv:1909.08053, Sec. 3); `blocks` 1:
    attention's pair only.

    Megatron-LM reduces the input gradient of a column-parallel Linear beside that Linear's weight-gradient GEMM
    (async_tensor_model_parallel_allreduce). Its 2021 code did not (`overlap_grads` False): ColumnParallelLinear
    ran `copy_to_tensor_model_parallel_region(input_)` before F.linear, whose backward all-reduces the input
    gradient after the Linear's whole backward, synchronously (NVIDIA/Megatron-LM megatron/mpu/layers.py at commit
    aed2f75, the code of Narayanan et al. 2021 with its interleaved schedule; the same in microsoft/Megatron-DeepSpeed
    megatron/mpu/layers.py, on which MT-NLG 530B trained): every TP collective then is exposed.
    """
    hidden, tp, sp = activation_bytes(spec, shard), shard.tp, shard.sp
    recompute, overlap_grads = run.levers.recompute, run.kernels.tp_overlap
    out = []
    # a full recompute re-runs the layer's forward collectives (per-layer selective: in half the blocks)
    refwd = {"full": 1, "selective-layer": 0.5}.get(recompute, 0)
    if not sp:
        out.append(Collective("tp_allreduce_forward", "tp_comm", "all_reduce", hidden, tp, link, blocks * (1 + refwd) * passes,
                              "none: exposed (the row-parallel output is needed at once)"))
        if style == "megatron" and not overlap_grads:   # the 2021 code: f's backward, after the Linear's
            grads = blocks
            overlap, hide = ("none: exposed (2021 Megatron-LM / Megatron-DeepSpeed: reduced in the backward of "
                             "copy_to_tensor_model_parallel_region, after the Linear's backward)"), ""
        elif style == "megatron":   # f operator: one all-reduce of the block input's gradient per block
            grads = blocks
            overlap, hide = ("with the weight-gradient GEMM of its column-parallel Linear (Megatron-LM "
                             "async_tensor_model_parallel_allreduce)"), "wgrad"
        else:                     # DTensor ColwiseParallel: each column-parallel Linear's input gradient
            grads = 3 + ((2 if spec.gated_mlp else 1) if blocks == 2 else 0)
            overlap, hide = "none: exposed (DTensor redistributes each input gradient synchronously)", ""
        out.append(Collective("tp_allreduce_backward", "tp_comm", "all_reduce", hidden, tp, link, grads * passes, overlap,
                              hide))
        return out
    # sequence parallel (Korthikanti et al. 2022, Sec. 4.2.2): g = all-gather / reduce-scatter pairs
    out.append(Collective("sp_allgather_forward", "tp_comm", "all_gather", hidden, tp, link, blocks * (1 + refwd) * passes,
                          "none: exposed (the column-parallel GEMM needs the gathered input)"))
    out.append(Collective("sp_reducescatter_forward", "tp_comm", "reduce_scatter", hidden, tp, link,
                          blocks * (1 + refwd) * passes, "none: exposed"))
    out.append(Collective("sp_allgather_backward", "tp_comm", "all_gather", hidden, tp, link, blocks * passes,
                          "none: exposed (gradient of the forward reduce-scatter, needed by the next dgrad)"))
    megatron = style == "megatron" and overlap_grads
    out.append(Collective("sp_reducescatter_backward", "tp_comm", "reduce_scatter", hidden, tp, link, blocks * passes,
                          "with the weight-gradient GEMM of its column-parallel Linear" if megatron else "none: exposed",
                          "wgrad" if megatron else ""))
    if style == "megatron":   # the forward all-gather is not saved: backward gathers the input again for wgrad
        out.append(Collective("sp_allgather_backward_input", "tp_comm", "all_gather", hidden, tp, link, blocks * passes,
                              "with the input-gradient GEMM of its Linear (Megatron-LM launches it before dgrad)"
                              if megatron else "none: exposed", "dgrad" if megatron else ""))
    return out


def _dp_collectives(recipe, params: float, dp: int, zero: int, micro_batches: int, style: str, link: str,
                    overlap_grads: bool = True):
    """Data-parallel collectives of `params` parameters over `dp` ranks (ZeRO, Rajbhandari et al. 2019, Sec. 5;
    PyTorch DDP / FSDP2). Gradients in the recipe's gradient dtype, parameters in its parameter dtype.

    `overlap_grads` False (Megatron style only): the gradient reduction waits for the last micro-batch, as Megatron-LM
    without --overlap-grad-reduce does (its default; the 2021 code). With it (Megatron Bridge's and NeMo's
    performance recipes set overlap_grad_reduce) the buckets reduce beside the last backward, as DDP's do."""
    grads = params * recipe.grads_bytes_per_param
    weights = params * recipe.params_bytes_per_param
    # Megatron-LM reduces the gradient buffer after the last micro-batch unless --overlap-grad-reduce is given
    # (megatron/training/arguments.py: default False); its 2021 train_step all-reduced after forward_backward_func
    # (megatron/training.py at commit aed2f75). PyTorch DDP / ZeRO-1/2 buckets run beside the last backward.
    megatron = ("none: exposed (Megatron-LM reduces gradients after the last micro-batch: --overlap-grad-reduce is "
                "off by default)", "")
    if zero == 0:
        overlap = megatron if style == "megatron" and not overlap_grads else (
            "with the last micro-batch's backward (DDP buckets), unless pipelined", "backward_last")
        return [Collective("dp_grad_allreduce", "dp_comm", "all_reduce", grads, dp, link, 1, *overlap)]
    if zero in (1, 2):
        rs_count = micro_batches if zero == 2 and style == "torch" else 1
        overlap = megatron if style == "megatron" and not overlap_grads else (
            "with the last micro-batch's backward (bucketed), unless pipelined", "backward_last")
        return [Collective("dp_grad_reducescatter", "dp_comm", "reduce_scatter", grads, dp, link, rs_count, *overlap),
                Collective("dp_param_allgather", "dp_comm", "all_gather", weights, dp, link, 1,
                           "none: exposed (after the optimizer step, before the next forward)")]
    # ZeRO-3 / FSDP: parameters gathered before each forward and again before each backward (FSDP2
    # reshard_after_forward=True), gradients reduce-scattered after each micro-batch's backward
    return [Collective("fsdp_param_allgather_forward", "dp_comm", "all_gather", weights, dp, link, micro_batches,
                       "with the previous layer's forward (prefetch)", "forward"),
            Collective("fsdp_param_allgather_backward", "dp_comm", "all_gather", weights, dp, link, micro_batches,
                       "with the next layer's backward (prefetch)", "backward"),
            Collective("fsdp_grad_reducescatter", "dp_comm", "reduce_scatter", grads, dp, link, micro_batches,
                       "with the backward of earlier layers", "backward")]


def bytes_sent_per_rank(spec, shard, run, **options) -> dict:
    """Bytes one rank sends in one step, by part (tp_comm, cp_comm, pp_comm, dp_comm) and "total".

    Takes the arguments of `step_collectives`. For the measured side (e.g. 2 ranks of DDP over gloo), compare
    "total" with the bytes the process group moved; the parts say where a gap comes from.
    """
    parts = {"tp_comm": 0.0, "cp_comm": 0.0, "pp_comm": 0.0, "dp_comm": 0.0}
    for c in step_collectives(spec, shard, run, **options):
        parts[c.part] += c.bytes_per_step
    parts["total"] = sum(parts.values())
    return parts
