"""`trainledger train` at the command line: flags in --help, config precedence, one-line errors, outputs, the default run."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest

from trainledger.cli.main import build_parser, main

FLAGS = ("--model --text --data --steps --batch-size --global-batch-size --grad-accum --seq-len --lr --min-lr --warmup-steps --weight-decay "
         "--grad-clip --optimizer --precision --seed --checkpoint-dir --checkpoint-every --keep-checkpoints --resume "
         "--metrics --eval-every --eval-batches --compile --threads --parallel --device --out-dir --config --json --quiet").split()




pytestmark = pytest.mark.usefixtures("one_torch_thread")


def config_of(*argv):
    from trainledger.cli.train import config_from_args
    return config_from_args(build_parser().parse_args(["train", *argv]))


def test_help_lists_every_flag_with_units():
    text = subprocess.run([sys.executable, "-m", "trainledger.cli.main", "train", "--help"], capture_output=True,
                          text=True, timeout=60).stdout
    missing = [flag for flag in FLAGS if flag not in text]
    assert not missing
    assert "micro-batch: sequences per GPU" in text and "sequences per optimizer step over all ranks" in text
    assert "tokens per sequence" in text


def test_no_arguments_is_the_tiny_gpt_on_the_stdlib_corpus():
    config = config_of()
    assert (config.model, config.text, config.data, config.precision) == ("tiny", None, None, "fp32")
    assert config.out_dir == "runs/tiny-stdlib"
    assert config.warmup_steps <= config.steps // 10


def test_toml_then_flags(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('[train]\nsteps = 50\nbatch-size = 8\nlr = 1e-3\nprecision = "amp-bf16"\n')
    config = config_of("--config", str(path), "--lr", "2e-3")
    assert (config.steps, config.batch_size, config.lr, config.precision) == (50, 8, 2e-3, "amp-bf16")
    assert config.warmup_steps == 5     # default warmup: a tenth of a short run


@pytest.mark.parametrize("argv, message", [
    (["--batch-size", "0"], "--batch-size: must be a positive integer"),
    (["--precision", "fp8"], "--precision"),
    (["--global-batch-size", "6", "--grad-accum", "4"], "--global-batch-size 6 is not divisible by 1 data-parallel rank × --grad-accum 4"),
    (["--steps", "10", "--warmup-steps", "20"], "--warmup-steps 20 exceeds --steps 10"),
    (["--min-lr", "1", "--lr", "0.1"], "--min-lr"),
    (["--text", "a.txt", "--data", "b.tokens"], "--text or --data"),
    (["--batch-size", "4", "--global-batch-size", "6"], "--global-batch-size 6 is not a multiple of --batch-size 4"),
    (["--batch-size", "4", "--global-batch-size", "16", "--grad-accum", "2"], "--grad-accum 2 disagrees with"),
    (["--precision", "mixed-bf16", "--parallel", "fsdp"], "use amp-bf16"),
    (["--precision", "mixed-fp16", "--parallel", "fsdp"], "use amp-fp16"),
    (["--optimizer", "adafactor"], "train has no Adafactor; use adamw"),
    (["--optimizer", "adam-8bit"], "train has no 8-bit Adam"),
    (["--model", "no-such-model"], "unknown model"),
    (["--config", "/nonexistent.toml"], "does not exist (--config)"),
    (["--parallel", "ddp", "--device", "cuda:7"], "--device"),
], ids=["zero-batch", "precision", "accum", "warmup", "min-lr", "text-and-data", "global-not-multiple",
        "accum-disagrees", "mixed-bf16-fsdp", "mixed-fp16-fsdp", "adafactor", "adam-8bit", "model", "config", "device"])
def test_bad_input_is_one_line_exit_2(argv, message, capsys, tmp_path):
    status = main(["train", "--out-dir", str(tmp_path), *argv])
    err = capsys.readouterr().err
    assert status == 2
    assert len(err.strip().splitlines()) == 1 and message in err


@pytest.mark.parametrize("argv, world, tp, global_batch, accum", [
    ([], 1, 1, 32, 1),                                                      # the default run: unchanged
    (["--batch-size", "8"], 1, 1, 8, 1),                                    # old meaning = new on one process
    (["--batch-size", "4", "--global-batch-size", "8"], 1, 1, 8, 2),        # accumulation derived
    (["--batch-size", "4", "--global-batch-size", "8", "--grad-accum", "2"], 1, 1, 8, 2),   # consistent: accepted
    (["--batch-size", "4", "--grad-accum", "3"], 1, 1, 12, 3),
    (["--global-batch-size", "16", "--grad-accum", "2"], 1, 1, 16, 2),
    (["--batch-size", "4"], 2, 1, 8, 1),                                    # micro-batch per rank under torchrun
    (["--batch-size", "2", "--global-batch-size", "16"], 4, 1, 16, 2),      # 4 ranks: 2 × 4 × 2
    (["--batch-size", "2", "--global-batch-size", "16", "--tp", "2"], 4, 2, 16, 4),   # dp = 4 / tp 2 = 2
    (["--global-batch-size", "4"], 2, 1, 4, 1),
], ids=["default", "one-process", "derived", "consistent", "micro-accum", "global-accum", "2-ranks", "4-ranks",
        "tp", "global-2-ranks"])
def test_batch_flags_map_to_the_global_batch(argv, world, tp, global_batch, accum, monkeypatch):
    """--batch-size is the micro-batch per data-parallel rank; the config keeps the global batch."""
    monkeypatch.setenv("WORLD_SIZE", str(world))
    config = config_of(*argv)
    assert (config.batch_size, config.grad_accum) == (global_batch, accum)
    dp = world // (tp * config.pp)
    micro = [int(argv[i + 1]) for i, flag in enumerate(argv) if flag == "--batch-size"]
    assert config.batch_size == (micro[0] if micro else config.batch_size // (dp * accum)) * dp * accum


def test_batch_keys_of_a_config_file_mean_what_the_flags_mean(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text("batch-size = 4\nglobal-batch-size = 16\n")
    config = config_of("--config", str(path))
    assert (config.batch_size, config.grad_accum) == (16, 4)
    assert (config_of("--config", str(path), "--batch-size", "8").grad_accum) == 2     # the flag overrides the file


def test_micro_batches_accumulate_to_the_global_batch(tmp_path, capsys):
    """--batch-size 4 --global-batch-size 8 (2 accumulated micro-batches) has the losses of --batch-size 8:
    accumulation is exact up to fp32 rounding."""
    text = tmp_path / "book.txt"
    text.write_text("It was the best of times, it was the worst of times. " * 400)
    common = ["train", "--text", str(text), "--steps", "3", "--seq-len", "16", "--eval-every", "0", "--no-plot", "--quiet"]
    losses = {}
    runs = {"whole": ["--batch-size", "8"], "accum": ["--batch-size", "4", "--global-batch-size", "8"],
            "half": ["--batch-size", "4"]}
    for name, flags in runs.items():
        assert main([*common, *flags, "--out-dir", str(tmp_path / name)]) == 0
        losses[name] = [json.loads(line)["loss"] for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
    assert len(losses["whole"]) == 3
    assert losses["accum"] == pytest.approx(losses["whole"], rel=1e-5)
    assert losses["half"] != pytest.approx(losses["whole"], rel=1e-3)      # a batch of 4 alone is another run


def test_precision_and_optimizer_are_the_shared_vocabulary_minus_the_accounting_only_optimizers():
    from trainledger.specs.recipes import OPTIMIZERS, RECIPES
    train = build_parser()._subparsers._group_actions[0].choices["train"]
    actions = {a.dest: a for a in train._actions}
    # Transformer Engine's FP8 recipes are accounted only (tests/train/test_fp8_train.py: refused in one line)
    assert tuple(actions["precision"].choices) == tuple(r for r in RECIPES if r not in ("fp8-delayed", "mxfp8"))
    # plus train's 8-bit AdamWs (torchao, bitsandbytes: issue 39), which specs/recipes.py names once the accounting
    # prices them (issue 38); the union is the same set then
    assert set(actions["optimizer"].choices) == (set(OPTIMIZERS) - {"adafactor", "adam-8bit"}) | {"adamw-8bit",
                                                                                                  "paged-adamw-8bit"}
    assert config_of("--precision", "MIXED-fp16").precision == "mixed-fp16"
    assert config_of().precision == "fp32" and config_of().optimizer == "adamw"


def test_rmsprop_centered_trains(tmp_path, capsys):
    status = main(["train", "--model", "cruncher", "--steps", "20", "--optimizer", "rmsprop-centered",
                   "--out-dir", str(tmp_path), "--json", "--no-plot"])
    summary = json.loads(capsys.readouterr().out)
    assert status == 0 and np.isfinite(summary["final_loss"])


def test_unknown_toml_key_names_the_allowed_ones(tmp_path, capsys):
    path = tmp_path / "bad.toml"
    path.write_text("batchsize = 3\n")
    assert main(["train", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "unknown key 'batchsize'" in err and "batch-size" in err


def test_text_run_prints_plan_and_writes_outputs(tmp_path, capsys):
    text = tmp_path / "book.txt"
    text.write_text("It was the best of times, it was the worst of times. " * 400)
    out = tmp_path / "run"
    status = main(["train", "--text", str(text), "--steps", "4", "--batch-size", "2", "--seq-len", "16",
                   "--eval-every", "2", "--eval-batches", "1", "--out-dir", str(out)])
    stdout = capsys.readouterr().out
    assert status == 0
    assert "predicted:" in stdout and "FLOPs per step" in stdout and "memory per device" in stdout
    assert "outputs:" in stdout and str(out / "metrics.jsonl") in stdout
    assert len(list((out / "data").glob("book.txt-*.tokens"))) == 1 and (out / "loss.png").stat().st_size > 1000
    assert "held-out split: the last" in stdout
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    keys = {"step", "loss", "lr", "grad_norm", "tokens", "step_time_s", "tokens_per_s", "flops_per_s", "mfu",
            "peak_memory_bytes"}
    assert [r["step"] for r in records] == [1, 2, 3, 4] and all(keys <= set(r) for r in records)
    # issue 41: the step lines' peak is the process's RSS, the prediction counts tensors; each line says which
    assert all(r["peak_memory_kind"] == "rss" for r in records)
    assert re.search(r"memory per device [\d.]+ [KMG]iB of tensors \(params", stdout)
    assert re.search(r"^step 1 .* peak RSS [\d.]+ [KMG]iB$", stdout, re.M), stdout


def test_json_summary_for_the_cruncher(tmp_path, capsys):
    status = main(["train", "--model", "cruncher", "--out-dir", str(tmp_path), "--json", "--no-plot"])
    summary = json.loads(capsys.readouterr().out)
    first = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])["loss"]
    assert status == 0
    assert summary["steps"] == 200 and summary["tokens"] == 200 * 32    # the Cruncher defaults: batch 32, Adam
    assert summary["final_eval_loss"] < 1e-3 * first                    # y = x·(0..63) is learnt


def test_stdlib_corpus_is_deterministic_and_cached(tmp_path):
    from trainledger.data import open_tokens
    from trainledger.train.corpus import build_stdlib_corpus, stdlib_files
    files = stdlib_files(200_000)
    assert files == sorted(files) and all(f.suffix == ".py" for f in files)
    assert sum(f.stat().st_size for f in files) <= 200_000
    a = build_stdlib_corpus(tmp_path / "a", limit_bytes=200_000)
    b = build_stdlib_corpus(tmp_path / "b", limit_bytes=200_000)
    assert np.array_equal(open_tokens(a), open_tokens(b))
    assert bytes(np.asarray(open_tokens(a)[:1000])) == b"".join(f.read_bytes() for f in files)[:1000]
    mtime = a.stat().st_mtime_ns
    assert build_stdlib_corpus(tmp_path / "a", limit_bytes=200_000) == a and a.stat().st_mtime_ns == mtime


def test_text_tokens_are_cached_until_the_text_changes(tmp_path):
    import os
    from trainledger.data import open_tokens
    from trainledger.train.corpus import text_tokens
    text = tmp_path / "book.txt"
    text.write_bytes(b"abc" * 100)
    first = text_tokens(text, tmp_path / "run")
    assert bytes(np.asarray(open_tokens(first))) == b"abc" * 100
    stamp = first.stat().st_mtime_ns
    assert text_tokens(text, tmp_path / "run") == first and first.stat().st_mtime_ns == stamp   # reused
    other = tmp_path / "elsewhere" / "book.txt"           # another file of the same name, older than the cache
    other.parent.mkdir()
    other.write_bytes(b"xyz" * 50)
    os.utime(other, ns=(stamp - 10**9, stamp - 10**9))
    assert bytes(np.asarray(open_tokens(text_tokens(other, tmp_path / "run")))) == b"xyz" * 50
    text.write_bytes(b"abcd" * 100)                       # edited: newer than the cache
    os.utime(text, ns=(stamp + 10**9 * 5, stamp + 10**9 * 5))
    assert bytes(np.asarray(open_tokens(text_tokens(text, tmp_path / "run")))) == b"abcd" * 100


@pytest.mark.parametrize("flags, message", [
    (lambda d: ["--out-dir", d / "afile"], "--out-dir: cannot use"),
    (lambda d: ["--out-dir", d / "o", "--checkpoint-dir", d / "afile"], "--checkpoint-dir: cannot use"),
    (lambda d: ["--out-dir", d / "o", "--metrics", d / "afile" / "m.jsonl"], "--metrics: cannot use"),
    (lambda d: ["--out-dir", d / "o", "--metrics", d], "is a directory"),
    (lambda d: ["--out-dir", d / "o", "--text", d], "--text"),
    (lambda d: ["--out-dir", d / "o", "--data", d], "--data"),
    (lambda d: ["--out-dir", d / "o", "--config", d / "bad.toml"], "not valid TOML"),
], ids=["out-dir-is-a-file", "checkpoint-dir-is-a-file", "metrics-under-a-file", "metrics-is-a-dir",
        "text-is-a-dir", "data-is-a-dir", "malformed-toml"])
def test_unusable_paths_are_one_line_exit_2(tmp_path, capsys, flags, message):
    (tmp_path / "afile").write_text("x")
    (tmp_path / "bad.toml").write_text("[train\nsteps =")
    status = main(["train", "--steps", "2", "--seq-len", "16", "--batch-size", "2", "--quiet", *map(str, flags(tmp_path))])
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1 and message in err, err


def test_parallel_without_torchrun_says_it_trains_alone(tmp_path, capsys):
    text = tmp_path / "book.txt"
    text.write_text("It was the best of times, it was the worst of times. " * 100)
    status = main(["train", "--text", str(text), "--steps", "1", "--batch-size", "2", "--seq-len", "16",
                   "--parallel", "ddp", "--out-dir", str(tmp_path / "run"), "--no-plot"])
    assert status == 0 and "--parallel ddp: one process (not launched by torchrun)" in capsys.readouterr().out


def test_help_defaults_match_the_resolved_config():
    """Every '(default: X)' in `train --help` is what resolve() gives when the flag is not passed."""
    import re
    from trainledger.cli.main import build_parser
    from trainledger.train.config import CRUNCHER_DEFAULTS, FIELDS, resolve
    parser = next(a for a in build_parser()._actions if hasattr(a, "choices") and a.choices and "train" in a.choices)
    train = parser.choices["train"]
    default_config = resolve({})
    checked = 0
    for action in train._actions:
        found = re.search(r"\(default:? ([^;)]+)\)", action.help or "")
        if not found or action.dest not in FIELDS:
            continue
        text = found.group(1)
        expected = getattr(default_config, action.dest)
        if action.dest == "warmup_steps":
            assert text == "min(40, --steps/10"          # the regex stops at the first ')'
            for steps in (5, 100, 600, 1000):
                assert resolve({"steps": steps}).warmup_steps == min(40, steps // 10)
        elif action.dest == "out_dir":
            assert "runs/tiny-stdlib for the built-in corpus" in action.help and expected == "runs/tiny-stdlib"
            assert resolve({"text": "book.txt"}).out_dir == "runs/tiny-book"
        elif action.dest == "metrics":
            assert text.replace("<out-dir>", default_config.out_dir) == str(default_config.resolved_metrics())
        elif action.dest == "device":
            assert expected is None and text == "cuda when available"     # resolved by train/distributed.py
        else:
            value = action.type(text) if action.type and not action.choices else text
            assert value == expected, (action.dest, text, expected)
        checked += 1
    assert checked >= 15
    global_help = train._option_string_actions["--global-batch-size"].help
    assert f"(default: {default_config.batch_size})" in global_help       # the config's batch_size is the global batch
    cruncher = resolve({"model": "cruncher"})
    for name, value in CRUNCHER_DEFAULTS.items():     # the description lists the Cruncher's own defaults
        assert getattr(cruncher, name) == value
        if name != "batch_size":
            flag = "--" + name.replace("_", "-")
            assert f"{flag} {value:g}" in train.description if isinstance(value, float) else f"{flag} {value}" in train.description


def test_data_that_is_not_a_token_file_is_named_for_what_it_is(tmp_path, capsys):
    """Issue 14 item 12: a text file given to --data is pointed to --text; no message names a flag that doesn't exist."""
    text, raw = tmp_path / "book.txt", tmp_path / "raw.bin"
    text.write_text("It was the best of times, it was the worst of times.\n" * 20)
    raw.write_bytes(bytes(range(256)) * 20)
    for path, expected in ((text, f"--text {text}"), (raw, "is not a token file")):
        assert main(["train", "--data", str(path), "--steps", "1", "--out-dir", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and expected in err and "pass its dtype" not in err


def test_devices_and_negative_token_ids_are_named_for_what_they_are(tmp_path, capsys):
    """Issue 14 item 12: /dev/zero is not 'missing'; negative ids are not reported as 'up to 255'."""
    negative = tmp_path / "neg.npy"
    np.save(negative, np.array([-1, 5, 3] * 100, dtype=np.int32))
    for path, expected in (("/dev/zero", "is not a regular file"), (str(negative), "from -1 to 5")):
        assert main(["train", "--data", path, "--steps", "1", "--seq-len", "8", "--out-dir", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and expected in err, err


def test_threads_sets_torch_threads(tmp_path, capsys, monkeypatch):
    """Issue 22: on the shared 2-core machine the quick start ran at 1.5K instead of 21K tok/s when another process
    took a core; `train --threads N` calls torch.set_num_threads(N) before the model is built."""
    import torch
    assert config_of("--threads", "1").threads == 1 and config_of().threads is None
    path = tmp_path / "run.toml"
    path.write_text("[train]\nthreads = 2\n")
    assert config_of("--config", str(path)).threads == 2
    calls = []
    monkeypatch.setattr(torch, "set_num_threads", calls.append)
    status = main(["train", "--model", "cruncher", "--steps", "2", "--warmup-steps", "0", "--out-dir", str(tmp_path / "out"), "--threads", "1",
                   "--json", "--no-plot"])
    assert status == 0 and calls == [1]
    capsys.readouterr()
    assert main(["train", "--threads", "0", "--out-dir", str(tmp_path)]) == 2
    assert "--threads" in capsys.readouterr().err


def test_threads_default_to_the_idle_cores_and_the_run_says_so(tmp_path, capsys, monkeypatch):
    """Issue 31: with no --threads, train takes the cores other processes leave idle (2.5K tokens/s with both
    cores vs 9.5K with one at load 3.5) and prints the choice after its outputs line; --json carries it."""
    import torch

    from trainledger.measure import cpu_load
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(cpu_load.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(cpu_load.OthersCpu, "cpus", lambda self: 1.6)        # another process keeps 1.6 CPUs busy
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)                 # torch's default: one per core
    calls = []
    monkeypatch.setattr(torch, "set_num_threads", calls.append)
    args = ["train", "--model", "cruncher", "--steps", "2", "--warmup-steps", "0", "--no-plot"]
    assert main([*args, "--out-dir", str(tmp_path / "a")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert calls == [1]
    outputs = next(i for i, line in enumerate(lines) if line.startswith("outputs:"))
    assert lines[outputs + 1].startswith("threads: 1 (0.4 of 2 CPUs idle: other processes used 1.6 over the last")
    monkeypatch.setattr(cpu_load.OthersCpu, "cpus", lambda self: 0.0)        # an idle machine: both cores
    assert main([*args, "--out-dir", str(tmp_path / "b"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert calls == [1, 2] and summary["threads_choice"].startswith("threads: 2 (2.0 of 2 CPUs idle")
    assert main([*args, "--out-dir", str(tmp_path / "c"), "--threads", "1", "--json"]) == 0     # chosen: kept
    summary = json.loads(capsys.readouterr().out)
    assert calls == [1, 2, 1] and summary["threads_choice"] is None
