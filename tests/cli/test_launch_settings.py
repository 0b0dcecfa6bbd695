"""Issue 41, item 1: the launch text of `layout --launch` is one a cluster user submits as is.

70B on 64 H100 (`layout --model llama-3-70b --gpu h100 --num-gpus 64 --launch slurm`): the script passes `bash -n`
and shellcheck, names the learning rate, warmup and steps for 70B in its header (the values checked against the
published figures: Llama 3's Table 3 and Sec. 3.4.1, Chinchilla's 20 tokens per parameter), asks for --time (checked
against its formula by hand), --cpus-per-task, --output/--error, and has the environment line to set once; --rank
and a --config candidate pick the layout, and where train cannot run it the first comment line says why and which
layout it launches instead. Expectations by hand or from the papers; the torchrun line is run as two agents in
tests/train/test_multinode.py.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from trainledger.account.planning import failures
from trainledger.account.planning.launch_settings import Asked, recipe_for, settings, slurm_time
from trainledger.cli import launch
from trainledger.cli import main as cli_main
from trainledger.cli.launch_args import slurm_duration
from trainledger.specs import get_model

L70 = ["layout", "--model", "llama-3-70b", "--gpu", "h100", "--num-gpus", "64"]
LLAMA3_70B_PARAMS = 70_553_706_496      # Meta-Llama-3-70B's parameter count (its safetensors index, transformers)


def run(capsys, *argv) -> str:
    capsys.readouterr()
    status = cli_main.main(list(argv))
    out, err = capsys.readouterr()
    assert status == 0, err
    return out


def refused(capsys, *argv) -> str:
    capsys.readouterr()
    assert cli_main.main(list(argv)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and err.count("\n") == 1, err
    return err


def header_value(text: str, flag: str) -> str:
    [line] = [line for line in text.splitlines() if line.startswith(f"#   {flag} ")]
    return line.split()[2].rstrip(":")


@pytest.fixture(scope="module")
def slurm_70b():
    status_out = subprocess.run([sys.executable, "-m", "trainledger.cli.main", *L70, "--launch", "slurm", "--json"],
                                capture_output=True, text=True, timeout=120)
    assert status_out.returncode == 0, status_out.stderr
    return json.loads(status_out.stdout)


def test_70b_script_passes_bash_n(slurm_70b):
    text = slurm_70b["launch"]["slurm"]
    assert subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True).returncode == 0


@pytest.mark.skipif(shutil.which("shellcheck") is None,
                    reason="shellcheck is not installed (bash scripts/install_shellcheck.sh; setup.sh --test does it)")
@pytest.mark.parametrize("kind", launch.KINDS)
def test_70b_texts_pass_shellcheck(slurm_70b, tmp_path, kind):
    path = tmp_path / f"launch.{kind}"
    path.write_text(slurm_70b["launch"][kind])
    done = subprocess.run(["shellcheck", "--shell=bash", "--severity=info", str(path)], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stdout


@pytest.mark.skipif(shutil.which("shellcheck") is None,
                    reason="shellcheck is not installed (bash scripts/install_shellcheck.sh; setup.sh --test does it)")
@pytest.mark.parametrize("argv, runnable", [
    (["--model", "tiny", "--num-gpus", "9"], False),               # 9 GPUs do not split over nodes: commented out
    (["--model", "gpt2", "--num-gpus", "16", "--rank", "3"], True),  # a skipped layout's note first
])
def test_other_texts_pass_shellcheck(capsys, tmp_path, argv, runnable):
    data = json.loads(run(capsys, "layout", "--gpu", "h100", *argv, "--launch", "slurm", "--json"))["launch"]
    assert data["runnable"] == runnable
    for kind in launch.KINDS:
        path = tmp_path / f"launch.{kind}"
        path.write_text(data[kind])
        done = subprocess.run(["shellcheck", "--shell=bash", "--severity=info", str(path)], capture_output=True,
                              text=True)
        assert done.returncode == 0, (kind, done.stdout)


def test_70b_header_names_the_published_settings(slurm_70b):
    """Llama 3 (arXiv:2407.21783) Table 3: 70B's peak lr 1.5e-4; Sec. 3.4.1: warmup 8,000 steps, cosine to 8e-7 from
    8e-5 (1 %); Chinchilla: 20 tokens per parameter at 64 sequences of 8,192 tokens per step."""
    text, data = slurm_70b["launch"]["slurm"], slurm_70b["launch"]
    assert float(header_value(text, "--lr")) == 1.5e-4 and "Table 3" in text
    assert float(header_value(text, "--min-lr")) == pytest.approx(1.5e-6)
    assert header_value(text, "--warmup-steps") == "8000"
    steps = math.ceil(20 * LLAMA3_70B_PARAMS / (64 * 8192))
    assert header_value(text, "--steps") == str(steps) == str(data["settings"]["steps"])
    assert "Chinchilla" in text and "Hoffmann" in text
    words = shlex.split(next(line for line in text.splitlines() if line.startswith("srun ")).replace(
        '"$head_node:29500"', "h:1"))
    train = words[words.index("train") + 1:]
    for flag, value in (("--lr", "0.00015"), ("--min-lr", "1.5e-06"), ("--warmup-steps", "8000"),
                        ("--steps", str(steps)), ("--recompute", "full")):
        assert train[train.index(flag) + 1] == value, flag


def test_70b_checkpoint_interval_is_dalys(slurm_70b):
    """A checkpoint of amp-bf16 + AdamW is 12 bytes per parameter (fp32 weights, two fp32 moments); δ = bytes /
    (3.42 GB/s × 8 nodes); M = 1 / (Llama 3's 4.74e-4 per GPU-day × 64); Daly's τ in steps of the predicted step."""
    s = slurm_70b["launch"]["settings"]
    delta = 12 * LLAMA3_70B_PARAMS / (7e12 / 2048 * 8)
    mtbf = 86400 / (419 / (54 * 16384) * 64)
    assert s["checkpoint_seconds"] == pytest.approx(delta, rel=1e-9)
    step = slurm_70b["layouts"][0]["step_seconds"]
    assert s["checkpoint_every"] == round(failures.daly_interval(delta, mtbf) / step)
    assert f"--checkpoint-every {s['checkpoint_every']}" in " ".join(slurm_70b["launch"]["train_args"])


def test_70b_sbatch_directives_and_environment(slurm_70b):
    text = slurm_70b["launch"]["slurm"]
    lines = text.splitlines()
    sbatch = {line[len("#SBATCH "):].partition("=")[0]: line.partition("=")[2] for line in lines
              if line.startswith("#SBATCH ")}
    assert list(sbatch) == ["--job-name", "--nodes", "--ntasks-per-node", "--gpus-per-node", "--cpus-per-task", "--time",
                            "--output", "--error", "--exclusive"]
    assert sbatch["--cpus-per-task"] == "32"                     # 4 cores × 8 GPUs of a node's one task
    assert (sbatch["--output"], sbatch["--error"]) == ("%x-%j.out", "%x-%j.err")
    # --time: the steps at the error bar's high end + the checkpoint writes, + 10 % + 15 min, rounded up to the minute
    s, best = slurm_70b["launch"]["settings"], slurm_70b["layouts"][0]
    expected = ((s["steps"] * best["step_seconds_high"] + (s["steps"] // s["checkpoint_every"]) * s["checkpoint_seconds"])
                * 1.1 + 900)
    days, hours, minutes, seconds = map(int, re.fullmatch(r"(\d+)-(\d\d):(\d\d):(\d\d)", sbatch["--time"]).groups())
    limit = days * 86400 + hours * 3600 + minutes * 60 + seconds
    assert seconds == 0 and expected <= limit < expected + 60
    assert f"--time {sbatch['--time']}:" in text and "sinfo" in text       # what to do where a partition caps it
    first_command = next(i for i, line in enumerate(lines) if not line.startswith("#"))
    assert lines[first_command:first_command + 2] == [
        'export TRAINLEDGER_VENV="${TRAINLEDGER_VENV:-$HOME/venvs/trainledger}"',
        'export PATH="$TRAINLEDGER_VENV/bin:$PATH"']                     # the environment, set once
    assert any(">>> SET ONCE" in line for line in lines[:first_command]) and "module load" in text
    assert "# export NCCL_SOCKET_IFNAME=" in text and "# export NCCL_IB_HCA=" in text
    srun = lines.index(next(line for line in lines if line.startswith("srun ")))
    assert lines.index('export SRUN_CPUS_PER_TASK="$SLURM_CPUS_PER_TASK"') < srun


def test_slurm_script_runs_as_sbatch_would(slurm_70b, tmp_path):
    """Stand-ins first on PATH: srun runs its arguments, scontrol prints two hosts, torchrun records its argv; the
    script's environment line puts the virtualenv's bin first (and TRAINLEDGER_VENV chooses it)."""
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name, body in (("srun", 'exec "$@"'), ("scontrol", "printf 'node0\\nnode1\\n'"),
                       ("torchrun", 'printf "%s\\n" "$0" "$@" > "$ARGV_FILE"; echo "$SRUN_CPUS_PER_TASK" >> "$ARGV_FILE"')):
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    script = tmp_path / "job.sbatch"
    script.write_text(slurm_70b["launch"]["slurm"])
    env = {**os.environ, "TRAINLEDGER_VENV": str(tmp_path / "venv"), "ARGV_FILE": str(tmp_path / "argv"),
           "DATA": "/shared/data.tokens", "SLURM_JOB_NODELIST": "node[0-1]", "SLURM_JOB_ID": "9",
           "SLURM_SUBMIT_DIR": str(tmp_path), "SLURM_JOB_NAME": "j", "SLURM_CPUS_PER_TASK": "32"}
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    argv = (tmp_path / "argv").read_text().splitlines()
    assert argv[0] == str(bin_dir / "torchrun")                       # the venv's, by PATH
    assert argv[argv.index("--rdzv-endpoint") + 1] == "node0:29500" and argv[-1] == "32"
    assert argv[argv.index("--out-dir") + 1] == f"{tmp_path}/runs/j"


def test_rank_1_launches_layout_1_with_full_recomputation(slurm_70b, capsys):
    data = json.loads(run(capsys, *L70, "--launch", "slurm", "--rank", "1", "--json"))
    assert data["layouts"][0]["recompute"] == "full"
    assert (data["launch"]["layout"], data["launch"]["asked"], data["launch"]["runnable"]) == (1, 1, True)
    assert data["launch"]["note"] is None and data["launch"]["slurm"] == slurm_70b["launch"]["slurm"]
    assert data["launch"]["slurm"].splitlines()[1].startswith("# layout #1 of llama-3-70b on 64 × h100-sxm:")


def test_a_rank_train_cannot_run_says_so_first_and_names_what_it_runs(capsys):
    """#2 of 70B on 64 H100 is context parallel (cp 2); #1 and #3 are one place away and train runs both: the
    faster, #1, is launched, and the line right after the shebang says so on its own."""
    data = json.loads(run(capsys, *L70, "--launch", "slurm", "--rank", "2", "--top", "3", "--json"))
    assert data["layouts"][1]["cp"] == 2
    got = data["launch"]
    assert (got["asked"], got["layout"], got["runnable"]) == (2, 1, True)
    first = got["slurm"].splitlines()[1]
    assert first == "# " + got["note"]
    assert first.startswith("# layout #2 (--rank 2) needs what trainledger train does not implement: context "
                            "parallelism (cp 2)") and "this runs #1 instead, the nearest layout train runs: tp 1," in first
    assert got["torchrun"].splitlines()[0] == first
    assert f"# layout #1 of llama-3-70b" in got["slurm"]


def test_a_config_candidate_is_the_layout_launched(capsys, tmp_path):
    table = json.loads(run(capsys, *L70, "--top", "5", "--json"))["layouts"]
    path = tmp_path / "third.json"
    path.write_text(json.dumps(table[2]["run"]))
    data = json.loads(run(capsys, "layout", "--config", str(path), "--launch", "slurm", "--json"))
    assert data["launch"]["layout"] == 3 and data["launch"]["asked"] == 3 and data["launch"]["runnable"]
    assert "# layout #3 of llama-3-70b on 64 × h100-sxm: tp 2" in data["launch"]["slurm"]
    err = refused(capsys, "layout", "--config", str(path), "--launch", "slurm", "--rank", "1")
    assert "--rank" in err and "give one" in err
    other = dict(table[2]["run"])
    assert table[0]["recompute"] == "full"         # the lightest recomputation that fits #1's layout, so the
    other = dict(table[0]["run"])                  # same layout with selective recomputation does not fit
    other["levers"] = {**other["levers"], "recompute": "selective"}
    path.write_text(json.dumps(other))
    err = refused(capsys, "layout", "--config", str(path), "--launch", "slurm")
    assert f"--config {path}: its layout (tp 1" in err and "recompute selective" in err and "layout --json" in err


def test_flags_override_every_setting(capsys):
    data = json.loads(run(capsys, *L70, "--launch", "slurm", "--json", "--lr", "1e-4", "--min-lr", "1e-5",
                          "--warmup-steps", "100", "--tokens", "1B", "--checkpoint-every", "50", "--time", "2d",
                          "--cpus-per-task", "96"))
    args, text = data["launch"]["train_args"], data["launch"]["slurm"]
    for flag, value in (("--lr", "0.0001"), ("--min-lr", "1e-05"), ("--warmup-steps", "100"),
                        ("--steps", str(math.ceil(1e9 / (64 * 8192)))), ("--checkpoint-every", "50")):
        assert args[args.index(flag) + 1] == value, flag
    assert "#SBATCH --time=2-00:00:00" in text and "#SBATCH --cpus-per-task=96" in text
    for flag, source in (("--lr", "--lr"), ("--min-lr", "--min-lr"), ("--warmup-steps", "--warmup-steps"),
                         ("--steps", "--tokens"), ("--checkpoint-every", "--checkpoint-every"), ("--time", "--time")):
        assert re.search(rf"^#   {flag} .*: {source}", text, re.M), flag          # the source: the flag given


@pytest.mark.parametrize("extra, flag", [
    (["--lr", "1e-4"], "--lr"),                                          # without --launch
    (["--launch", "slurm", "--steps", "10", "--tokens", "1B"], "--steps"),
    (["--launch", "slurm", "--time", "soon"], "--time"),
    (["--launch", "slurm", "--rank", "100000"], "--rank"),
    (["--launch", "slurm", "--steps", "10", "--warmup-steps", "20"], "--warmup-steps"),
    (["--launch", "slurm", "--lr", "1e-4", "--min-lr", "1e-3"], "--min-lr"),
])
def test_bad_launch_settings_are_one_line_naming_the_flag(capsys, extra, flag):
    assert flag in refused(capsys, *L70, *extra)


@pytest.mark.parametrize("model, lr, warmup, final, why", [
    ("llama-3-8b", 3e-4, 8000, 0.01, "Llama 3 Table 3"),
    ("llama-3-70b", 1.5e-4, 8000, 0.01, "Llama 3 Table 3"),
    ("llama-3.1-405b", 8e-5, 8000, 0.01, "Llama 3 Table 3; Sec. 3.4.1: 8,000 steps, 8e-5 to 8e-7"),
    ("llama-2-7b", 3e-4, 2000, 0.1, "Llama 2 Table 1 and Sec. 2.2"),
    ("llama-2-70b", 1.5e-4, 2000, 0.1, "Llama 2 Table 1"),
    ("deepseek-v3", 2.2e-4, 2000, 0.1, "DeepSeek-V3 Sec. 4.2: 2K steps, 2.2e-4 to 2.2e-5"),
    ("gpt3-175b", 0.6e-4, None, 0.1, "GPT-3 Table 2.1"),
    ("gpt3-6.7b", 1.2e-4, None, 0.1, "GPT-3 Table 2.1"),
    ("gpt2", 6.0e-4, None, 0.1, "GPT-3's 125M row, the nearest to 124M"),
    ("qwen2.5-7b", 1.2e-4, None, 0.1, "GPT-3's 6.7B row, the nearest to 7.6B"),
    ("mixtral-8x7b", 1.0e-4, None, 0.1, "12.9B active parameters: GPT-3's 13B row"),
])
def test_recipe_of_each_model_is_its_published_one(model, lr, warmup, final, why):
    recipe = recipe_for(get_model(model))
    assert (recipe.lr, recipe.warmup_steps, recipe.final_lr_fraction) == (lr, warmup, final), why
    if warmup is None:
        assert recipe.warmup_tokens == 375e6                  # GPT-3 App. B


def test_warmup_in_tokens_becomes_steps_and_is_capped():
    """gpt2 on 8 GPUs at 8 × 1,024 tokens per step: GPT-3's 375M tokens are 45,777 steps; Chinchilla's 2.48B tokens
    are 302,832 steps, a tenth of which (30,283) caps the warmup."""
    from trainledger.specs.hardware import get_gpu
    from trainledger.specs.run import Hardware, Run
    spec = get_model("gpt2")
    run = Run().with_(global_batch_size=8, seq_len=1024, precision="amp-bf16", optimizer="adamw")
    got = settings(spec, Hardware(get_gpu("h100"), 8), run, {"step_seconds": 0.05})
    tokens = 20 * 124_439_808                  # gpt2's parameters as transformers counts them (tied head)
    assert got["steps"] == math.ceil(tokens / 8192)
    assert got["warmup_steps"] == min(math.ceil(375e6 / 8192), int(got["steps"] / 10)) == int(got["steps"] / 10)
    assert "capped" in got["sources"]["warmup_steps"]
    short = settings(spec, Hardware(get_gpu("h100"), 8), run, {"step_seconds": 0.05}, Asked(tokens=1e12))
    assert short["warmup_steps"] == math.ceil(375e6 / 8192) and "capped" not in short["sources"]["warmup_steps"]
    assert short["time_seconds"] > short["run_seconds"]           # no error bar given: the prediction, + margin


@pytest.mark.parametrize("seconds, text", [(59, "0-00:01:00"), (3600, "0-01:00:00"), (86400 + 61, "1-00:02:00"),
                                           (436 * 86400 + 3, "436-00:01:00")])
def test_slurm_time_rounds_up_to_the_minute(seconds, text):
    assert slurm_time(seconds) == text


@pytest.mark.parametrize("text, seconds", [("90", 5400), ("10:30", 630), ("48:00:00", 172800), ("2-00", 172800),
                                           ("1-12:30", 131400), ("1-00:00:01", 86401), ("36h", 129600),
                                           ("2d", 172800), ("90min", 5400)])
def test_time_flag_takes_sbatch_forms_and_units(text, seconds):
    assert slurm_duration(text) == seconds
