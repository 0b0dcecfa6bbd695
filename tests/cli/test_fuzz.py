"""Fuzzing the planning commands' flags: any input ends in exit status 0 or 2 (one line), never a traceback.

Runs in-process through trainledger.cli.main.main with hypothesis drawing flags and values, good and bad.
"""

import atexit
import contextlib
import io
import json
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainledger.cli import main as cli_main

NUMBERS = ["0", "-1", "1", "2", "3", "7", "8", "12", "64", "1024", "1.5", "0.5", "1e400", "abc", "", "15T", "70B",
           "7.5e9", "80GB", "80GiB", "2w", "14d", "36h", "1e22", "1,000", "4K", "-5B", "nan", "inf"]

def _config_files() -> list[str]:
    """Config files a user might pass by mistake (and one good one), written once per test session."""
    folder = Path(tempfile.mkdtemp(prefix="trainledger-fuzz-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    small_llama = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                   "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 128}
    files = {"good.json": json.dumps(small_llama), "bert.json": json.dumps({"model_type": "bert"}),
             "malformed.json": "{not json", "list.json": "[1, 2]", "empty.json": "",
             "partial.json": json.dumps({"model_type": "llama", "hidden_size": 64}),
             "heads.json": json.dumps(small_llama | {"num_attention_heads": 5}),
             "strings.json": json.dumps(small_llama | {"hidden_size": "64"}),
             "negative.json": json.dumps(small_llama | {"num_hidden_layers": -2})}
    for name, text in files.items():
        (folder / name).write_text(text)
    (folder / "binary.json").write_bytes(b"\xff\xfe\x00\x01")
    (folder / "empty-dir").mkdir()
    return [str(folder / name) for name in [*files, "binary.json", "empty-dir"]]


MODELS = ["gpt2", "tiny", "llama-2-7b", "cruncher", "no-such-model", "missing.json", "", *_config_files()]
FLAGS = {
    "plan": {"--model": MODELS, "--params": NUMBERS, "--tokens": NUMBERS, "--gpu": ["h100", "a100", "tpu-v4", "h1000"],
             "--num-gpus": NUMBERS, "--mfu": NUMBERS, "--dtype": ["bf16", "fp32", "fp8", "fp4"], "--seq-len": NUMBERS,
             "--attention": ["full", "causal", "x"], "--deadline": NUMBERS},
    "fit": {"--gpu": ["h100", "l4", "mi300x", "nope"], "--num-gpus": NUMBERS, "--memory-per-gpu": NUMBERS,
            "--optimizer": ["adamw", "sgd", "adafactor", "adam-8bit", "lion"],
            "--precision": ["fp32", "bf16", "mixed-bf16", "amp-fp16", "fp64"], "--zero": ["0", "1", "2", "3", "4", "-1"],
            "--reserve": NUMBERS, "--model": MODELS, "--seq-len": NUMBERS, "--batch-size": NUMBERS,
            "--recompute": ["none", "selective", "full", "x"]},
    "optimal": {"--budget-flops": NUMBERS, "--gpu": ["h100", "b200", "x"], "--num-gpus": NUMBERS, "--days": NUMBERS,
                "--mfu": NUMBERS, "--law": ["chinchilla-20", "approach3", "kaplan"], "--tokens-per-param": NUMBERS},
    "params": {"--model": MODELS},
    "flops": {"--model": MODELS, "--batch-size": NUMBERS, "--seq-len": NUMBERS, "--attention": ["full", "causal", "x"],
              "--recompute": ["none", "selective", "full", "x"]},
    "memory": {"--model": MODELS, "--params": NUMBERS, "--batch-size": NUMBERS, "--seq-len": NUMBERS,
               "--precision": ["fp32", "amp-bf16", "mixed-fp16", "bf16", "x"],
               "--optimizer": ["adamw", "adam", "sgd", "momentum", "adafactor", "adam-8bit", "x"],
               "--zero": ["0", "1", "2", "3", "9"], "--dp": NUMBERS, "--tp": NUMBERS, "--pp": NUMBERS,
               "--recompute": ["none", "selective", "full"], "--gpu": ["h100", "a100-40gb", "x"], "--reserve": NUMBERS},
    "infer": {"--model": MODELS, "--gpu": ["h100", "l4", "tpu-v5e", "x"], "--batch-size": NUMBERS, "--prompt-len": NUMBERS,
              "--gen-len": NUMBERS, "--dtype": ["bf16", "fp8", "fp32", "int8"], "--kv-dtype": ["fp8", "fp16", "x"],
              "--tp": NUMBERS, "--reserve": NUMBERS},
}
SWITCHES = {"memory": ["--flash", "--no-flash", "--sp"], "infer": ["--no-cache", "--json"]}


@st.composite
def argv(draw):
    command = draw(st.sampled_from(sorted(FLAGS)))
    flags = FLAGS[command]
    chosen = draw(st.lists(st.sampled_from(sorted(flags)), max_size=5, unique=True))
    args = [command]
    for flag in chosen:
        args += [flag, draw(st.sampled_from(flags[flag]))]
    args += draw(st.lists(st.sampled_from(SWITCHES.get(command, ["--json"])), max_size=2, unique=True))
    if draw(st.booleans()):
        args.append("--json")
    return args


@settings(max_examples=250, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(argv())
def test_planning_commands_exit_0_or_2_without_traceback(args):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = cli_main.main(args)
    message = err.getvalue()
    assert status in (0, 2), f"{args}: status {status}, stderr {message!r}"
    assert "Traceback" not in message
    if status == 2:
        assert message.startswith("error:") and message.count("\n") == 1, f"{args}: {message!r}"
    else:
        assert out.getvalue()


CONFIG_FILES = MODELS[6:]  # "" and the files


@pytest.mark.parametrize("command", ["params", "plan", "flops", "memory", "fit"])
def test_every_bad_config_file_is_exit_2_in_one_line_and_the_good_one_works(command):
    for path in CONFIG_FILES:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = cli_main.main([command, "--model", path, "--json"])
        message = err.getvalue()
        if path.endswith("good.json"):
            assert status == 0 and json.loads(out.getvalue()), f"{command} {path}: {message!r}"
        else:
            assert status == 2, f"{command} {path}: status {status}, stderr {message!r}"
            assert message.startswith("error:") and message.count("\n") == 1 and "--model" in message, message
