"""What torch.compile, a compiled chunked cross-entropy and a fused AdamW keep, measured on CPU against the accounting.

AOTAutograd's min-cut partitioner decides what a compiled graph saves for backward, on CPU as on CUDA (it runs before
Inductor's code generation), so the bytes a compiled Hugging Face Llama layer saves here are the bytes it saves on a
GPU. Saved tensors are read from the compiled node (CompiledFunctionBackward.saved_tensors), parameters excluded.
"""

import pytest
import torch

from trainledger.account.memory.activations import ActivationShard, activations_bytes
from trainledger.account.memory.per_gpu import memory_per_gpu
from trainledger.specs.hardware import get_gpu
from trainledger.specs.hf_config import spec_from_config_dict
from trainledger.specs.run import Hardware, Run

transformers = pytest.importorskip("transformers")

B, T = 2, 64
CONFIG = {"model_type": "llama", "hidden_size": 192, "intermediate_size": 512, "num_attention_heads": 6,
          "num_key_value_heads": 2, "num_hidden_layers": 1, "vocab_size": 512, "max_position_embeddings": 256,
          "tie_word_embeddings": False}


def _saved(grad_fn, skip: set) -> int:
    """Bytes of the storages saved by the autograd graph under `grad_fn`, `skip` (storage pointers) left out."""
    seen, nodes, stack = {}, set(), [grad_fn]
    while stack:
        node = stack.pop()
        if node is None or id(node) in nodes:
            continue
        nodes.add(id(node))
        for t in getattr(node, "saved_tensors", ()) or ():
            if isinstance(t, torch.Tensor):
                seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        stack.extend(n for n, _ in node.next_functions)
    return sum(v for k, v in seen.items() if k not in skip)


def _eager_saved(fn, x, skip: set) -> int:
    seen = {}

    def pack(t):
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(x)
    return sum(v for k, v in seen.items() if k not in skip)


def _llama_layer():
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding
    config = LlamaConfig(**{k: v for k, v in CONFIG.items() if k != "model_type"})
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    layer = LlamaDecoderLayer(config, 0).to(torch.bfloat16)
    x = torch.randn(B, T, CONFIG["hidden_size"], dtype=torch.bfloat16, requires_grad=True)
    positions = torch.arange(T)[None].expand(B, T)
    cos, sin = LlamaRotaryEmbedding(config)(x, positions)

    def forward(h):
        out = layer(h, position_embeddings=(cos, sin), attention_mask=None, position_ids=positions)
        return out[0] if isinstance(out, tuple) else out
    skip = {p.untyped_storage().data_ptr() for p in layer.parameters()} | {
        cos.untyped_storage().data_ptr(), sin.untyped_storage().data_ptr()}
    return forward, x, skip


@pytest.mark.slow
def test_a_compiled_llama_layer_saves_what_the_accounting_says():
    """Eager and compiled, the bytes one bf16 Llama layer saves equal activations_bytes' per_layer (compiled: RMSNorm
    keeps its input and rstd, the gated MLP three d_ff-wide tensors instead of four)."""
    forward, x, skip = _llama_layer()
    spec = spec_from_config_dict(CONFIG)
    predicted = {c: activations_bytes(spec, ActivationShard(B, T, "bf16", compiled=c))["per_layer"]
                 for c in (False, True)}
    eager = _eager_saved(forward, x, skip)
    torch._dynamo.reset()
    compiled = _saved(torch.compile(forward)(x).grad_fn, skip)
    assert eager == pytest.approx(predicted[False], rel=0.02)
    assert compiled == pytest.approx(predicted[True], rel=0.02)
    assert compiled < eager


@pytest.mark.slow
def test_a_compiled_cross_entropy_chunk_saves_its_16_bit_logits_and_two_floats_a_row():
    """torchtune's compute_cross_entropy (F.cross_entropy(logits.float(), labels)) compiled: the bf16 logits and each
    row's max and logsumexp (fp32) are saved, not an fp32 log-softmax; the gradient comes back in bf16."""
    n, v = 256, 2048
    logits = torch.randn(n, v, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, v, (n,))

    def loss(x):
        return torch.nn.functional.cross_entropy(x.float(), labels, reduction="sum")
    skip = {labels.untyped_storage().data_ptr()}
    torch._dynamo.reset()
    out = torch.compile(loss)(logits)
    assert _saved(out.grad_fn, skip) == n * v * 2 + 2 * n * 4
    out.backward()
    assert logits.grad.dtype == torch.bfloat16
    assert _eager_saved(loss, logits, skip) == n * v * 4 + 4      # eager: the fp32 log-softmax (and total_weight)


def _step_peak_over_states(fused: bool) -> int:
    """Bytes the optimizer step of torch.optim.AdamW allocates beyond what exists before it, states created."""
    from trainledger.measure.memory import LiveTracker
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(256, 256)) for _ in range(4)]
    for p in params:
        p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW(params, fused=fused, foreach=None if fused else True)
    opt.step()                                     # states exist from here on
    tracker = LiveTracker()
    with tracker:
        opt.step()
    return tracker.peak_bytes


def test_fused_adamw_steps_without_the_foreach_temporary():
    """foreach AdamW's step makes one state-sized temporary (the √v list: 4 B per parameter here); fused makes none,
    which is what --optimizer-impl fused removes from the optimizer moment."""
    n = 4 * 256 * 256
    assert _step_peak_over_states(fused=False) >= 4 * n
    assert _step_peak_over_states(fused=True) < 0.01 * 4 * n
    spec = spec_from_config_dict(CONFIG)
    hardware = Hardware(get_gpu("a100-80gb"), 1)
    runs = {impl: Run().with_(batch_size=1, seq_len=8, precision="bf16", optimizer_impl=impl)
            for impl in ("foreach", "fused")}
    peak = {impl: memory_per_gpu(spec, hardware, run) for impl, run in runs.items()}
    assert peak["foreach"]["peak_moment"] == "optimizer"
    temporary = peak["foreach"]["optimizer_bytes"] / 2
    assert peak["foreach"]["peak_bytes"] - peak["fused"]["peak_bytes"] == pytest.approx(temporary, rel=0.2)


def test_separate_embedding_units_gather_only_the_head_beside_the_blocks():
    """--fsdp-separate-embeddings (torchtune's custom_sharded_layers): the root unit counted at the start of backward
    is the head and the final norm, not the embedding as well."""
    from trainledger.account.counting.placement import params_per_gpu
    from trainledger.account.memory.fsdp import units
    spec = spec_from_config_dict(CONFIG)
    placement = params_per_gpu(spec, 1, 1)
    together, apart = units(spec, placement), units(spec, placement, separate_embeddings=True)
    d, v = CONFIG["hidden_size"], CONFIG["vocab_size"]
    assert together["root"] == 2 * v * d + d
    assert apart["root"] == v * d + d
    assert apart["block"] == together["block"]


def test_lora_under_fsdp_gathers_the_stored_base():
    """LoRA over 8 GPUs with ZeRO-3: the gathered units are in the GPU's peak (the base in bf16, its NF4 bytes under
    QLoRA), the gradients only the adapters'."""
    hardware = Hardware(get_gpu("a100-80gb"), 8)
    base = dict(batch_size=1, seq_len=512, precision="bf16", dp=8, zero=3, global_batch_size=8)
    spec = spec_from_config_dict(dict(CONFIG, num_hidden_layers=4, hidden_size=1024, intermediate_size=2816,
                                      num_attention_heads=8, num_key_value_heads=8))
    full = memory_per_gpu(spec, hardware, Run().with_(**base))
    lora = memory_per_gpu(spec, hardware, Run().with_(**base, method="lora"))
    qlora = memory_per_gpu(spec, hardware, Run().with_(**base, method="qlora"))
    sharded_base = full["n_params"] * 2 / 8
    gathered = full["params_bytes"] - sharded_base
    assert gathered > 0
    assert lora["params_bytes"] - sharded_base == pytest.approx(gathered, rel=0.02)
    assert qlora["params_bytes"] < lora["params_bytes"] / 2
    assert lora["grads_bytes"] < 0.05 * full["grads_bytes"]
