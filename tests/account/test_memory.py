"""account/memory/per_gpu.py: ZeRO's Figure 1, the lecture's toy example, sharding by hand, and optimizer states measured in torch.optim."""

import pytest

from trainledger.account.memory import per_gpu as M
from trainledger.account.memory.activations import ActivationShard, activations_bytes
from trainledger.account.counting.params import param_counts
from trainledger.errors import TrainledgerError
from trainledger.specs import get_model
from trainledger.specs.model import CruncherSpec, TransformerSpec
from runs import memory as memory_per_gpu

PARTS = ("params_bytes", "grads_bytes", "master_params_bytes", "optimizer_bytes", "activations_bytes")


@pytest.mark.parametrize("zero, expected_gb", [(0, 120), (1, 31.4), (2, 16.6), (3, 1.9)])
def test_zero_figure_1(zero, expected_gb):
    # Rajbhandari et al. 2019 (arXiv:1910.02054), Fig. 1: Ψ = 7.5B, N_d = 64, mixed-precision Adam (K = 12)
    m = memory_per_gpu(n_params=7.5e9, precision="mixed-fp16", optimizer="adam", zero=zero, dp=64)
    assert m["total_bytes"] / 1e9 == pytest.approx(expected_gb, abs=0.05)
    assert m["activations_bytes"] == 0 and m["activations_modeled"] is False
    assert m["total_bytes"] == pytest.approx(sum(m[k] for k in PARTS))


def test_zero_stage_formulas_exact():
    # ZeRO Sec. 3.1: stage 1: 4Ψ + KΨ/N_d; stage 2: 2Ψ + 14Ψ/N_d; stage 3: 16Ψ/N_d
    psi, nd = 1e9, 16
    total = lambda z: memory_per_gpu(n_params=psi, precision="mixed-bf16", optimizer="adamw", zero=z, dp=nd)["total_bytes"]  # noqa: E731
    assert total(0) == pytest.approx(16 * psi)
    assert total(1) == pytest.approx(4 * psi + 12 * psi / nd)
    assert total(2) == pytest.approx(2 * psi + 14 * psi / nd)
    assert total(3) == pytest.approx(16 * psi / nd)


def test_lecture_toy_model_states():
    # CS336 Lecture 2 toy example: D=4, 2 layers, B=2, fp32, one optimizer state (AdaGrad): 36 params, grads,
    # states -> 3·36·4 = 432 bytes of model states (+ activations: the lecture's 16 floats; ours also saves the output)
    spec = CruncherSpec(dim=4, n_layers=2)
    m = memory_per_gpu(spec, batch_size=2, precision="fp32", optimizer="adagrad")
    assert (m["params_bytes"], m["grads_bytes"], m["optimizer_bytes"], m["master_params_bytes"]) == (144, 144, 144, 0)
    assert m["activations_bytes"] == activations_bytes(spec, ActivationShard(2, 1, precision="fp32"))["total"]
    assert m["total_bytes"] == 432 + m["activations_bytes"]
    # the lecture's 16 activations (B·D·num_layers) in fp32 complete its 496 bytes; we also keep the B outputs
    assert m["activations"]["hidden"] == 16 * 4
    assert m["total_bytes"] - m["activations"]["output"] == 496


def test_model_with_activations_sums_parts():
    spec = get_model("gpt2")
    m = memory_per_gpu(spec, batch_size=8, seq_len=1024, precision="mixed-bf16", optimizer="adamw")
    n = 124_439_808
    assert m["params_bytes"] == 2 * n and m["grads_bytes"] == 2 * n
    assert m["master_params_bytes"] == 4 * n and m["optimizer_bytes"] == 8 * n
    act = activations_bytes(spec, ActivationShard(8, 1024, precision="mixed-bf16"))
    assert m["activations_bytes"] == act["total"] > 0
    assert m["total_bytes"] == pytest.approx(sum(m[k] for k in PARTS))


def test_tensor_parallel_shards_matrices_not_norms():
    # Megatron-LM: every matrix and the vocabulary are split by tp; RMSNorm weights (2 per layer + final) replicated
    spec = get_model("llama-2-7b")
    n = param_counts(spec)["n_params"]
    norms = 4096 * (2 * 32 + 1)
    m = memory_per_gpu(spec, batch_size=1, seq_len=128, tp=8, precision="fp32", optimizer="sgd")
    assert m["n_params_per_gpu"] == pytest.approx((n - norms) / 8 + norms)
    assert m["params_bytes"] == pytest.approx(4 * ((n - norms) / 8 + norms))


def test_tensor_parallel_replicates_row_parallel_biases_and_positions():
    spec = get_model("gpt2")
    c = param_counts(spec)["components"]
    d = 768
    replicated = c["norms"] + c["position_embedding"] + 12 * (d + d)   # o_proj bias + MLP down bias per layer
    placed = M.params_per_gpu(spec, tp=4)
    assert placed["replicated"] == replicated
    assert placed["n_params_per_gpu"] == pytest.approx((param_counts(spec)["n_params"] - replicated) / 4 + replicated)


def test_pipeline_first_stage_holds_embeddings():
    spec = get_model("llama-2-7b")                  # untied: embedding and head are the same size
    c, per_layer = param_counts(spec)["components"], param_counts(spec)["n_params_per_layer"]
    placed = M.params_per_gpu(spec, pp=4)
    first = 8 * per_layer + c["token_embedding"]
    last = 8 * per_layer + c["lm_head"] + 4096
    assert placed["n_params_per_gpu"] == max(first, last) == last
    assert placed["stage"] == "last"
    tied = get_model("gpt2")                         # tied: the last stage keeps a copy of the embedding (Megatron)
    c = param_counts(tied)["components"]
    placed = M.params_per_gpu(tied, pp=2)
    assert placed["n_params_per_gpu"] == 6 * param_counts(tied)["n_params_per_layer"] + c["token_embedding"] + c["position_embedding"]


def test_params_only_divides_evenly_by_tp_and_pp():
    m = memory_per_gpu(n_params=8e9, tp=2, pp=4, precision="bf16", optimizer="adamw")
    assert m["total_bytes"] == pytest.approx(8e9 / 8 * 8)


def test_tp_must_divide_heads():
    spec = get_model("gpt2")                         # 12 heads
    with pytest.raises(TrainledgerError, match="--tp"):
        memory_per_gpu(spec, tp=5)
    with pytest.raises(TrainledgerError, match="--pp"):
        memory_per_gpu(spec, pp=13)
    with pytest.raises(TrainledgerError, match="--zero"):
        memory_per_gpu(spec, zero=4)
    with pytest.raises(TrainledgerError, match="--dp"):
        memory_per_gpu(spec, dp=0)
    gqa = TransformerSpec(name="g", vocab_size=10, d_model=64, n_layers=2, n_heads=8, n_kv_heads=2, d_ff=64)
    with pytest.raises(TrainledgerError, match="n_kv_heads=2"):
        memory_per_gpu(gqa, tp=4)


def test_fits_uses_the_peak_and_the_reserve():
    """fp32 AdamW, 1e9 parameters: the parts sum to 16 B/param, but the optimizer step also holds a state-sized
    temporary (the foreach √v list): the peak is 20 B/param, and fits means peak + reserve <= memory."""
    m = memory_per_gpu(n_params=1e9, precision="fp32", optimizer="adamw", reserve_bytes=2e9, memory_per_gpu_bytes=22e9)
    assert m["total_bytes"] == 16e9 and m["peak_bytes"] == 20e9 and m["fits"] and m["headroom_bytes"] == 0
    m = memory_per_gpu(n_params=1e9, reserve_bytes=2.5e9, memory_per_gpu_bytes=22e9)
    assert not m["fits"]
    sgd = memory_per_gpu(n_params=1e9, optimizer="sgd", memory_per_gpu_bytes=22e9)   # no states, no temporary
    assert sgd["peak_bytes"] == sgd["total_bytes"] == 8e9


def test_the_cuda_reserve_by_default_has_its_three_parts():
    m = memory_per_gpu(n_params=1e9, precision="fp32", reserve_bytes=None, memory_per_gpu_bytes=80e9)
    parts = m["reserve_parts"]
    assert parts["context"] == M.CUDA_CONTEXT_BYTES                       # lazy loading, measured (below)
    assert parts["workspaces"] == 2 * 32 * 2**20                          # two cuBLAS handles, 32 MiB on Hopper
    assert parts["allocator"] == pytest.approx(M.ALLOCATOR_SLACK_FRACTION * m["peak_bytes"])
    assert m["reserve_bytes"] == pytest.approx(sum(v for k, v in parts.items() if k != "total"))
    assert m["headroom_bytes"] == pytest.approx(80e9 - m["peak_bytes"] - m["reserve_bytes"])
    with pytest.raises(TrainledgerError, match="--reserve"):
        memory_per_gpu(n_params=1e9, reserve_bytes=-1.0)


def test_adafactor_elements_by_hand():
    # Shazeer & Stern 2018, Alg. 4: rows + cols per matrix, full second moment for vectors
    spec = TransformerSpec(name="a", vocab_size=50, d_model=8, n_layers=1, n_heads=2, d_ff=16, mlp="gelu",
                           norm="rmsnorm", tied_embeddings=True)
    n = param_counts(spec)["n_params"]     # 4·64 + 2·128 + 50·8 + 3·8 norms = 936
    factored = 4 * (8 + 8) + 2 * (8 + 16) + (50 + 8) + 3 * 8
    assert M.adafactor_elements_per_param_of(spec) == pytest.approx(factored / n)
    m = memory_per_gpu(spec, batch_size=1, seq_len=4, optimizer="adafactor", precision="fp32")
    assert m["optimizer_bytes"] == pytest.approx(4 * factored)


def test_adam_8bit_bytes():
    # Dettmers et al. 2021: 2 states × 1 byte + one fp32 scale per 2048-element block
    m = memory_per_gpu(n_params=2048e6, precision="mixed-bf16", optimizer="adam-8bit")
    assert m["optimizer_bytes"] == pytest.approx(2048e6 * 2 * (1 + 4 / 2048))


@pytest.mark.parametrize("name, factory, kwargs", [
    ("momentum", "SGD", {"lr": 0.1, "momentum": 0.9}),
    ("adagrad", "Adagrad", {"lr": 0.1}),
    ("rmsprop", "RMSprop", {"lr": 0.1}),
    ("rmsprop-centered", "RMSprop", {"lr": 0.1, "centered": True}),
    ("adam", "Adam", {"lr": 0.1}),
    ("adamw", "AdamW", {"lr": 0.1}),
    ("sgd", "SGD", {"lr": 0.1}),
])
def test_optimizer_bytes_match_torch_optim(name, factory, kwargs):
    # Measurement: bytes of the per-element state tensors torch.optim keeps after one step (scalar `step` excluded)
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Linear(32, 8))
    n = sum(p.numel() for p in model.parameters())
    opt = getattr(torch.optim, factory)(model.parameters(), **kwargs)
    model(torch.randn(4, 16)).sum().backward()
    opt.step()
    measured = sum(t.numel() * t.element_size() for state in opt.state.values() for t in state.values()
                   if torch.is_tensor(t) and t.numel() > 1)
    predicted = memory_per_gpu(n_params=n, precision="fp32", optimizer=name)["optimizer_bytes"]
    assert predicted == measured


def test_zero3_parameters_stored_per_gpu_are_sharded():
    """ZeRO-3 (Rajbhandari et al. 2019, Sec. 3.1) partitions the parameters themselves over N_d ranks:
    each GPU stores Ψ/N_d of them, which is what params_bytes counts; before ZeRO it would hold all Ψ."""
    from trainledger.specs import get_model
    spec = get_model("llama-2-7b")
    sharded = memory_per_gpu(spec, batch_size=1, seq_len=128, precision="mixed-bf16", zero=3, dp=8)
    replicated = memory_per_gpu(spec, batch_size=1, seq_len=128, precision="mixed-bf16", zero=2, dp=8)
    n = param_counts(spec)["n_params"]
    assert sharded["n_params_per_gpu_before_zero"] == replicated["n_params_per_gpu"] == n
    assert sharded["n_params_per_gpu"] == pytest.approx(n / 8)
    assert sharded["params_bytes"] == pytest.approx(2 * sharded["n_params_per_gpu"])  # bf16 weights


def test_expandable_segments_keep_no_allocator_cache(capsys):
    """PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True maps and unmaps pages instead of splitting cached segments:
    the reserve is the context and the cuBLAS workspaces only (`--reserve expandable`)."""
    import json

    from trainledger.cli import main as cli_main
    parts = M.cuda_reserve_bytes(50e9, expandable_segments=True)
    assert parts["allocator"] == 0 and parts["total"] == M.CUDA_CONTEXT_BYTES + 2 * M.CUBLAS_WORKSPACE_BYTES
    assert cli_main.main(["memory", "--params", "1e9", "--reserve", "expandable", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["reserve_bytes"] == parts["total"]


def test_the_activation_shard_is_read_from_the_resolved_run():
    """memory_per_gpu's activations are those of ActivationShard.of(the resolved run, its compute precision): each
    context-parallel rank holds seq_len / cp tokens, and the run's recompute, flash, tp, sp, pp and loss upcast."""
    from trainledger.specs.run import Hardware, Run
    from trainledger.specs.run_checks import resolve
    spec = get_model("llama-2-7b")
    run = Run().with_(batch_size=2, seq_len=4096, cp=2, tp=4, sp=True, pp=2, dp=1, recompute="selective",
                      precision="mixed-bf16", flash=False, loss_upcast=False, zero=0)
    shard = ActivationShard.of(resolve(spec, Hardware(None), run).run, "mixed-bf16")
    assert (shard.batch_size, shard.seq_len, shard.n_tokens) == (2, 2048, 4096)
    assert (shard.tp, shard.sp, shard.pp, shard.recompute, shard.flash, shard.loss_upcast) == (
        4, True, 2, "selective", False, False)
    m = M.memory_per_gpu(spec, Hardware(None), run)
    assert m["activations"] == activations_bytes(spec, shard) and m["seq_len"] == 2048


@pytest.mark.parametrize("fields, flag", [({"batch_size": 0}, "--batch-size"), ({"seq_len": 1.5}, "--seq-len"),
                                          ({"pp": -1}, "--pp"), ({"precision": "fp4"}, "--precision")])
def test_an_activation_shard_out_of_range_names_the_flag(fields, flag):
    with pytest.raises(TrainledgerError, match=flag):
        ActivationShard(**{"batch_size": 1, "seq_len": 8, **fields})
