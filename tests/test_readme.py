"""The README and docs/ as written: their shell commands run as printed (scripts/check_readme.py).

CI runs the fast tier (the planning commands, seconds each); `python scripts/check_readme.py --tier slow` runs
the training, measuring and torchrun examples too (minutes, after the quick start)."""

import importlib.util
import io
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def checker():
    spec = importlib.util.spec_from_file_location("check_readme", ROOT / "scripts" / "check_readme.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["check_readme"] = module
    spec.loader.exec_module(module)
    return module


DOC = """# A document

```
$ trainledger plan --gpu h1000
error: unknown GPU 'h1000' (--gpu)
$ trainledger fit \\
    --num-gpus 4
old output

$ trainledger dtypes
...
```

```python
print("not a shell block")
```

- a list item:

  ```
  $ trainledger models --json
  old
  ```

```
trainledger train --text README.md --steps 2 --out-dir runs/x   # a comment, with 'quotes'
torchrun --nproc_per_node 2 -m trainledger.cli.main train --tp 2   # torchrun
bash scripts/setup.sh
not a command
```
"""


def test_extract_finds_transcripts_listings_and_indented_blocks(checker, tmp_path):
    path = tmp_path / "doc.md"
    path.write_text(DOC)
    commands = checker.extract(path)
    texts = [c.text for c in commands]
    assert texts == ["trainledger plan --gpu h1000", "trainledger fit --num-gpus 4", "trainledger dtypes",
                     "trainledger models --json",
                     "trainledger train --text README.md --steps 2 --out-dir runs/x   # a comment, with 'quotes'",
                     "torchrun --nproc_per_node 2 -m trainledger.cli.main train --tp 2   # torchrun",
                     "bash scripts/setup.sh"]
    plan, fit, dtypes, models, train, torchrun, setup = commands
    assert plan.transcript and plan.expected_status == 2 and fit.expected_status == 0
    assert fit.output == ["old output", ""] and not fit.excerpt and dtypes.excerpt
    assert models.indent == "  " and models.output == ["old"]
    assert not train.transcript and checker.strip_comment(train.text).endswith("--out-dir runs/x")
    assert [c.tier for c in commands[:6]] == ["fast", "fast", "fast", "fast", "slow", "slow"]
    assert setup.skip and not train.skip


def test_update_rewrites_complete_outputs_in_place(checker, tmp_path):
    path = tmp_path / "doc.md"
    path.write_text(DOC)
    plan, fit, dtypes, models, *_ = checker.extract(path)
    checker.update_file(path, [(fit, ["new line 1", "new line 2", ""]), (models, ["new"])])
    text = path.read_text()
    assert "old output" not in text and "new line 1\nnew line 2\n\n$ trainledger dtypes" in text
    assert "  $ trainledger models --json\n  new\n  ```" in text           # the list item keeps its indent
    again = checker.extract(path)
    assert [c.text for c in again] == [c.text for c in checker.extract(path)]
    assert again[1].output == ["new line 1", "new line 2", ""]


def test_update_leaves_a_document_edited_while_its_commands_ran(checker, tmp_path):
    """Spans read before the run would land one line off after an edit above them (a prompt line deleted)."""
    path = tmp_path / "doc.md"
    path.write_text(DOC)
    plan, fit, *_ = checker.extract(path)
    path.write_text("one more line above\n" + DOC)
    before = path.read_text()
    assert checker.update_file(path, [(fit, ["new line 1", ""])]) is False
    assert path.read_text() == before


def test_strip_comment_keeps_hashes_inside_quotes(checker):
    assert checker.strip_comment("echo '# not a comment' # a comment") == "echo '# not a comment'"
    assert checker.strip_comment('python -c "print(1)  # no"') == 'python -c "print(1)  # no"'
    assert checker.strip_comment("trainledger plan") == "trainledger plan"


def test_the_fast_tier_of_every_document_runs_as_printed(checker):
    """Every planning command in README.md and docs/*.md exits as printed (0, or 2 where an error is shown)."""
    report = checker.check(checker.documents([]), "fast", out=io.StringIO())
    assert report["failed"] == []
    assert len(report["passed"]) >= 40


def test_a_marked_block_is_listed_not_run(checker, tmp_path):
    path = tmp_path / "doc.md"
    path.write_text("text\n\n<!-- check_readme: skip needs a corrupted checkpoint -->\n```\n$ trainledger checkpoints runs/x\n"
                    "error: ...\n```\n\n```\n$ trainledger plan\n```\n")
    marked, plain = checker.extract(path)
    assert marked.skip == "marked in the document: needs a corrupted checkpoint" and not plain.skip


def test_the_scratch_links_only_what_git_tracks(checker, tmp_path):
    """An untracked data/ or docs.jsonl left in the checkout by examples run by hand is not linked into the scratch
    (the examples would write through the link into the checkout); tracked entries and the virtualenv are
    (issue 31, item 5: the README's examples left data/, hf/, docs.jsonl and docs.parquet in the repository root)."""
    import subprocess
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "a.py").write_text("x = 1\n")
    (repo / "data").mkdir()
    (repo / "docs.jsonl").write_text("{}\n")
    (repo / ".venv").mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "add", "src"], cwd=repo, check=True)
    assert checker.tracked_top_level(repo) == {"src"}
    scratch = checker.scratch_tree(repo)
    names = {p.name for p in scratch.iterdir()}
    assert {"src", ".venv", "runs"} <= names and not {"data", "docs.jsonl"} & names
    assert (scratch / "src").is_symlink() and not (scratch / "runs").is_symlink()


README_MAX_LINES = 400      # issue 31, Why 6: the README is the front door; the long examples live in docs/


def test_readme_fits_on_a_page():
    n_lines = len((ROOT / "README.md").read_text().splitlines())
    assert n_lines <= README_MAX_LINES, f"README.md has {n_lines} lines; move examples to docs/examples.md"


def github_anchor(heading: str) -> str:
    """The id GitHub gives a heading: lower case, punctuation other than '-' and '_' dropped, spaces -> '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_github_anchor_matches_githubs_rule():
    assert github_anchor("Where a step's time goes: `profile`") == "where-a-steps-time-goes-profile"
    assert github_anchor("Hugging Face models: `--impl hf`") == "hugging-face-models---impl-hf"
    assert github_anchor("`params`, `flops`, `memory`") == "params-flops-memory"


@pytest.mark.parametrize("doc", ["README.md", *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))])
def test_every_link_of_a_document_reaches_a_file_and_heading(doc):
    """Moving sections between README.md and docs/ must not leave a link pointing at nothing."""
    path = ROOT / doc
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)          # links in code blocks are not links
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"^[a-z]+://", target):
            continue
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            broken.append(f"{target}: no file {file_part}")
            continue
        if anchor and linked.suffix == ".md":
            headings = re.findall(r"^#+ (.*)$", re.sub(r"```.*?```", "", linked.read_text(), flags=re.S), flags=re.M)
            if anchor not in {github_anchor(h) for h in headings}:
                broken.append(f"{target}: no heading #{anchor} in {linked.name}")
    assert broken == []
