"""Feed-forward layers: GELU MLP (GPT-2, GPT-NeoX, MPT), SwiGLU (Llama) / GeGLU (Gemma), and a top-k mixture of
experts (Mixtral, Qwen-MoE with a shared expert)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange
from jaxtyping import Float
from torch import Tensor, nn
from torch._subclasses.fake_tensor import FakeTensor


class GeluMLP(nn.Module):
    """down(gelu(up(x))): two matrices d_model -> d_ff -> d_model (GPT-2; Radford et al. 2019).

    GELU (Hendrycks & Gimpel 2016, arXiv:1606.08415) in its tanh approximation (`approximate="tanh"`:
    GPT-2's "gelu_new") or exact with erf (`"none"`: GPT-NeoX/Pythia "gelu", MPT). Either way one F.gelu call
    that saves its input. Matmul FLOPs per token: 2·2·d_model·d_ff.
    """

    def __init__(self, d_model: int, d_ff: int, bias: bool, approximate: str = "tanh", *, device=None, dtype=None):
        super().__init__()
        self.approximate = approximate
        self.up = nn.Linear(d_model, d_ff, bias=bias, device=device, dtype=dtype)
        self.down = nn.Linear(d_ff, d_model, bias=bias, device=device, dtype=dtype)

    def forward(self, x: Float[Tensor, "... d_model"]) -> Float[Tensor, "... d_model"]:
        return self.down(F.gelu(self.up(x), approximate=self.approximate))


class SwiGLU(nn.Module):
    """down(act(gate(x)) · up(x)): three matrices (Shazeer 2020, arXiv:2002.05202).

    act = silu (SwiGLU: Llama, Qwen, Mistral, Phi-3) or, with `gelu=` "tanh"/"none", GELU (GeGLU: Gemma's
    gelu_pytorch_tanh). Matmul FLOPs per token: 3·2·d_model·d_ff.
    """

    def __init__(self, d_model: int, d_ff: int, bias: bool, gelu: str | None = None, *, device=None, dtype=None):
        super().__init__()
        self.gelu = gelu
        self.gate = nn.Linear(d_model, d_ff, bias=bias, device=device, dtype=dtype)
        self.up = nn.Linear(d_model, d_ff, bias=bias, device=device, dtype=dtype)
        self.down = nn.Linear(d_ff, d_model, bias=bias, device=device, dtype=dtype)

    def forward(self, x: Float[Tensor, "... d_model"]) -> Float[Tensor, "... d_model"]:
        gate = self.gate(x)
        act = F.silu(gate) if self.gelu is None else F.gelu(gate, approximate=self.gelu)
        return self.down(act * self.up(x))


def make_expert(spec, d_ff: int | None = None, *, device=None, dtype=None) -> nn.Module:
    """One MLP of the kind `spec.mlp` names, d_model -> d_ff (default spec.d_ff) -> d_model, biases per `spec.mlp_bias`."""
    d_ff = spec.d_ff if d_ff is None else d_ff
    if spec.gated_mlp:
        gelu = spec.gelu_approximate if spec.mlp == "geglu" else None
        return SwiGLU(spec.d_model, d_ff, spec.mlp_bias, gelu, device=device, dtype=dtype)
    return GeluMLP(spec.d_model, d_ff, spec.mlp_bias, spec.gelu_approximate, device=device, dtype=dtype)



def with_shared_expert(out: Tensor, flat: Tensor, shared_expert: nn.Module | None, gate: nn.Module | None) -> Tensor:
    """`out` plus the shared expert's output on the tokens `flat` (scaled by sigmoid(gate) when gated); `out` itself
    when the model has none. Used by MoE and by train.expert_parallel's sharded MoE alike."""
    if shared_expert is None:
        return out
    shared = shared_expert(flat)
    if gate is not None:
        shared = torch.sigmoid(gate(flat)) * shared
    return out + shared

class MoE(nn.Module):
    """Sparse mixture of experts: a bias-free router picks `experts_per_token` of `n_experts` MLPs per token (Mixtral, arXiv:2401.04088).

    weights = softmax(router(x)) in fp32, keep the top k, renormalise them to sum to 1 (as Hugging Face
    Mixtral does; Qwen-MoE's norm_topk_prob = false keeps the raw probabilities), cast to x's dtype;
    output = Σ_k weight_k · expert_k(x). Each expert runs only on the tokens routed to it (gathered with
    index_select, scattered back with an index add), so the matmul FLOPs are exactly 2·N·d_model·n_experts
    (router) + Σ_e (tokens routed to e) × one expert's matmul FLOPs per token, and over all experts the
    routed tokens sum to N·k.
    Shared expert (Qwen2-MoE, `shared_expert_d_ff`): one more MLP that every token runs through, scaled by
    sigmoid(x·w_gate) when `shared_expert_gate` (w_gate: d_model -> 1), added to the routed output.
    """

    def __init__(self, spec, *, device=None, dtype=None):
        super().__init__()
        self.top_k = spec.experts_per_token
        self.renormalize = spec.renormalize_topk
        self.router = nn.Linear(spec.d_model, spec.n_experts, bias=spec.router_bias, device=device, dtype=dtype)
        self.experts = nn.ModuleList([make_expert(spec, device=device, dtype=dtype) for _ in range(spec.n_experts)])
        shared = spec.shared_expert_d_ff
        self.shared_expert = make_expert(spec, shared, device=device, dtype=dtype) if shared else None
        self.shared_expert_gate = (nn.Linear(spec.d_model, 1, bias=False, device=device, dtype=dtype)
                                   if spec.shared_expert_gate else None)

    def route(self, x: Float[Tensor, "tokens d_model"]) -> tuple[Tensor, Tensor]:
        """(weights, expert index) of shape (tokens, top_k): the top-k softmax probabilities (renormalised to sum
        to 1 when `renormalize`) in x's dtype."""
        probs = torch.softmax(self.router(x).float(), dim=-1)
        top_weights, top_index = torch.topk(probs, self.top_k, dim=-1)
        if self.renormalize:
            top_weights = top_weights / top_weights.sum(dim=-1, keepdim=True)
        return top_weights.to(x.dtype), top_index

    def forward(self, x: Float[Tensor, "batch seq d_model"]) -> Float[Tensor, "batch seq d_model"]:
        batch = x.shape[0]
        flat = rearrange(x, "b t d -> (b t) d")
        top_weights, top_index = self.route(flat)
        out = torch.zeros_like(flat)
        # meta and fake tensors have no data to route by: slot p of the N·k slots goes to expert p mod E (a balanced
        # routing; FLOPs and saved bytes depend only on the N·k total, not on which expert gets which token)
        shapes_only = x.device.type == "meta" or isinstance(x, FakeTensor)
        for e, expert in enumerate(self.experts):
            if shapes_only:
                position = torch.arange(e, flat.shape[0] * self.top_k, len(self.experts), device=x.device)
                token_idx, slot = position // self.top_k, position % self.top_k
            else:
                token_idx, slot = torch.where(top_index == e)
            if token_idx.numel() == 0:
                continue
            y = expert(flat.index_select(0, token_idx)) * top_weights[token_idx, slot, None]
            # Scatter-add back in place. index_put_(accumulate=True) is index_add_ that saves only the indices for
            # backward (index_add_ also keeps `y`, N·k·d_model extra bytes); each token appears at most once per expert.
            out.index_put_((token_idx,), y, accumulate=True)
        out = with_shared_expert(out, flat, self.shared_expert, self.shared_expert_gate)
        return rearrange(out, "(b t) d -> b t d", b=batch)
