"""`trainledger layout --launch torchrun|slurm` (cli/launch.py): the printed train flags are the layout's, parsed by
train's own parser; parts train cannot run are named and their command commented out. Expectations by hand."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess

import pytest

from trainledger.cli import launch
from trainledger.cli import main as cli_main

LLAMA_16 = ["layout", "--model", "llama-3-8b", "--gpu", "h100", "--num-gpus", "16"]


def run(capsys, *argv) -> str:
    status = cli_main.main(list(argv))
    out, err = capsys.readouterr()
    assert status == 0, err
    return out


def command_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def train_config(line: str, world_size: int, monkeypatch):
    """The TrainConfig `trainledger train` resolves from the train arguments of a printed torchrun line, in a
    process of a job of `world_size` ranks (what torchrun sets), placeholders filled in."""
    words = shlex.split(line.replace("$MASTER_ADDR", "node0").replace("$NODE_RANK", "0")
                        .replace('"$DATA"', "data.tokens").replace('"$RUN_DIR"', "run"))
    train_args = words[words.index("train") + 1:]
    monkeypatch.setenv("WORLD_SIZE", str(world_size))
    args = cli_main.build_parser().parse_args(["train", *train_args])
    from trainledger.cli.train import config_from_args
    return config_from_args(args), words


def test_torchrun_line_runs_the_layout_it_names_with_its_flags(capsys, monkeypatch):
    launched = json.loads(run(capsys, *LLAMA_16, "--launch", "torchrun", "--json"))["launch"]["layout"]
    best = json.loads(run(capsys, *LLAMA_16, "--top", str(launched), "--json"))["layouts"][launched - 1]
    text = run(capsys, *LLAMA_16, "--launch", "torchrun")
    [line] = command_lines(text)
    assert any(line.startswith(f"# layout #{launched} of llama-3-8b on 16 × h100-sxm:") for line in text.splitlines())
    assert (launched == 1) == text.startswith("# layout #1 ")      # a faster layout train lacks parts of is named
    config, words = train_config(line, 16, monkeypatch)
    # 16 H100 = 2 HGX nodes of 8: one agent per node, 8 processes each, node 0 the static rendezvous
    assert words[:words.index("-m")] == ["torchrun", "--nnodes", "2", "--nproc-per-node", "8", "--node-rank", "0",
                                         "--rdzv-backend", "static", "--rdzv-endpoint", "node0:29500"]
    assert (config.tp, config.sp, config.pp) == (best["tp"], best["sp"], best["pp"])
    assert config.parallel == {0: "ddp", 3: "fsdp"}[best["zero"]]
    assert config.batch_size == 16                        # the global batch (default: one sequence per GPU)
    dp = 16 // (best["tp"] * best["pp"])
    assert dp == best["dp"] and config.batch_size // (dp * config.grad_accum) == best["batch_size"]
    assert (config.seq_len, config.precision, config.optimizer) == (8192, "amp-bf16", "adamw")
    assert (config.model, config.data, config.out_dir, config.resume) == ("llama-3-8b", "data.tokens", "run", True)


def test_slurm_script_has_one_agent_per_node_and_elastic_restarts(capsys, monkeypatch):
    text = run(capsys, *LLAMA_16, "--launch", "slurm")
    lines = text.splitlines()
    assert lines[0] == "#!/bin/bash"
    for directive in ("--nodes=2", "--ntasks-per-node=1", "--gpus-per-node=8"):
        assert f"#SBATCH {directive}" in lines
    first_command = next(i for i, line in enumerate(lines) if line and not line.startswith("#"))
    assert all(not line.startswith("#SBATCH") for line in lines[first_command:])    # sbatch stops reading there
    assert "export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" in lines[first_command:]     # before srun: it inherits it
    [srun] = [line for line in lines if line.startswith("srun torchrun")]
    assert lines.index("export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1") < lines.index(srun)
    words = shlex.split(srun.replace('"$head_node:29500"', "head:29500"))
    assert words[words.index("--rdzv-backend") + 1] == "c10d"
    assert words[words.index("--rdzv-endpoint") + 1] == "head:29500"
    assert words[words.index("--max-restarts") + 1] == str(launch.MAX_RESTARTS) and words[-1] == "--resume"
    torchrun_train = command_lines(run(capsys, *LLAMA_16, "--launch", "torchrun"))[0].split(" train ", 1)[1]
    assert srun.split(" train ", 1)[1] == torchrun_train          # the same train flags in both forms


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash to check the script's syntax")
@pytest.mark.parametrize("kind", launch.KINDS)
def test_printed_text_is_valid_bash(capsys, kind):
    text = run(capsys, *LLAMA_16, "--launch", kind)
    assert subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True).returncode == 0


@pytest.mark.parametrize("num_gpus, gpus_per_node, expected, why", [
    (16, 8, (2, 8), "two full HGX nodes"),
    (8, 8, (1, 8), "one full node"),
    (2, 8, (1, 2), "a job smaller than a node takes one node"),
    (2, 1, (2, 1), "one GPU per node: two agents of one process"),
    (12, 8, (2, 6), "12 on 8-GPU nodes: 2 nodes of 6"),
    (9, 8, (0, 0), "9 do not split evenly over 2 nodes"),
])
def test_nodes_of(num_gpus, gpus_per_node, expected, why):
    assert launch.nodes_of(num_gpus, gpus_per_node) == expected, why


def layout(**changes) -> dict:
    base = {"tp": 1, "sp": False, "pp": 1, "interleave": 1, "cp": 1, "dp": 8, "zero": 3, "batch_size": 1,
            "recompute": "none", "step_seconds": 1.0, "mfu": 0.4, "global_batch_size": 8}
    return {**base, **changes}


@pytest.mark.parametrize("changes, precision, optimizer, nodes, named", [
    ({"cp": 2, "dp": 4}, "amp-bf16", "adamw", 1, "context parallelism (cp 2)"),
    ({"pp": 2, "interleave": 2, "dp": 4, "batch_size": 1}, "amp-bf16", "adamw", 1, "interleaved pipeline"),
    ({"zero": 1}, "amp-bf16", "adamw", 1, "ZeRO-1"),
    ({"zero": 2}, "amp-bf16", "adamw", 1, "ZeRO-2"),
    ({"recompute": "selective"}, "amp-bf16", "adamw", 1, "selective recomputation"),
    ({"tp": 2, "pp": 2, "dp": 2, "global_batch_size": 4}, "amp-bf16", "adamw", 1, "--tp with --pp"),
    ({"tp": 2, "dp": 4, "zero": 0}, "amp-bf16", "adamw", 1, "needs --parallel fsdp"),
    ({"pp": 4, "dp": 2, "batch_size": 2, "global_batch_size": 8}, "amp-bf16", "adamw", 1, "needs at least 4"),
    ({}, "fp8-delayed", "adamw", 1, "--precision fp8-delayed: train runs"),
    ({}, "fp8-cs", "adamw", 1, "--precision fp8-cs with FSDP"),
    ({}, "mixed-bf16", "adamw", 1, "runs amp-bf16 there"),
    ({}, "amp-bf16", "adafactor", 1, "--optimizer adafactor"),
    ({}, "amp-bf16", "adamw", 0, "do not split evenly"),
])
def test_unsupported_parts_are_named(changes, precision, optimizer, nodes, named):
    reasons = launch.unsupported(layout(**changes), precision, optimizer, nodes)
    assert len(reasons) == 1 and named in reasons[0], reasons


@pytest.mark.parametrize("changes, precision", [
    ({}, "amp-bf16"),                                             # FSDP over 8
    ({"zero": 0}, "mixed-bf16"),                                  # DDP with a master copy: train runs it
    ({"tp": 8, "sp": True, "dp": 1, "zero": 0}, "bf16"),          # TP alone
    ({"pp": 2, "dp": 4, "batch_size": 1, "global_batch_size": 8}, "fp32"),   # 2 micro-batches for 2 stages
])
def test_runnable_layouts_have_no_reasons(changes, precision):
    assert launch.unsupported(layout(**changes), precision, "adamw", 1) == []


RESULT = {"model": "tiny", "gpu": "h100-sxm", "num_gpus": 8, "global_batch_size": 8, "seq_len": 64,
          "precision": "amp-bf16", "optimizer": "adamw"}


def test_fastest_runnable_layout_is_launched_and_why_the_faster_are_not():
    ranked = [layout(cp=2, dp=4), layout(interleave=2, pp=2, dp=4), layout(zero=0), layout()]
    texts = launch.launch_texts(RESULT, ranked, model="tiny", gpus_per_node=8)
    assert texts["layout"] == 3 and texts["runnable"]
    assert texts["train_args"] == ["--model", "tiny", "--parallel", "ddp", "--batch-size", "1", "--global-batch-size",
                                   "8", "--seq-len", "64", "--precision", "amp-bf16", "--optimizer", "adamw"]
    for kind in launch.KINDS:
        assert "# the fastest layout, #1, needs what trainledger train does not implement:" in texts[kind]
        assert "#   - context parallelism (cp 2)" in texts[kind]
        assert "# #2 likewise needs parts train lacks; so this runs #3" in texts[kind]
        assert "# layout #3 of tiny on 8 × h100-sxm" in texts[kind] and "cannot run this layout" not in texts[kind]
    assert texts["slurm"].startswith("#!/bin/bash\n# the fastest layout")


def test_no_runnable_layout_prints_reasons_and_a_commented_command():
    texts = launch.launch_texts(RESULT, [layout(cp=2, dp=4), layout(recompute="selective")], model="tiny",
                                gpus_per_node=8)
    assert texts["layout"] == 1 and not texts["runnable"]
    for kind in launch.KINDS:
        assert "cannot run this layout" in texts[kind] and "context parallelism (cp 2)" in texts[kind]
        assert not [line for line in command_lines(texts[kind]) if "torchrun" in line]    # nothing runs it
        assert [line for line in texts[kind].splitlines() if line.startswith(("# torchrun", "# srun torchrun"))]


def test_launch_looks_past_the_table_for_a_layout_train_runs(capsys):
    """gpt2 on 16 H100: the five fastest are interleaved pipelines (train runs plain 1F1B); the launched layout is
    the fastest the search found without what train lacks, and the table stays the top 5."""
    argv = ["layout", "--model", "gpt2", "--gpu", "h100", "--num-gpus", "16"]
    table = json.loads(run(capsys, *argv, "--json"))["layouts"]
    data = json.loads(run(capsys, *argv, "--launch", "torchrun", "--json"))
    assert data["layouts"] == table and all(r["interleave"] > 1 for r in table)
    assert data["launch"]["runnable"] and data["launch"]["layout"] > len(table)
    assert "an interleaved pipeline (" in data["launch"]["torchrun"]


def test_config_json_model_path_is_quoted(tmp_path):
    texts = launch.launch_texts(RESULT, [layout()], model=str(tmp_path / "my model" / "config.json"),
                                gpus_per_node=8)
    words = shlex.split(command_lines(texts["torchrun"])[0])
    assert words[words.index("--model") + 1] == str(tmp_path / "my model" / "config.json")


def test_json_carries_both_forms(capsys):
    data = json.loads(run(capsys, *LLAMA_16, "--launch", "slurm", "--json"))
    rank = data["launch"]["layout"]
    assert rank >= 1 and data["launch"]["runnable"] and data["launch"]["nodes"] == 2
    assert data["launch"]["processes_per_node"] == 8 and data["launch"]["slurm"].startswith("#!/bin/bash")
    assert f"# layout #{rank} of llama-3-8b" in data["launch"]["torchrun"]


def test_bad_launch_is_one_line_naming_the_flag(capsys):
    assert cli_main.main([*LLAMA_16, "--launch", "mpirun"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and err.count("\n") == 1 and "--launch" in err and "slurm" in err


def test_no_fitting_layout_stays_the_searchs_one_line(capsys):
    assert cli_main.main(["layout", "--model", "llama-3-70b", "--gpu", "h100", "--num-gpus", "1",
                          "--launch", "torchrun"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no layout of llama-3-70b fits") and err.count("\n") == 1
