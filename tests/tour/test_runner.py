"""tour/runner.py: claims become pass/fail/skip records, exceptions become failures, and the tour never crashes."""

import json

import pytest
import torch

import trainledger.tour as tour_package
from trainledger.cli import main as cli_main
from trainledger.tour.runner import Section, count_statuses, run_tour


def _passing(tour):
    with tour.claim("two plus two is four") as c:
        c.check(2 + 2 == 4, total=2 + 2)


def _failing(tour):
    with tour.claim("two plus two is five") as c:
        c.check(2 + 2 == 5, total=2 + 2)


def _mixed(tour):
    tour.inspect("a tensor", torch.tensor([1.0, 2.0]))
    tour.note("a remark")
    with tour.claim("raises") as c:
        raise ZeroDivisionError("no dividing by zero")
    with tour.claim("makes no check"):
        pass
    with tour.claim("needs a GPU") as c:
        c.skip("no CUDA device")
    with tour.claim("one check fails, the other holds") as c:
        c.check(True)
        c.check(False, why="second check")
    with tour.claim("approx within tolerance") as c:
        c.approx(10.000134, 10.0001, abs_=1e-4, measured=10.000134)
    with tour.claim("still runs after all that") as c:
        c.check(True, tensor=torch.arange(3))


def _crashing(tour):
    with tour.claim("before the crash") as c:
        c.check(True)
    raise RuntimeError("boom outside any claim")


def _by_claim(result):
    return {claim["claim"]: claim for section in result["sections"] for claim in section["claims"]}


def test_statuses_errors_and_skips_are_recorded_and_the_tour_goes_on():
    result = run_tour([Section("mixed", "Mixed", _mixed), Section("crash", "Crash", _crashing),
                       Section("ok", "OK", _passing)], device="cpu")
    claims = _by_claim(result)
    assert claims["raises"]["status"] == "fail"
    assert claims["raises"]["values"]["error"] == "ZeroDivisionError: no dividing by zero"
    assert claims["makes no check"]["status"] == "fail"  # a claim that cannot fail is a defect
    assert claims["needs a GPU"] == {"claim": "needs a GPU", "status": "skip", "values": {"reason": "no CUDA device"}}
    assert claims["one check fails, the other holds"]["status"] == "fail"
    assert claims["one check fails, the other holds"]["values"] == {"why": "second check"}
    assert claims["approx within tolerance"]["status"] == "pass"
    assert claims["still runs after all that"]["values"]["tensor"] == [0, 1, 2]   # tensors become JSON lists
    crash = claims["section 'crash' runs to completion"]
    assert crash["status"] == "fail" and "RuntimeError: boom outside any claim" in crash["values"]["error"]
    assert claims["before the crash"]["status"] == "pass"
    assert claims["two plus two is four"]["status"] == "pass"   # the section after a crash still runs
    assert result["counts"] == count_statuses(result["sections"]) == {"pass": 4, "fail": 4, "skip": 1}
    mixed = result["sections"][0]
    assert mixed["inspected"] == [{"label": "a tensor", "value": [1.0, 2.0]}] and mixed["notes"] == ["a remark"]
    json.dumps(result)  # everything is plain JSON


def test_inspect_keeps_a_snapshot_of_the_value():
    def section(tour):
        x = torch.zeros(2)
        tour.inspect("x", x)
        x += 1
        with tour.claim("x changed after it was inspected") as c:
            c.check(x.sum().item() == 2)

    result = run_tour([Section("snapshot", "Snapshot", section)], device="cpu")
    assert result["sections"][0]["inspected"][0]["value"] == [0.0, 0.0]


def test_keyboard_interrupt_is_not_swallowed():
    def section(tour):
        with tour.claim("interrupted"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_tour([Section("interrupt", "Interrupt", section)], device="cpu")


def test_a_failing_claim_gives_a_nonzero_exit_status(monkeypatch, capsys):
    monkeypatch.setattr(tour_package, "SECTIONS", [Section("ok", "OK", _passing), Section("bad", "Bad", _failing)])
    assert cli_main.main(["tour", "--device", "cpu", "--json"]) == 1
    result = json.loads(capsys.readouterr().out)
    assert [s["name"] for s in result["sections"]] == ["ok", "bad"]
    assert result["counts"] == {"pass": 1, "fail": 1, "skip": 0}
    assert result["sections"][1]["claims"][0]["values"] == {"total": 4}


def test_tables_mark_each_claim_and_print_the_failing_values(monkeypatch, capsys):
    monkeypatch.setattr(tour_package, "SECTIONS", [Section("ok", "OK", _passing), Section("bad", "Bad", _failing),
                                                   Section("mixed", "Mixed", _mixed)])
    assert cli_main.main(["tour", "--device", "cpu"]) == 1
    out = capsys.readouterr().out
    assert "PASS two plus two is four" in out
    assert "FAIL two plus two is five" in out and "{total: 4}" in out
    assert "SKIP needs a GPU (no CUDA device)" in out
    assert "note a remark" in out
    assert "passed, " in out and "failed" in out


def test_only_passing_and_skipped_claims_exit_zero(monkeypatch, capsys):
    def skipped(tour):
        with tour.claim("gpu only") as c:
            c.skip("no CUDA device")

    monkeypatch.setattr(tour_package, "SECTIONS", [Section("ok", "OK", _passing), Section("gpu", "GPU", skipped)])
    assert cli_main.main(["tour", "--device", "cpu", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["counts"] == {"pass": 1, "fail": 0, "skip": 1}
