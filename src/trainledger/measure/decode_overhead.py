"""The CPU cost per operator of our Transformer's eager KV-cache decoding step, for measure/calibrate.py.

account/time/inference.py predicts a decoding step of a small model on a CPU as its operator count (account/
inference_ops.py) × this cost + its bytes over the bandwidth; this measures the cost where arithmetic is negligible.
"""

from __future__ import annotations

import torch

DECODE_SAMPLES = 25   # decoding steps are ~1 ms: many short samples, so that one falls in an undisturbed stretch


def decode_op_overhead_seconds(device: str, seconds_per_call) -> float:
    """Seconds per dispatched operator of a KV-cache decoding step of our Transformer, at sizes where arithmetic is
    negligible (d_model 8, 2 layers): the Python calls, dispatcher and allocator work every operator costs in eager
    inference, beyond the tight chain of op_overhead_seconds. The mean of a GPT-2-style and a Llama-style model
    (LayerNorm/GELU/learned positions vs RMSNorm/SwiGLU/RoPE/grouped-query attention: their mixes of module calls
    and plain ops differ), each the fastest sample of steps at a fixed position, over the operators it dispatches
    (a TorchDispatchMode count). `seconds_per_call(fn, device, samples)`: the calibration's timer (the fastest of
    timed samples)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from trainledger.models.kv_cache import KVCache
    from trainledger.models.transformer import Transformer
    from trainledger.specs.model import TransformerSpec

    class Count(TorchDispatchMode):
        ops = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops += 1
            return func(*args, **(kwargs or {}))

    small = dict(vocab_size=16, d_model=8, n_layers=2, n_heads=2, d_ff=16, max_seq_len=64)
    specs = (TransformerSpec(name="gpt2-like", position="learned", norm="layernorm", norm_bias=True, mlp="gelu",
                             qkv_bias=True, attn_out_bias=True, mlp_bias=True, tied_embeddings=True, **small),
             TransformerSpec(name="llama-like", n_kv_heads=1, **small))
    per_op = []
    torch.manual_seed(0)
    for spec in specs:
        model = Transformer(spec, device=device).eval()
        with torch.inference_mode():
            cache = KVCache(spec, 1, 32, device=device)
            model.forward_cached(torch.zeros(1, 16, dtype=torch.long, device=device), cache)
            token = torch.zeros(1, 1, dtype=torch.long, device=device)

            def step():
                cache.length = 16                  # the same position every time: the same work
                model.forward_cached(token, cache)
            counter = Count()
            with counter:
                step()
            per_op.append(seconds_per_call(step, device, samples=DECODE_SAMPLES) / counter.ops)
    return sum(per_op) / len(per_op)
