"""Every published run of the validation tables is a value (account/validation/published_run.py): its command and
its run file ask exactly that run of `trainledger step`, and the one evaluation gives each table's error."""

import dataclasses
import json
import shlex

import pytest

from trainledger.account.time.step import step_time
from trainledger.account.validation import published_run as pr
from trainledger.account.validation import tables
from trainledger.account.validation.published import every_run, published_rows, published_runs
from trainledger.cli.main import _cached_parser, _merge_run, compute, parse
from trainledger.cli.run_flags import asked
from trainledger.specs import run_file
from trainledger.specs.hardware import get_gpu
from trainledger.specs.hf_config import spec_from_config_dict
from trainledger.specs.run import Hardware

RUNS = every_run()


def test_every_run_is_labelled_sourced_and_published():
    assert len({case.label for case in RUNS}) == len(RUNS) > 100
    for case in RUNS:
        assert case.source and case.published > 0 and case.assumptions, case.label
        assert case.metric in pr.METRICS and case.num_gpus > 0, case.label


def test_the_dense_runs_are_the_published_rows():
    """published_rows (the table of docs/time.md, the intervals' evidence) is made of these runs, row for row."""
    rows = published_rows()
    assert [(c.label, c.num_gpus, c.gpu) for c in published_runs()] == [(r["label"], r["num_gpus"], r["gpu"])
                                                                          for r in rows]


@pytest.mark.parametrize("case", [c for c in RUNS if pr.command(c)], ids=lambda c: c.label)
def test_the_command_asks_the_run(case):
    """The `trainledger step` command, parsed by the CLI's own parser, is exactly the case's run."""
    words = shlex.split(pr.command(case))
    assert words[:2] == ["trainledger", "step"]
    args = parse(_cached_parser(), words[1:])
    _merge_run(args)
    assert asked(args) == case.run
    assert (args.model, args.gpu, args.num_gpus) == (case.model_name, case.gpu, case.num_gpus)


def test_only_a_flagless_setting_keeps_a_run_from_its_command():
    """Llama 3 and Megatron Bridge's dense rows turn dropout off (Megatron-LM's default is on): no flag sets
    kernels.dropout, so they are asked by their run file."""
    without = [c for c in RUNS if pr.command(c) is None]
    assert without and all(pr.unflagged(c.run) == ["kernels.dropout"] for c in without)
    assert all(not pr.unflagged(c.run) for c in RUNS if pr.command(c))


@pytest.mark.parametrize("case", RUNS, ids=lambda c: c.label)
def test_the_run_file_reads_back_as_the_run(case):
    doc = pr.document(case)
    read = run_file.read_document(json.loads(json.dumps(doc)), "run file")
    assert read.run == case.run
    assert read.model == {"name": case.model_name} and read.hardware == {"gpu": case.gpu, "num_gpus": case.num_gpus}


@pytest.mark.parametrize("label", ["22B full", "Table 2: 529.6B, t 8 p 35, 560 GPUs", "530B, t 8 p 35, 2240 GPUs",
                                   "16384 GPUs, seq 131072, cp 16", "Llama 2 13B, no AC",
                                   "Llama 3.1 405B, DGX-H100", "DGX-H100 25.11: qwen3-235b-a22b on 256 GPUs, fp8-cs",
                                   "NeMo Automodel, DGX-H100: qwen3-30b-a3b on 8 GPUs, bf16"])
def test_step_config_of_the_run_file_predicts_the_case(label, tmp_path):
    """The run file saved, with the config.json of a model built from a paper's shapes beside it, and asked with
    `trainledger step --config FILE`: the step the table predicts, to the last bit."""
    case = next(c for c in RUNS if c.label == label)
    doc = pr.document(case)
    config = pr.model_config(case)
    if config is not None:
        (tmp_path / case.model_name).write_text(json.dumps(config))
        doc["model"]["name"] = str(tmp_path / case.model_name)
    path = tmp_path / "run.toml"
    path.write_text(run_file.to_toml(doc))
    got = compute(["step", "--config", str(path), "--json"])
    assert got["step_seconds"] == pr.evaluate(case)["step"]["step_seconds"]


def test_a_papers_model_reads_back_from_its_config():
    """Megatron-LM's GPT is GPT-2's architecture: its gpt2 config.json reads back as the same model (the name, the
    source and the pre-training context aside, which a run with --seq-len does not read)."""
    for case in (c for c in RUNS if not isinstance(c.model, str)):
        spec = spec_from_config_dict(pr.model_config(case), name=case.model.name)
        assert dataclasses.replace(spec, source=case.model.source, pretrain_seq_len=case.model.pretrain_seq_len) \
            == case.model, case.label
    assert pr.model_config(next(c for c in RUNS if isinstance(c.model, str))) is None


def test_the_evaluation_is_predicted_over_published_of_the_metric():
    """By hand for one case of each metric: step_time of the case's run, the metric read from it, the error."""
    from trainledger.account.validation.finetune import memory_and_speed_cases    # torchtune's totals over 8 GPUs
    seen = set()
    for case in RUNS + memory_and_speed_cases():
        if case.metric in seen:
            continue
        seen.add(case.metric)
        r = step_time(case.spec, Hardware(get_gpu(case.gpu), case.num_gpus), case.run, with_memory=False)
        predicted = {"seconds": r["step_seconds"], "mfu": r["mfu"], "tokens_per_s_per_gpu": r["tokens_per_s"]
                     / case.num_gpus, "tokens_per_s": r["tokens_per_s"], "gpu_hours": (case.tokens or 0) / r["tokens_per_s"] * case.num_gpus / 3600}
        e = pr.evaluate(case, with_memory=False)
        assert e[f"predicted_{case.metric}"] == predicted[case.metric]
        assert e["error"] == pytest.approx(predicted[case.metric] / case.published - 1, rel=1e-12)
    assert seen == set(pr.METRICS)


def test_a_case_checks_its_metric_and_run():
    case = RUNS[0]
    with pytest.raises(ValueError, match="unknown metric"):
        dataclasses.replace(case, metric="tflops")
    with pytest.raises(ValueError, match="specs.run.Run"):
        dataclasses.replace(case, run={"tp": 8})


def test_flags_switch_and_default():
    """Only what differs from the run's defaults; an on/off switch as --x / --no-x; --framework first."""
    run = pr.run_of(tp=4, sp=True, flash=False, pp_overlap=True, framework="megatron", overlap=1.0)
    assert pr.flags(run) == ["--framework", "megatron", "--tp", "4", "--sp", "--ep-overlap", "1", "--no-flash",
                             "--pp-overlap"]
    assert pr.flags(pr.run_of()) == []


def test_the_tables_program_lists_and_prints_the_runs(capsys):
    assert tables.main(["--runs"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n  trainledger step ") + out.count("\n  (run file only") == len(RUNS)
    assert tables.main(["--run-file", "22B full"]) == 0
    text = capsys.readouterr().out
    assert 'name = "megatron-gpt-22B.json"' in text and "zero = 0" in text
    assert tables.main(["--model-config", "22B full"]) == 0
    assert json.loads(capsys.readouterr().out)["n_layer"] == 48
    with pytest.raises(SystemExit) as stop:
        tables.main(["--run-file", "no such run"])
    assert stop.value.code == 2 and "--runs lists them" in capsys.readouterr().err
