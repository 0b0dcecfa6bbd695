"""Intervals that read right (issue 41): every time answer prints its estimate inside its range, the range in the
answer's own unit and its reason in words. Read back from the printed text, as a user reads it: for every public
validation row (`step --config` of its run file) and every example of the README."""

import json
import re
import shlex
from pathlib import Path

import pytest

from trainledger.account.validation import published_run as pr
from trainledger.account.validation.published import every_run
from trainledger.cli import main as cli_main
from trainledger.specs import run_file

README = Path(__file__).resolve().parents[2] / "README.md"
NUMBER = r"\d[\d,]*(?:\.\d+)?(?:e[+-]?\d+)?"
UNIT = r"(?: ?(?:µs|ms|s|min|h|days|years)\b|[KMBTPE]\b)?"
QUANTITY = re.compile(f"({NUMBER})({UNIT})")
SCALE = {"": 1, "µs": 1e-6, "ms": 1e-3, "s": 1, "min": 60, "h": 3600, "days": 86400, "years": 365 * 86400,
         "K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
# 'step 1.92 s (68.2K tokens/s), expect 1.91 s … 2.64 s (49.7K … 68.6K tokens/s): runs like this one took …'
LINE = re.compile(r"^(?P<what>[a-z][a-z #1:]*?) (?P<estimate>\d[^,\n]*), expect (?P<range>[^:\n]*): (?P<words>.+)$", re.M)


def value(match) -> float:
    number, unit = match
    return float(number.replace(",", "")) * SCALE[unit.strip()]


def quantities(text: str) -> list[float]:
    return [value(m) for m in QUANTITY.findall(text)]


def ranges(text: str) -> list[tuple[float, float]]:
    pair = re.compile(f"({NUMBER})({UNIT}) … ({NUMBER})({UNIT})")
    out = []
    for a, ua, b, ub in pair.findall(text):
        ua = ua or ub                                       # '1.45e20 … 2.01e20 FLOPs': one unit for both
        out.append((value((a, ua)), value((b, ub))))
    return out


def read_intervals(text: str) -> list[dict]:
    """Every interval line of a printed answer: what, the estimates, the ranges (one per estimate) and the words."""
    found = []
    for m in LINE.finditer(text):
        estimates = quantities(re.sub(r"MFU ", "", m["estimate"]))
        found.append({"what": m["what"], "estimates": estimates, "ranges": ranges(m["range"]), "words": m["words"],
                      "line": m[0]})
    return found


def assert_reads_right(text: str, where: str) -> int:
    lines = read_intervals(text)
    for line in lines:
        assert len(line["ranges"]) == len(line["estimates"]) >= 1, (where, line["line"])
        for estimate, (low, high) in zip(line["estimates"], line["ranges"]):
            assert low <= estimate <= high, (where, line["line"])
        assert re.search(r"took \d+(–\d+)? % (longer|less)|took \d+ % less to \d+ % longer", line["words"]), line
        assert "published run" in line["words"] and "than this model's estimate" in line["words"], line
    return len(lines)


def test_the_reader_reads_a_line_back():
    text = ("step 977.00 ms (68.2K tokens/s), expect 1.05 s … 1.26 s (49.7K … 68.6K tokens/s): runs like this one "
            "took 7–29 % longer than this model's estimate (5 published runs, 1 source)")
    (line,) = read_intervals(text)
    assert line["estimates"] == [pytest.approx(0.977), pytest.approx(68.2e3)]
    assert line["ranges"] == [(pytest.approx(1.05), pytest.approx(1.26)), (pytest.approx(49.7e3), pytest.approx(68.6e3))]
    with pytest.raises(AssertionError):       # the example: the estimate outside its own range
        assert_reads_right(text, "example")
    plan = ("time without failures 21.29 days (32.7K GPU-hours), expect 20.30 days … 30.53 days (31.2K … 46.9K "
            "GPU-hours): runs like this one took 10–23 % longer than this model's estimate (3 published runs, 1 source)")
    assert assert_reads_right(plan, "plan") == 1


def _asked(case, tmp_path) -> list[str]:
    doc = pr.document(case)
    config = pr.model_config(case)
    if config is not None:
        (tmp_path / case.model_name).write_text(json.dumps(config))
        doc["model"]["name"] = str(tmp_path / case.model_name)
    path = tmp_path / "run.toml"
    path.write_text(run_file.to_toml(doc))
    return ["step", "--config", str(path)]


@pytest.mark.parametrize("case", every_run(), ids=lambda c: c.label)
def test_every_public_row_prints_its_estimate_inside_its_range(case, tmp_path, capsys):
    assert cli_main.main(_asked(case, tmp_path)) == 0
    out = capsys.readouterr().out
    assert assert_reads_right(out, case.label) == 1
    assert "(expect " in out                        # the table's step cell carries the range too


def readme_commands() -> list[list[str]]:
    """The README's `trainledger step|layout|plan|optimal ...` commands (without the run-file writes, the launch text
    and the examples of a refusal)."""
    text = README.read_text()
    found = []
    for m in re.finditer(r"trainledger ((?:step|layout|plan|optimal)\b[^`\n&|]*)", text):
        words = shlex.split(m[1])
        shown = text[m.end():].lstrip("\n").split("\n", 1)[0]
        asked = text[:m.start()].endswith("$ ") or len(words) > 1        # a command, not a mention of one
        if not asked or {"--launch", "--config", "--help"} & set(words) or shown.startswith("error:"):
            continue
        if "--save-config" in words:
            i = words.index("--save-config")
            del words[i:i + 2]
        found.append(words)
    return found


def test_the_readme_examples_read_right(capsys):
    commands = readme_commands()
    assert any(c[0] == "layout" for c in commands) and any(c[0] == "step" for c in commands)
    printed = 0
    for words in commands:
        assert cli_main.main(words) == 0, words
        printed += assert_reads_right(capsys.readouterr().out, " ".join(words))
    assert printed >= 2                      # layout's and step's examples print their ranges
    assert assert_reads_right(README.read_text(), "README.md") >= 1     # and so does the output the README shows


@pytest.mark.parametrize("argv", [
    ["plan", "--model", "gpt2", "--gpu", "h100", "--num-gpus", "16", "--mfu", "auto", "--tokens", "1e9"],
    ["optimal", "--num-gpus", "8", "--days", "1", "--mfu", "auto"],
    ["layout", "--model", "qwen3-30b-a3b", "--gpu", "h100", "--num-gpus", "16", "--top", "2"],
    ["step", "--model", "gpt2", "--gpu", "b200", "--num-gpus", "8"],
], ids=["plan", "optimal", "layout-moe", "step-widened"])
def test_each_command_prints_its_range_in_its_unit(argv, capsys):
    assert cli_main.main(argv) == 0
    out = capsys.readouterr().out
    assert assert_reads_right(out, " ".join(argv)) == 1
    seconds = r"\d (µs|ms|s|min|h|days|years)\b"
    unit = {"plan": seconds + ".*GPU-hours", "optimal": "FLOPs", "layout": seconds, "step": seconds + ".*tokens/s"}
    (line,) = read_intervals(out)
    assert re.search(unit[argv[0]], line["line"].split(", expect ")[1].split(":")[0])
