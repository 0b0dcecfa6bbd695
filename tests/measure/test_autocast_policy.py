"""The fake-tensor dry run uses CPU autocast; a GPU run uses CUDA's. For trainledger's Transformer they cast alike.

CUDA autocast runs the ops of aten/src/ATen/autocast_mode.h's AT_FORALL_FP32 and AT_FORALL_FP32_SET_OPT_DTYPE
lists in fp32 (pow, rsqrt, exp, layer_norm, softmax, log_softmax, sum, nll_loss, ...); CPU autocast's lists differ
(it leaves most of these in the input's dtype). They give different saved tensors only where such an op receives
16-bit input. Our models upcast explicitly wherever it matters (RMSNorm's x.float(), the loss's logits.float(),
the router's and the soft-capped attention's fp32 softmax), so under autocast no op of CUDA's fp32 list receives a
16-bit tensor in the forward pass of any family below, and none of CUDA's extra 16-bit ops (mv, addmv, addr) runs.
So the CPU dry run predicts the CUDA step (as measured on the H100: gpt2 8 x 1024, every memory row exact).
"""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from trainledger.measure.compare import _fake_mode
from trainledger.models import build_model
from trainledger.specs import get_model

# aten ops (as a dispatch mode sees them, after decomposition) of CUDA autocast's fp32 lists
CUDA_FP32 = {"acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal", "rsqrt",
             "sinh", "tan", "pow", "softplus", "native_layer_norm", "native_group_norm", "frobenius_norm",
             "nuclear_norm", "cosine_similarity", "nll_loss_forward", "nll_loss2d_forward", "kl_div", "l1_loss",
             "smooth_l1_loss", "huber_loss", "mse_loss", "binary_cross_entropy_with_logits", "dist", "pdist",
             "_cdist_forward", "renorm", "logsumexp", "prod", "_softmax", "_log_softmax", "cumprod", "cumsum",
             "linalg_vector_norm", "linalg_matrix_norm", "sum"}
CUDA_ONLY_16BIT = {"mv", "addmv", "addr"}
FAMILIES = ["gpt2", "llama-2-7b", "gemma-2-2b", "gemma-3-1b", "qwen3-8b", "mpt-7b", "mixtral-8x7b",
            "pythia-1.4b", "phi-3-mini-4k"]


class Casts(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.differ = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._overloadpacket.__name__
        floats = {t.dtype for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor) and t.is_floating_point()}
        if (name in CUDA_FP32 and floats & {torch.bfloat16, torch.float16}) or name in CUDA_ONLY_16BIT:
            self.differ.append(name)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("name", FAMILIES)
def test_cpu_and_cuda_autocast_cast_our_transformer_alike(name):
    spec = get_model(name)
    with _fake_mode():
        model = build_model(spec)
        x = torch.zeros(1, 64, dtype=torch.long)
        casts = Casts()
        with casts, torch.autocast("cpu", dtype=torch.bfloat16):
            model(x, x)
    assert casts.differ == []


def test_the_check_sees_an_op_that_would_differ():
    with _fake_mode():
        x = torch.zeros(4, 8, dtype=torch.bfloat16)
        casts = Casts()
        with casts, torch.autocast("cpu", dtype=torch.bfloat16):
            torch.softmax(x, -1)           # bf16 on CPU autocast, fp32 on CUDA's
    assert casts.differ == ["_softmax"]
