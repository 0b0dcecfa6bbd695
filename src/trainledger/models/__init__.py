"""Torch modules: the lecture's `Linear` and `Cruncher`, and a decoder-only `Transformer` built from a `TransformerSpec`.

    from trainledger.models import Transformer, Linear, Cruncher
    with torch.device("meta"):
        model = Transformer(get_model("llama-2-7b"))   # no memory, exact parameter shapes
    model.n_params()                                   # 6,738,415,616

What each block computes and which tensors autograd saves is written down in docs/models.md.
"""

from trainledger.models.cruncher import Cruncher
from trainledger.models.linear import Linear
from trainledger.models.primitives import Embedding, silu, softmax
from trainledger.models.transformer import RECOMPUTE, Transformer, build_model

__all__ = ["Cruncher", "Embedding", "Linear", "Transformer", "RECOMPUTE", "build_model", "silu", "softmax"]
