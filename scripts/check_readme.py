#!/usr/bin/env python3
"""Run every shell command of README.md and docs/*.md as printed, and (--update) regenerate the printed outputs.

A code block is a transcript when it has `$ command` lines: each is followed by the output it printed (up to the
next `$` line). Other shell blocks list commands one per line (`trainledger ...`, `torchrun ...`, with trailing
`# comments`). Each command runs in document order, through bash, in a scratch directory laid out like a fresh
clone after the quick start: the repository's files linked in, a copy of the quick start's `runs/tiny-stdlib`
(when it has finished), `trainledger` and `python` from this interpreter's environment first on PATH, the
checkout's `src/` first on PYTHONPATH, COLUMNS=80 (the width the printed tables were made at), and a HOME of its
own (calibrations and other caches start empty, and the user's are left alone). A command passes
when its exit status is the one printed: 2 when a line of its printed output starts with `error:` (the CLI's one
line for bad input, after whatever it printed first), 0 otherwise.

Tiers (--tier; each includes the ones before it):
  fast  the planning commands (plan, fit, optimal, params, flops, memory, step, layout, mfu, tensor, matmul, dtypes,
        hardware, models, tokenize) and shell one-liners: seconds each, what tests/test_readme.py runs in CI;
  slow  train, measure, profile, bench, tour, checkpoints, generate, export and torchrun: minutes (the quick start's
        `trainledger train` itself is reused from runs/tiny-stdlib when that run has finished, else run);
  all   also the benchmark scripts and the test commands the documents quote.
Never run: set-up (scripts/setup.sh, pip install, install_chromium.sh), what needs a running server
(`trainledger serve`, curl: tests/web/test_serve.py starts the server and checks it) and usage synopses
(`trainledger infer --model M [--tp 1]`). A block whose previous line is `<!-- check_readme: skip REASON -->`
is listed but not run: its commands need a set-up no command gives (a checkpoint corrupted by hand).

Commands run under `bash -o pipefail`; torch's own timestamped log lines (torchrun's OMP_NUM_THREADS notice)
are left out of the outputs. --update rewrites, in place, the printed output of every transcript command it ran whose output is complete (an
output with a `...` line, or a line ending in `...`, is an excerpt and is left alone), then prints a summary of
what changed (--diff: the unified diff too). Review with `git diff` before committing. (A line that is, starts
or ends with `...` marks an excerpt.)

usage: python scripts/check_readme.py [--tier fast|slow|all] [--update] [--diff] [--only TEXT] [FILE.md ...]
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHELL_LANGS = ("", "bash", "sh", "shell", "console", "text")
COMMAND_START = re.compile(r"^(trainledger|torchrun|python|\.venv/bin/|bash |echo |OMP_NUM_THREADS=|pip |scripts/|curl )")
# subcommands that train, measure or run torch (minutes): the slow tier; every other command is fast
SLOW = ("train", "measure", "profile", "bench", "tour", "checkpoints", "generate", "export")
TIERS = ("fast", "slow", "all")
# <!-- check_readme: skip REASON --> on the line before a code block: its commands need a set-up the documents
# cannot give as a command (a checkpoint corrupted by hand, a second trainer running); they are listed, not run
SKIP_MARKER = re.compile(r"^<!--\s*check_readme:\s*skip\s+(.*?)\s*-->$")
# torch's own timestamped log lines (torchrun's OMP_NUM_THREADS notice, its row of asterisks): left out of outputs
TORCH_LOG = re.compile(r"^[WIE]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S+\.py:\d+\]")
TIMEOUT_SECONDS = {"fast": 120, "slow": 1800, "all": 3600}


@dataclass
class Command:
    path: Path                  # the markdown file
    line: int                   # 1-based line of the command in it
    text: str                   # as printed (continuations joined), without the `$ `
    transcript: bool            # a `$ command` followed by its output
    output: list[str] = field(default_factory=list)     # the printed output's lines
    output_span: tuple[int, int] = (0, 0)              # [start, end) 0-based line indices of the output in the file
    tier: str = "fast"
    skip: str = ""              # why it is never run
    indent: str = ""            # the code block's indentation (inside a list item)

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path}:{self.line}"

    @property
    def expected_status(self) -> int:
        return 2 if any(line.startswith("error:") for line in self.output) else 0

    @property
    def excerpt(self) -> bool:
        return any(line.strip() in ("...", "…") or line.strip().startswith("...") or line.rstrip().endswith("...")
                   for line in self.output)


def normalized(lines: list[str]) -> list[str]:
    """Output lines as the documents keep them: trailing spaces (rich pads its tables) and leading and trailing blank
    lines (a progress bar's leftovers) cut."""
    out = [line.rstrip() for line in lines]
    while out and not out[-1]:
        out.pop()
    while out and not out[0]:
        out.pop(0)
    return out


def strip_comment(text: str) -> str:
    """`text` without a trailing shell comment (a `#` after whitespace, outside quotes)."""
    quote = None
    for i, ch in enumerate(text):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1].isspace()):
            return text[:i].rstrip()
    return text.rstrip()


def classify(text: str) -> tuple[str, str]:
    """(tier, skip reason) of a command."""
    run = strip_comment(text)
    if re.match(r"^(bash scripts/setup\.sh|pip install|scripts/install_chromium\.sh)", run):
        return "all", "set-up: the quick start's premise"
    if re.search(r"\s\[--", run):
        return "all", "a usage synopsis ([--optional] flags), not a command"
    if re.match(r"^trainledger serve\b", run) or run.startswith("curl "):
        return "all", "needs a running server (tests/web/test_serve.py starts one and checks it)"
    if "benchmarks/" in run or "scripts/fault_harness.py" in run or re.search(r"(^|/)pytest\b|-m pytest\b", run):
        return "all", ""
    words = re.findall(r"trainledger (\w+)", run)
    if "torchrun" in run or "torch.distributed.run" in run or "trainledger.cli.main" in run:
        return "slow", ""
    if any(w in SLOW for w in words) or re.search(r"\b(import|from) (torch|transformers)\b", run):
        return "slow", ""        # trains, measures, or runs torch (a python one-liner on a model the docs trained)
    return "fast", ""


def extract(path: Path) -> list[Command]:
    """The shell commands of one markdown file, in order (module docstring)."""
    lines = path.read_text().split("\n")
    commands: list[Command] = []
    i = 0
    while i < len(lines):
        fence = re.match(r"^( *)```(\w*)\s*$", lines[i])
        if not fence:
            i += 1
            continue
        indent, lang, start = fence.group(1), fence.group(2), i + 1
        before = next((lines[k].strip() for k in range(i - 1, -1, -1) if lines[k].strip()), "")
        marker = SKIP_MARKER.match(before)
        end = next((j for j in range(start, len(lines)) if lines[j].startswith(indent + "```")), len(lines))
        i = end + 1
        if lang not in SHELL_LANGS:
            continue
        first_command = len(commands)
        for j in range(start, end):         # a block inside a list item is indented: read it without the indent
            lines[j] = lines[j][len(indent):] if lines[j].startswith(indent) else lines[j].lstrip()
        body = list(range(start, end))
        if any(lines[j].startswith("$ ") for j in body):
            current = None
            j = start
            while j < end:
                if lines[j].startswith("$ "):
                    text, first = lines[j][2:], j
                    while text.endswith("\\") and j + 1 < end:
                        j += 1
                        text = text[:-1].rstrip() + " " + lines[j].strip()
                    current = Command(path, first + 1, text, True, [], (j + 1, j + 1), indent=indent)
                    commands.append(current)
                elif current is not None:
                    current.output.append(lines[j])
                    current.output_span = (current.output_span[0], j + 1)
                j += 1
        else:
            j = start
            while j < end:
                text, first = lines[j].strip(), j
                if COMMAND_START.match(text):
                    while text.endswith("\\") and j + 1 < end:
                        j += 1
                        text = text[:-1].rstrip() + " " + lines[j].strip()
                    commands.append(Command(path, first + 1, text, False))
                j += 1
        if marker:
            for c in commands[first_command:]:
                c.skip = f"marked in the document: {marker.group(1)}"
    for c in commands:
        tier, skip = classify(c.text)
        c.tier, c.skip = tier, c.skip or skip
    return commands


def documents(files: list[str]) -> list[Path]:
    if files:
        return [Path(f).resolve() for f in files]
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def quick_start_done(runs: Path) -> bool:
    """Whether runs/tiny-stdlib holds the quick start's finished run (its last checkpoint, step 600)."""
    return (runs / "tiny-stdlib" / "checkpoints" / "step_00000600").is_dir()


def tracked_top_level(root: Path) -> set[str] | None:
    """The names of the top-level entries git tracks in `root` (None outside a git checkout): an untracked data/ or
    hf/ left by examples run by hand must not be linked into the scratch, where the examples would write into it."""
    try:
        done = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return {name.split("/", 1)[0] for name in done.stdout.decode("utf-8", "replace").split("\0") if name}


def scratch_tree(root: Path) -> Path:
    """A temporary directory that looks like `root` after the quick start (module docstring)."""
    scratch = Path(tempfile.mkdtemp(prefix="check-readme-"))
    tracked = tracked_top_level(root)
    for entry in root.iterdir():
        if entry.name in ("runs", ".git") or (tracked is not None and entry.name not in tracked | {".venv"}):
            continue        # what the examples write (data/, hf/, docs.jsonl) is made in the scratch, never in root
        (scratch / entry.name).symlink_to(entry)
    if not (scratch / ".venv").exists():
        (scratch / ".venv").symlink_to(Path(sys.prefix))
    (scratch / "runs").mkdir()
    if quick_start_done(root / "runs"):
        shutil.copytree(root / "runs" / "tiny-stdlib", scratch / "runs" / "tiny-stdlib",
                        ignore=shutil.ignore_patterns("*.lock", "lock"))
    return scratch


def environment(scratch: Path) -> dict:
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), str(scratch / ".venv" / "bin"), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), *filter(None, [env.get("PYTHONPATH")])])
    env.update(COLUMNS="80", LINES="50", PYTHONUNBUFFERED="1", NO_COLOR="1", TERM="dumb",
               HOME=str(scratch / "home"))      # caches (calibration, matplotlib) as on a fresh machine, not the user's
    (scratch / "home").mkdir(exist_ok=True)
    env.pop("FORCE_COLOR", None)
    return env


def run(command: Command, scratch: Path, env: dict, timeout: float) -> tuple[int | None, list[str], float]:
    """(exit status or None on timeout, output lines (stdout and stderr as a terminal shows them), seconds)."""
    start = time.perf_counter()
    try:
        done = subprocess.run(["bash", "-o", "pipefail", "-c", strip_comment(command.text)], cwd=scratch, env=env, timeout=timeout,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as expired:
        text = (expired.stdout or b"").decode(errors="replace")
        return None, text.splitlines(), time.perf_counter() - start
    text = done.stdout.decode(errors="replace").replace(f"{scratch}/", "").replace(str(scratch), ".")
    lines = [line for line in text.split("\n") if not TORCH_LOG.match(line)]
    if lines and lines[-1] == "":
        lines.pop()
    return done.returncode, lines, time.perf_counter() - start


def skip_quick_start(command: Command, scratch: Path) -> bool:
    """The quick start's own `trainledger train` is not rerun when its finished run was copied in."""
    return strip_comment(command.text) in ("trainledger train", ".venv/bin/trainledger train") and \
        quick_start_done(scratch / "runs")


def update_file(path: Path, changes: list[tuple[Command, list[str]]]) -> bool:
    """Replace each command's printed output with its new output (from the bottom up, so spans stay valid);
    False, and the file left alone, when it was edited while the commands ran (its spans no longer hold)."""
    lines = path.read_text().split("\n")
    for command, _ in changes:
        start, end = command.output_span
        printed = [line[len(command.indent):] if line.startswith(command.indent) else line.lstrip()
                   for line in lines[start:end]]
        if printed != command.output:
            return False
    for command, output in sorted(changes, key=lambda c: -c[0].output_span[0]):
        start, end = command.output_span
        lines[start:end] = [command.indent + line if line else line for line in output]
    text = "\n".join(lines)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return True


def check(paths: list[Path], tier: str, update: bool = False, show_diff: bool = False, only: str | None = None,
          out=sys.stdout) -> dict:
    """Run the commands up to `tier`; returns {"passed", "failed", "skipped", "stale", "updated"} (lists of strings)."""
    wanted = TIERS[:TIERS.index(tier) + 1]
    report = {"passed": [], "failed": [], "skipped": [], "stale": [], "updated": []}
    scratch = scratch_tree(ROOT)
    env = environment(scratch)
    try:
        for path in paths:
            changes = []
            for command in extract(path):
                label = f"{command.where} `{strip_comment(command.text)[:90]}`"
                if command.skip or command.tier not in wanted or (only and only not in command.text):
                    reason = command.skip or f"tier {command.tier}" if not only or only in command.text else ""
                    if reason:
                        report["skipped"].append(f"{label}: {reason}")
                    continue
                if skip_quick_start(command, scratch):
                    report["skipped"].append(f"{label}: the quick start's finished run was copied from runs/tiny-stdlib")
                    continue
                status, output, seconds = run(command, scratch, env, TIMEOUT_SECONDS[command.tier])
                if status != command.expected_status:
                    why = "timed out" if status is None else f"exit {status}, expected {command.expected_status}"
                    report["failed"].append(f"{label}: {why}\n    " + "\n    ".join(output[-8:]))
                    print(f"FAIL {label} ({why}, {seconds:.1f} s)", file=out, flush=True)
                    continue
                report["passed"].append(label)
                print(f"ok   {label} ({seconds:.1f} s)", file=out, flush=True)
                output, printed = normalized(output), normalized(command.output)
                if not command.transcript or command.excerpt or output == printed:
                    continue
                diff = list(difflib.unified_diff(printed, output, f"{command.where} (printed)",
                                                 f"{command.where} (now)", lineterm="", n=1))
                changed = sum(1 for d in diff if d[:1] in "+-" and d[:3] not in ("+++", "---"))
                report["stale"].append(f"{label}: {changed} lines differ")
                if show_diff:
                    print("\n".join(diff), file=out)
                if update:       # keep the blank lines that separated the output from the next command
                    changes.append((command, output + [""] * (len(command.output) - len(printed))))
                    report["updated"].append(f"{label}: {changed} lines")
            if changes and not update_file(path, changes):
                print(f"NOT REWRITTEN {path}: it was edited while its commands ran; run --update again", file=out)
                report["failed"].append(f"{path}: edited while its commands ran, outputs not rewritten")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="*", help="markdown files (default: README.md and docs/*.md)")
    parser.add_argument("--tier", choices=TIERS, default="fast", help="how much to run (default fast)")
    parser.add_argument("--update", action="store_true", help="rewrite the printed outputs in place")
    parser.add_argument("--diff", action="store_true", help="print the unified diff of every stale output")
    parser.add_argument("--only", help="run only the commands containing this text")
    args = parser.parse_args(argv)
    report = check(documents(args.files), args.tier, args.update, args.diff, args.only)
    print(f"\n{len(report['passed'])} passed, {len(report['failed'])} failed, {len(report['skipped'])} not run; "
          f"{len(report['stale'])} printed outputs differ from what the command prints now"
          + (f", {len(report['updated'])} rewritten (review with `git diff`)" if args.update else " (--update rewrites them)"))
    for title, key in (("failed", "failed"), ("outputs that differ", "stale"), ("not run", "skipped")):
        if report[key]:
            print(f"\n{title}:")
            for line in report[key]:
                print(f"  {line}")
    return 1 if report["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
