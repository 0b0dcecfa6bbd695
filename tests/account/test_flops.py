"""account/counting/flops.py against published formulas (Korthikanti Eq. 7, Megatron Eq. 3, PaLM App. B, the lecture) and a hand count."""

import pytest

from trainledger.account.counting import flops as F
from trainledger.account.counting import korthikanti as K
from trainledger.errors import TrainledgerError
from trainledger.specs import get_model
from trainledger.specs.model import CruncherSpec, TransformerSpec


def gpt_style(h=1024, L=12, a=16, V=51200):
    """The model of Korthikanti/Megatron: d_ff = 4h, GELU MLP, tied LM head, no biases counted (none present)."""
    return TransformerSpec(name="gpt-style", vocab_size=V, d_model=h, n_layers=L, n_heads=a, d_ff=4 * h,
                           max_seq_len=4096, position="rope", norm="layernorm", mlp="gelu", tied_embeddings=True)


@pytest.mark.parametrize("h, L, a, V, s, B", [
    (1024, 12, 16, 51200, 2048, 8),
    (12288, 96, 96, 51200, 2048, 1536),       # GPT-3 175B as in Korthikanti Table 3
    (4096, 32, 32, 32000, 4096, 3),
])
def test_korthikanti_eq7_model_flops(h, L, a, V, s, B):
    # Korthikanti et al. 2022, App. A, Eq. 7: 72·B·L·s·h²·(1 + s/(6h) + V/(12hL)), full s×s attention
    spec = gpt_style(h, L, a, V)
    ours = F.flops_per_step(spec, B, s, attention="full")["train_flops_per_step"]
    assert ours == pytest.approx(K.model_flops_per_iteration(B, s, L, h, V), rel=1e-12)


@pytest.mark.parametrize("h, L, a, V, s, B", [(1024, 12, 16, 51200, 2048, 8), (12288, 96, 96, 51200, 2048, 1536)])
def test_korthikanti_selective_recompute_hardware_flops(h, L, a, V, s, B):
    # Korthikanti App. A: selective recompute hardware FLOPs 72BLsh²(1 + s/(3h) + V/(12hL)). Its increment over
    # Eq. 7, 12·B·L·s²·h, is the attention core's forward + backward (3 × its forward 4·B·L·s²·h). What a
    # checkpointed attention core re-executes is its forward once: we add 4·B·L·s²·h, a third of the paper's
    # increment (the same one-extra-forward rule that reproduces Megatron's Eq. 3 exactly for full recompute).
    spec = gpt_style(h, L, a, V)
    steps = F.flops_per_step(spec, B, s, recompute="selective")
    model = K.model_flops_per_iteration(B, s, L, h, V)
    published = K.selective_recompute_hardware_flops_per_iteration(B, s, L, h, V)
    assert published - model == pytest.approx(3 * 4 * B * L * s * s * h, rel=1e-12)
    assert steps["train_flops_per_step"] == pytest.approx(model, rel=1e-12)
    assert steps["hardware_flops_per_step"] == pytest.approx(model + (published - model) / 3, rel=1e-12)
    assert steps["hardware_flops_per_step"] == pytest.approx(72 * B * L * s * h**2 * (1 + s / (6 * h) + s / (18 * h) + V / (12 * h * L)), rel=1e-12)


@pytest.mark.parametrize("h, L, a, V, s, B", [(1024, 12, 16, 51200, 2048, 8), (12288, 96, 96, 51200, 2048, 1536)])
def test_megatron_eq3_full_recompute(h, L, a, V, s, B):
    # Narayanan et al. 2021, Eq. 3: 96·B·s·l·h²·(1 + s/(6h) + V/(16lh)) includes one recompute forward of the layers
    spec = gpt_style(h, L, a, V)
    ours = F.flops_per_step(spec, B, s, recompute="full")["hardware_flops_per_step"]
    assert ours == pytest.approx(K.megatron_flops_per_iteration(B, s, L, h, V), rel=1e-12)


def test_published_formulas_hand_values():
    # 72·1·1·1·1·(1 + 1/6 + 1/12) = 90; 96·(1 + 1/6 + 1/16) = 118; selective 72·(1 + 1/3 + 1/12) = 102
    assert K.model_flops_per_iteration(1, 1, 1, 1, 1) == pytest.approx(90)
    assert K.megatron_flops_per_iteration(1, 1, 1, 1, 1) == pytest.approx(118)
    assert K.selective_recompute_hardware_flops_per_iteration(1, 1, 1, 1, 1) == pytest.approx(102)


@pytest.mark.parametrize("name", ["gpt2", "llama-2-7b", "tiny"])
def test_palm_formula(name):
    # PaLM (arXiv:2204.02311) App. B: 6N + 12·L·H·Q·T with N the matmul weights a token meets
    spec = get_model(name)
    T = spec.max_seq_len
    palm = F.palm_train_flops_per_token(F.matmul_params_per_token(spec), spec.n_layers, spec.n_heads, spec.head_dim, T)
    assert F.train_flops_per_token(spec, T, "full") == pytest.approx(palm, rel=1e-12)


def test_gpt2_hand_count():
    # GPT-2 small: 12 layers of q,k,v,o (4·768²) + MLP (2·768·3072), LM head 768·50257, attention 2·2·T·768 per layer
    spec, T = get_model("gpt2"), 1024
    matmuls = 12 * (4 * 768 * 768 + 2 * 768 * 3072) + 768 * 50257
    forward = 2 * matmuls + 12 * 2 * 2 * T * 768
    assert F.forward_flops_per_token(spec, T) == forward
    assert F.train_flops_per_token(spec, T) == 3 * forward
    steps = F.flops_per_step(spec, 8, T)
    assert steps["forward_flops_per_step"] == forward * 8 * T
    assert steps["train_flops_per_step"] == 3 * forward * 8 * T
    assert steps["hardware_flops_per_step"] == steps["train_flops_per_step"]


def test_breakdown_sums_to_total():
    spec = get_model("llama-2-7b")
    parts = F.forward_flops_breakdown(spec, 4096)
    assert parts["total"] == pytest.approx(sum(v for k, v in parts.items() if k != "total"))
    assert parts["total"] == pytest.approx(F.forward_flops_per_token(spec, 4096))
    assert parts["mlp_gate"] == parts["mlp_up"] == parts["mlp_down"] == 32 * 2 * 4096 * 11008


def test_gqa_sizes_and_causal_half():
    # 8 query heads and 2 kv heads of size 8: k and v project 64 -> 16, attention scores still use all 8 query heads
    spec = TransformerSpec(name="gqa", vocab_size=100, d_model=64, n_layers=2, n_heads=8, n_kv_heads=2, d_ff=96)
    parts = F.forward_flops_breakdown(spec, 32)
    assert parts["k_proj"] == parts["v_proj"] == 2 * 2 * 64 * 16
    assert parts["q_proj"] == parts["o_proj"] == 2 * 2 * 64 * 64
    assert parts["attention_scores"] == 2 * 2 * (2 * 32 * 8 * 8)
    causal = F.forward_flops_breakdown(spec, 32, "causal")
    assert causal["attention_scores"] == parts["attention_scores"] / 2
    assert causal["total"] == parts["total"] - parts["attention_scores"] / 2


def test_moe_counts_router_and_active_experts():
    dense = TransformerSpec(name="d", vocab_size=100, d_model=32, n_layers=3, n_heads=4, d_ff=64)
    moe = dense.with_(name="m", n_experts=8, experts_per_token=2)
    d_parts, m_parts = F.forward_flops_breakdown(dense, 16), F.forward_flops_breakdown(moe, 16)
    assert m_parts["router"] == 3 * 2 * 32 * 8
    for name in ("mlp_gate", "mlp_up", "mlp_down"):
        assert m_parts[name] == 2 * d_parts[name]
    assert "router" not in d_parts


def test_recompute_extra_flops():
    spec, T = get_model("gpt2"), 1024
    attention = F.attention_flops_per_token(spec, T)
    head = 2 * 768 * 50257
    assert F.recompute_flops_per_token(spec, T, recompute="selective") == attention
    assert F.recompute_flops_per_token(spec, T, recompute="full") == F.forward_flops_per_token(spec, T) - head
    assert F.hardware_flops_per_token(spec, T, recompute="none") == F.train_flops_per_token(spec, T)


def test_lecture_matmul_and_6nd():
    # CS336 Lecture 2: two-layer linear net B=1024, D=256, K=64: forward 167,772,160, backward 335,544,320
    B, D, K_ = 1024, 256, 64
    forward = F.matmul_flops(B, D, D) + F.matmul_flops(B, D, K_)
    assert forward == 167_772_160 and 2 * forward == 335_544_320
    # 70B parameters × 15T tokens: 6ND = 6.3e24
    assert F.train_flops(70e9, 15e12) == pytest.approx(6.3e24)
    assert F.kaplan_train_flops_per_token(70e9) * 15e12 == pytest.approx(6.3e24)


def test_cruncher_toy_step_flops():
    # CS336 Lecture 2 toy optimizer example: B=2, D=4, 2 layers, 36 params -> 6·B·params = 432 FLOPs per step
    spec = CruncherSpec(dim=4, n_layers=2)
    assert F.matmul_params_per_token(spec) == 36
    assert F.flops_per_step(spec, 2, 1)["train_flops_per_step"] == 432


def test_kaplan_forward_formula():
    # Kaplan et al. 2020 Table 1: C_forward = 2N + 2·n_layer·n_ctx·d_attn
    assert F.kaplan_forward_flops_per_token(85e6, 12, 1024, 768) == pytest.approx(2 * 85e6 + 2 * 12 * 1024 * 768)


def test_bad_choices_name_the_flag():
    spec = get_model("gpt2")
    with pytest.raises(TrainledgerError, match="--attention"):
        F.forward_flops_per_token(spec, 16, "sliding")
    with pytest.raises(TrainledgerError, match="--recompute"):
        F.hardware_flops_per_token(spec, 16, recompute="some")


MEASURED_SPECS = {
    "gqa-swiglu": TransformerSpec(name="a", vocab_size=97, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=48, max_seq_len=64),
    "gpt2-style": TransformerSpec(name="b", vocab_size=97, d_model=32, n_layers=2, n_heads=4, d_ff=64, max_seq_len=64,
                                  position="learned", norm="layernorm", norm_bias=True, mlp="gelu", qkv_bias=True,
                                  attn_out_bias=True, mlp_bias=True, tied_embeddings=True),
    "moe-top2": TransformerSpec(name="c", vocab_size=97, d_model=32, n_layers=2, n_heads=4, n_kv_heads=1, d_ff=48,
                                max_seq_len=64, n_experts=4, experts_per_token=2),
}


@pytest.mark.parametrize("spec", MEASURED_SPECS.values(), ids=MEASURED_SPECS.keys())
def test_prediction_equals_flop_counter_on_our_transformer(spec):
    # Measurement: torch FlopCounterMode (+ CPU SDPA formula) over a real forward and backward of trainledger's Transformer
    torch = pytest.importorskip("torch")
    from trainledger.measure.flops import count_step_flops
    from trainledger.models import Transformer

    torch.manual_seed(0)
    model = Transformer(spec)
    B, T = 2, 16
    idx = torch.randint(0, spec.vocab_size, (B, T))
    measured = count_step_flops(lambda: model(idx, idx)[1])
    predicted = F.flops_per_step(spec, B, T)
    assert measured.forward.total == predicted["forward_flops_per_step"]
    assert measured.train == predicted["train_flops_per_step"]


@pytest.mark.parametrize("recompute", ["selective", "full"])
def test_hardware_flops_equal_flop_counter_with_checkpointing(recompute):
    # Measurement: with torch.utils.checkpoint the backward re-runs the checkpointed forward, and the counter sees it.
    # This is what settles our recompute convention (one extra forward of what is checkpointed).
    torch = pytest.importorskip("torch")
    from trainledger.measure.flops import count_step_flops
    from trainledger.models import Transformer

    spec = MEASURED_SPECS["gqa-swiglu"]
    torch.manual_seed(0)
    model = Transformer(spec, recompute=recompute).train()
    B, T = 2, 16
    idx = torch.randint(0, spec.vocab_size, (B, T))
    measured = count_step_flops(lambda: model(idx, idx)[1])
    predicted = F.flops_per_step(spec, B, T, recompute=recompute)
    assert measured.forward.total == predicted["forward_flops_per_step"]
    assert measured.train == predicted["hardware_flops_per_step"] > predicted["train_flops_per_step"]
