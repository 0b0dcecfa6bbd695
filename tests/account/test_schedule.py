"""Valid pipeline schedules (account/time/schedule.py): `step` refuses an invalid layout, `layout` never searches one.

Rules (Megatron-LM, cited in the module): pp ≤ n_layers; with interleave v > 1, pp ≥ 2, pp·v ≤ n_layers, n_layers
(+ 1 or 2 for the embedding and the loss counted as layers) divisible by pp·v and the micro-batches a multiple of pp.
"""

import json

import pytest

import trainledger.account.planning.layout as layout_mod
from trainledger.account.memory.fsdp import fsdp_settings
from runs import layouts
from runs import memory as memory_per_gpu
from trainledger.account.time.schedule import check_schedule, schedule_problem, valid_interleaves
from runs import step as step_time
from trainledger.cli import main as cli_main
from trainledger.errors import TrainledgerError
from trainledger.specs import PRESETS, TransformerSpec, get_model
from trainledger.specs.hardware import get_gpu
from trainledger.specs.recipes import get_recipe

TRANSFORMERS = [name for name, spec in PRESETS.items() if isinstance(spec, TransformerSpec)]


def assert_valid(n_layers: int, layout: dict) -> None:
    pp, v, m = layout["pp"], layout["interleave"], layout["micro_batches"]
    assert pp * v <= n_layers, layout
    assert schedule_problem(n_layers, pp, v, m) is None, layout
    if v > 1:
        assert pp >= 2 and m % pp == 0 and any((n_layers + e) % (pp * v) == 0 for e in (0, 1, 2)), layout


@pytest.mark.parametrize("n_layers, pp, v, m, valid, why", [
    (12, 1, 1, 1, True, "no pipeline"),
    (12, 12, 1, 1, True, "one layer per stage"),
    (12, 13, 1, 13, False, "a stage without a layer"),
    (12, 5, 1, 5, True, "uneven 1F1B stages (3, 3, 2, 2, 2): paced by the fullest"),
    (12, 12, 4, 12, False, "the issue's case: 48 chunks of a 12-layer model"),
    (12, 10, 2, 10, False, "20 chunks of 12 layers"),
    (12, 3, 2, 6, True, "6 chunks of 2 layers, micro-batches a multiple of pp"),
    (12, 3, 2, 4, False, "micro-batches not a multiple of pp (Megatron-LM schedules.py)"),
    (26, 3, 3, 9, True, "9 chunks of 3: 26 layers and the embedding counted as one (Megatron-LM arguments.py)"),
    (12, 4, 2, 8, False, "8 chunks of 12, 13 or 14 layers are never equal (Megatron-LM arguments.py)"),
    (126, 16, 2, 32, True, "Llama 3 405B: 126 layers + embedding + loss = 128 = 16·2·4 (arXiv:2407.21783 Sec. 3.3.2)"),
    (126, 16, 3, 48, False, "48 chunks of 126-128 layers are not equal"),
    (12, 1, 2, 4, False, "interleaving needs stages"),
    (96, 8, 3, 64, True, "Korthikanti et al. 2022's GPT-3 175B layout: PP 8, v 3 (96 = 8·3·4)"),
    (96, 8, 12, 64, True, "one layer per chunk"),
    (96, 8, 16, 64, False, "more chunks than layers"),
])
def test_schedule_rules(n_layers, pp, v, m, valid, why):
    assert (schedule_problem(n_layers, pp, v, m) is None) == valid, why
    if not valid:
        with pytest.raises(TrainledgerError, match="--pp|--interleave"):
            check_schedule(n_layers, pp, v, m)


def test_valid_interleaves_lists_exactly_the_valid_ones():
    assert valid_interleaves(12, 3, 6, 8) == [1, 2, 4]
    assert valid_interleaves(12, 3, 4, 8) == [1]
    assert valid_interleaves(12, 10, 10, 8) == [1]
    assert valid_interleaves(12, 13, 13, 8) == []


@pytest.mark.parametrize("name", TRANSFORMERS)
def test_layout_search_never_times_an_invalid_schedule(name, monkeypatch):
    """Every layout the search would time, for every preset at three scales, is a valid schedule. Memory is stubbed
    to fit so every candidate is reached (the real memory filter is checked below); time is stubbed to stay fast."""
    spec = get_model(name)
    timed = []

    def fake_step_time(spec, hardware, run, **kw):
        lay, batch = run.layout, run.batch
        timed.append(dict(pp=lay.pp, interleave=lay.interleave,
                          micro_batches=batch.global_batch_size // (lay.dp * batch.batch_size)))
        return {"step_seconds": 1.0, "mfu": 0.1, "hfu": 0.1, "tokens_per_s": 1.0, "bottleneck": "", "run": run}

    monkeypatch.setattr(layout_mod, "step_time", fake_step_time)
    monkeypatch.setattr(layout_mod, "memory_per_gpu", lambda *a, **k: {"fits": True, "total_bytes": 1.0, "peak_bytes": 1.0,
                                                                        "reserve_bytes": 0.0, "headroom_bytes": 1e12})
    for num_gpus, global_batch in ((96, 384), (1024, 4096), (100000, 100000)):
        layouts(spec, get_gpu("h100"), num_gpus=num_gpus, global_batch_size=global_batch, seq_len=spec.default_seq_len,
               top=1)
    stages = {t["pp"] for t in timed}
    if any(spec.n_layers % (pp * v) == 0 for pp in stages - {1} for v in range(2, layout_mod.MAX_INTERLEAVE + 1)):
        assert any(t["interleave"] > 1 for t in timed)            # interleaving was searched where it can exist...
    for t in timed:
        assert_valid(spec.n_layers, t)                           # ...only where the schedule exists


@pytest.mark.parametrize("name, gpu, num_gpus, global_batch, seq_len", [
    ("gpt2", "h100", 100000, 100000, 1024),          # the case: once pp 10 with 2 chunks of a 12-layer model
    ("gpt2", "h100", 96, 384, 1024),
    ("llama-2-70b", "h100", 96, 384, 4096),
    ("tiny", "h100", 2, 8, 128),                     # a sequence shorter than a context-parallel rank's minimum
])
def test_returned_layouts_are_valid_and_fit(name, gpu, num_gpus, global_batch, seq_len):
    spec, device = get_model(name), get_gpu(gpu)
    found = layouts(spec, device, num_gpus=num_gpus, global_batch_size=global_batch, seq_len=seq_len, top=50)
    assert found["layouts"]
    for layout in found["layouts"]:
        assert_valid(spec.n_layers, layout)
        assert layout["tp"] * layout["pp"] * layout["cp"] * layout["dp"] == num_gpus
        # ZeRO-3 is FSDP2 with the bf16 policy the search assumes (account.planning.layout)
        fsdp = (fsdp_settings(get_recipe("amp-bf16"), param_dtype="auto", pp=layout["pp"], dp=layout["dp"])
                if layout["zero"] == 3 else None)
        memory = memory_per_gpu(spec, batch_size=layout["batch_size"], seq_len=seq_len // layout["cp"], zero=layout["zero"], fsdp=fsdp,
                                dp=layout["dp"], tp=layout["tp"], pp=layout["pp"], sp=layout["sp"],
                                recompute=layout["recompute"], precision="amp-bf16", optimizer="adamw", flash=True,
                                memory_per_gpu_bytes=device.memory_bytes, grad_accum=layout["micro_batches"],
                                reserve_bytes=layout["reserve_bytes"])
        assert memory["fits"] and memory["peak_bytes"] == pytest.approx(layout["memory_bytes"])


@pytest.mark.parametrize("name", TRANSFORMERS)
def test_step_refuses_more_chunks_than_layers(name, capsys):
    """`step` exits 2 with one line for pp·v > n_layers (v = 2 chunks of a pipeline as deep as the model), and for
    more stages than layers."""
    layers = get_model(name).n_layers
    for argv in (["--pp", str(layers), "--interleave", "2", "--num-gpus", str(layers), "--global-batch-size", str(layers)],
                 ["--pp", str(layers + 1), "--num-gpus", str(layers + 1)]):
        assert cli_main.main(["step", "--model", name, *argv]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error:") and "--pp" in err[0]


def test_step_accepts_a_valid_interleaved_schedule_and_times_it(capsys):
    """12 layers, pp 3: v 2 and 4 exist (6 or 12 chunks) and shrink the bubble (p − 1)/(v·m); v 3 does not exist."""
    spec, gpu = get_model("gpt2"), get_gpu("h100")
    kw = dict(batch_size=1, seq_len=1024, num_gpus=3, global_batch_size=6, pp=3, with_memory=False)
    bubbles = [step_time(spec, gpu, interleave=v, **kw)["bubble_fraction"] for v in (1, 2, 4)]
    assert bubbles == pytest.approx([2 / 6, 2 / 12, 2 / 24])
    with pytest.raises(TrainledgerError, match="--interleave"):
        step_time(spec, gpu, interleave=3, **kw)
    assert cli_main.main(["step", "--model", "gpt2", "--pp", "3", "--interleave", "2", "--num-gpus", "3",
                          "--global-batch-size", "6", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["interleave"] == 2


def test_dualpipe_bubble_is_table_2_of_the_deepseek_v3_report():
    """DualPipe (arXiv:2412.19437, Table 2): bubble (PP/2 − 1)(F&B + B − 3W) against 1F1B's (PP − 1)(F + B). With a
    forward F = 1, a backward B = 2 of which W = 1 weight gradients, PP 16: 1F1B 45, DualPipe 7 · (3 + 2 − 3) = 14."""
    from trainledger.account.time.schedule import dualpipe_bubble_seconds
    assert dualpipe_bubble_seconds(16, pair_seconds=3.0, backward_seconds=2.0, weight_grad_seconds=1.0) == 14.0
    assert dualpipe_bubble_seconds(2, pair_seconds=3.0, backward_seconds=2.0, weight_grad_seconds=1.0) == 0.0
    spec, gpu = get_model("llama-2-7b"), get_gpu("h100")
    kw = dict(batch_size=1, seq_len=4096, num_gpus=8, global_batch_size=16, pp=8, with_memory=True)
    one_f_one_b, dual = step_time(spec, gpu, **kw), step_time(spec, gpu, schedule="dualpipe", **kw)
    assert dual["schedule"] == "dualpipe" and one_f_one_b["schedule"] == "1f1b"
    # the same work per micro-batch, a smaller bubble: (8/2 − 1)(F + 2B − 3W) < 7(F + B)
    assert dual["per_micro_batch_seconds"] == pytest.approx(one_f_one_b["per_micro_batch_seconds"])
    assert 0 < dual["breakdown"]["pipeline_bubble"] < 0.5 * one_f_one_b["breakdown"]["pipeline_bubble"]
    assert 0 < dual["bubble_fraction"] < 0.5 * one_f_one_b["bubble_fraction"]
    # and a second copy of the parameters (Table 2: 2× parameters)
    assert dual["memory_bytes"] - one_f_one_b["memory_bytes"] == pytest.approx(one_f_one_b["memory"]["params_bytes"])


def test_dualpipe_needs_even_stages_and_micro_batches(capsys):
    """"DualPipe only requires that the pipeline stages and micro-batches be divisible by 2" (Sec. 3.2.1); it
    places two stages per GPU itself, so no --interleave. One line, exit 2, naming --schedule."""
    spec, gpu = get_model("gpt2"), get_gpu("h100")
    for kw in (dict(pp=3, num_gpus=3, global_batch_size=6), dict(pp=4, num_gpus=4, global_batch_size=5),
               dict(pp=4, num_gpus=4, global_batch_size=8, interleave=3)):
        with pytest.raises(TrainledgerError, match="--schedule dualpipe"):
            step_time(spec, gpu, schedule="dualpipe", with_memory=False, **kw)
    assert cli_main.main(["step", "--model", "gpt2", "--pp", "3", "--num-gpus", "3", "--schedule", "dualpipe"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--schedule dualpipe" in err[0]
    assert cli_main.main(["step", "--model", "gpt2", "--pp", "4", "--num-gpus", "4", "--global-batch-size", "8",
                          "--schedule", "dualpipe", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["schedule"] == "dualpipe"
