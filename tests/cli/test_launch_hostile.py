"""Issue 40, item 2: the launch texts of `layout --launch` run nothing but the trainer, whatever the model's path.

A model directory named `a⏎touch PWNED #` went unquoted into the `# layout #N of <name>` comment: the newline
ended the comment and the next line ran (in the sbatch text it also came before the #SBATCH lines, which Slurm
then ignored). docs/train.md advised `bash -c '<the torchrun line>'`, whose outer single quotes the path's quoting
closed, so `s$(touch PWNED)` ran in the outer shell.

Reference: the texts are run as printed and as docs/train.md says (saved to a file, `bash FILE`), with stand-ins
first on PATH: `torchrun` records its argv (NUL-separated) and exits, `srun` runs its arguments, `scontrol` prints
one host name. What ran is then read back: the recorded argv (the trainer's, the path one argument, byte for
byte) and the directory, in which no file named PWNED* appeared.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from trainledger.cli import launch
from trainledger.cli.main import main

HOSTILE = ["a\ntouch PWNED_newline #", "s$(touch PWNED_dollar)", "b`touch PWNED_backtick`", "q'\";touch PWNED_semi;'",
           "cr\rx\u2028y\ttab", "all\n$(touch PWNED_a)`touch PWNED_b`';touch PWNED_c;\"#"]
TINY = {"model_type": "llama", "vocab_size": 256, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "intermediate_size": 128, "max_position_embeddings": 256}

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="the launch texts are bash scripts")


def _stand_ins(folder):
    """torchrun (records argv), srun (runs its arguments), scontrol (one host) in `folder`."""
    folder.mkdir()
    scripts = {
        "torchrun": f"#!{sys.executable}\nimport os, sys\n"
                    "open(os.environ['ARGV_FILE'], 'ab').write(b'\\0'.join(os.fsencode(a) for a in sys.argv) + b'\\n\\0')\n",
        "srun": "#!/bin/bash\nexec \"$@\"\n",
        "scontrol": "#!/bin/bash\necho node0\n",
    }
    for name, text in scripts.items():
        (folder / name).write_text(text)
        (folder / name).chmod(0o755)


def _texts(capsys, config_path) -> dict:
    capsys.readouterr()
    assert main(["layout", "--model", str(config_path), "--gpu", "h100", "--num-gpus", "2", "--launch", "torchrun",
                 "--json"]) == 0
    return json.loads(capsys.readouterr().out)["launch"]


def _run(script_text: str, where, bin_dir, argv_file) -> subprocess.CompletedProcess:
    script = where / "launch.sh"
    script.write_text(script_text)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "ARGV_FILE": str(argv_file),
           "NODE_RANK": "0", "MASTER_ADDR": "127.0.0.1", "DATA": "data.tokens", "RUN_DIR": "run",
           "SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "node0", "SLURM_SUBMIT_DIR": str(where), "SLURM_JOB_NAME": "j"}
    return subprocess.run(["bash", str(script)], cwd=where, env=env, capture_output=True, timeout=60)


@pytest.mark.parametrize("name", HOSTILE, ids=range(len(HOSTILE)))
@pytest.mark.parametrize("kind", launch.KINDS)
def test_the_printed_texts_run_only_the_trainer(capsys, tmp_path, name, kind):
    model_dir = tmp_path / "models" / name
    model_dir.mkdir(parents=True)
    config = model_dir / "config.json"
    config.write_text(json.dumps(TINY))
    texts = _texts(capsys, config)
    text = texts[kind]
    assert texts["runnable"]
    for line in text.splitlines():         # every line a comment or a command of ours: none begins with the path
        assert line.startswith(("#", "torchrun ", "srun ", "export ", ": ", "head_node=")), line
    if kind == "slurm":
        lines = text.splitlines()
        first_command = next(i for i, line in enumerate(lines) if not line.startswith("#"))
        # all nine directives before the first command (job name, nodes, tasks, GPUs, CPUs, time, output, error,
        # exclusive: issue 41 added --cpus-per-task, --time, --output, --error to issue 40's five)
        assert sum(line.startswith("#SBATCH ") for line in lines[:first_command]) == 9
        assert "#SBATCH --job-name=trainledger-config" in lines
    assert "PWNED" not in text.replace(launch.shell_word(str(config)), "")     # only inside --model's own word
    assert str(tmp_path) not in text.replace(launch.shell_word(str(config)), "")
    work = tmp_path / "work"
    work.mkdir()
    _stand_ins(tmp_path / "bin")
    argv_file = tmp_path / "argv"
    done = _run(text, work, tmp_path / "bin", argv_file)
    assert done.returncode == 0, done.stderr
    assert not [p for p in tmp_path.rglob("PWNED*")], sorted(p.name for p in tmp_path.rglob("*"))
    runs = [r for r in argv_file.read_bytes().split(b"\n\0") if r]
    assert len(runs) == 1                                              # torchrun, once
    argv = [os.fsdecode(a) for a in runs[0].split(b"\0")]
    assert argv[argv.index("-m") + 1:argv.index("-m") + 3] == ["trainledger.cli.main", "train"]
    assert argv[argv.index("--model") + 1] == str(config)               # the path, one argument, unchanged
    assert argv[-5:] == ["--data", "data.tokens", "--out-dir", "run", "--resume"]


def test_the_comment_of_a_config_names_no_path_and_presets_keep_their_name(capsys, tmp_path):
    model_dir = tmp_path / HOSTILE[0]
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps(TINY))
    texts = _texts(capsys, model_dir / "config.json")
    assert f"# layout #{texts['layout']} of the --model config.json on 2 × h100-sxm" in texts["torchrun"]
    assert main(["layout", "--model", "tiny", "--gpu", "h100", "--num-gpus", "2", "--launch", "slurm"]) == 0
    assert "#SBATCH --job-name=trainledger-tiny" in capsys.readouterr().out


@pytest.mark.parametrize("word", ["plain", "with space", "a\nb", "$(x)`y`'z\";", "\u2028", "tab\t", "\\\\", "b\udcffx"])
def test_shell_word_is_one_bash_word_on_one_line(word):
    quoted = launch.shell_word(word)
    assert "\n" not in quoted and "\r" not in quoted and quoted.isprintable()
    out = subprocess.run(["bash", "-c", "printf %s " + quoted], capture_output=True).stdout
    assert out == os.fsencode(word)


def test_comment_text_keeps_one_line():
    assert launch.comment_text("a\nb\rc\u2028d\x00e") == "a?b?c?d?e"
