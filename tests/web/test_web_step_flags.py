"""The step calculator's mixture-of-experts, framework and schedule fields (calculator 8: etp, capacity-factor,
ep-dispatcher, framework, schedule, mtp, tp-overlap, dp-overlap, pp-overlap) reach `trainledger step` as its flags.

Reference: `trainledger step ... --json` for the same flags (trainledger.cli.main.compute in-process, and once the
installed executable). Each row also checks that the flag changes the CLI's answer, so the comparison cannot pass
with the flag dropped on the way; bad values answer 422 with the CLI's one line, beside the field that sent them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the web API needs the optional extra trainledger[web]")
from fastapi.testclient import TestClient  # noqa: E402

from trainledger.account.time.expert_parallel import DISPATCHERS  # noqa: E402
sys.path.insert(0, str(Path(__file__).parent))
from web_answers import cli_error, cli_json  # noqa: E402
from trainledger.web.app import create_app  # noqa: E402


@pytest.fixture(scope="module")
def client():
    return TestClient(create_app(), base_url="http://127.0.0.1:8000")


def query_of(argv: list[str]) -> list[tuple[str, str]]:
    """The query parameters of `--flag value` pairs and bare `--sp`/`--mtp`/`--no-x` switches, as the page sends them."""
    params, words = [], list(argv)
    while words:
        flag = words.pop(0)[2:]
        if flag in ("sp", "mtp", "uneven-chunks", "pp-overlap"):
            params.append((flag, "true"))
        elif flag.startswith("no-"):
            params.append((flag[3:], "false"))
        else:
            params.append((flag, words.pop(0)))
    return params


def pick(data, path):
    for key in path.split("."):
        data = data[key]
    return data


QWEN_8 = ["--model", "qwen3-30b-a3b", "--num-gpus", "8", "--global-batch-size", "32"]
MEGATRON_TP2_EP4 = [*QWEN_8, "--framework", "megatron", "--tp", "2", "--sp", "--ep", "4"]
# (field, the rest of the form, the field's flag(s), the key of `step --json` it changes, why)
CASES = [
    ("etp", MEGATRON_TP2_EP4, ["--etp", "1"], "step_seconds",
     "whole experts per GPU (etp 1) beside attention split over tp 2: Megatron-Core's folded expert grid"),
    ("etp", [*QWEN_8, "--framework", "megatron", "--ep", "4"], ["--etp", "2"], "step_seconds",
     "each expert's d_ff over 2 GPUs while the attention has tp 1"),
    ("ep-dispatcher", [*QWEN_8, "--ep", "8"], ["--ep-dispatcher", "deepep"], "step_seconds",
     "DeepEP sends one copy of a token per GPU, not one per routed expert (8 of 128 experts per token)"),
    ("ep-dispatcher", [*QWEN_8, "--ep", "8"], ["--ep-dispatcher", "hybridep"], "expert_parallel.dispatcher",
     "HybridEP: token-based like DeepEP"),
    ("capacity-factor", [*QWEN_8, "--ep", "8", "--expert-imbalance", "1.5"], ["--capacity-factor", "1.1"],
     "expert_parallel.dropped_fraction", "the busiest expert capped at 1.1 × the mean: 1 − 1.1/1.5 of its tokens dropped"),
    ("framework", QWEN_8, ["--framework", "megatron"], "step_seconds", "Megatron-LM's fused kernels, ZeRO 1 by default"),
    ("framework", QWEN_8, ["--framework", "torchtitan"], "step_seconds", "torchtitan's Llama, compiled per block"),
    ("schedule", [*QWEN_8, "--pp", "2"], ["--schedule", "dualpipe"], "step_seconds",
     "DeepSeek-V3's bidirectional pipeline: a smaller bubble than 1F1B"),
    ("mtp", ["--model", "deepseek-v3", "--num-gpus", "64", "--ep", "8", "--pp", "8", "--framework", "megatron"],
     ["--no-mtp"], "model_flops_per_step", "DeepSeek-V3's MTP module left out of a Megatron run (default: trained)"),
    ("tp-overlap", [*QWEN_8, "--framework", "megatron", "--tp", "2"], ["--no-tp-overlap"], "step_seconds",
     "the column-parallel input-gradient all-reduce exposed after each Linear's backward"),
    ("dp-overlap", ["--model", "gpt2", "--num-gpus", "8", "--global-batch-size", "8", "--framework", "megatron"],
     ["--no-dp-overlap"], "step_seconds", "the data-parallel gradient reduce exposed after the last micro-batch"),
    ("pp-overlap", ["--model", "llama-3-8b", "--num-gpus", "16", "--global-batch-size", "32", "--pp", "4",
                    "--interleave", "2", "--framework", "megatron"],
     ["--no-pp-overlap"], "step_seconds", "the interleaved schedule's sends waited for, as Megatron-LM's 2021-22 code"),
    ("pp-overlap", ["--model", "llama-3-8b", "--num-gpus", "16", "--global-batch-size", "32", "--pp", "4"],
     ["--pp-overlap"], "step_seconds", "plain 1F1B's sends run beside the computation (Llama 3's asynchronous p2p)"),
]


@pytest.mark.parametrize("field,base,flags,key,why", CASES, ids=[f"{c[0]}:{' '.join(c[2])}" for c in CASES])
def test_each_step_field_gives_the_cli_answer(client, field, base, flags, key, why):
    expected = cli_json(["step", *base, *flags])
    without = cli_json(["step", *base])
    assert pick(expected, key) != pick(without, key), why       # the flag matters for this answer
    response = client.get("/api/step", params=query_of([*base, *flags]))
    assert response.status_code == 200, response.text
    assert response.json() == expected
    sent = json.loads(response.headers["X-Trainledger-Argv"])
    assert any(word.lstrip("-").split("=")[0] in (field, f"no-{field}") for word in sent), sent


def test_uneven_chunks_reach_the_step(client):
    """`--uneven-chunks` only lifts the equal-chunk rule: without it DeepSeek-V3's 61 layers over pp 4 × interleave 2
    are refused with the CLI's line (which names the flag), with it the page gets the CLI's answer."""
    base = ["--model", "deepseek-v3", "--num-gpus", "64", "--ep", "8", "--pp", "4", "--framework", "megatron",
            "--global-batch-size", "64", "--interleave", "2"]
    refused = client.get("/api/step", params=query_of(base))
    assert refused.status_code == 422 and "--uneven-chunks" in refused.text
    assert cli_error(["step", *base]) in refused.text
    expected = cli_json(["step", *base, "--uneven-chunks"])
    assert expected["uneven_chunks"] is True
    response = client.get("/api/step", params=query_of([*base, "--uneven-chunks"]))
    assert response.status_code == 200, response.text
    assert response.json() == expected


def test_the_layout_search_takes_the_framework(client):
    """`framework` is the one new field `layout` also takes: the page's table is `layout --framework megatron`."""
    expected = cli_json(["layout", *QWEN_8, "--framework", "megatron", "--top", "5"])
    assert expected["layouts"] != cli_json(["layout", *QWEN_8, "--top", "5"])["layouts"]
    response = client.get("/api/layout", params=query_of([*QWEN_8, "--framework", "megatron", "--top", "5"]))
    assert response.json() == expected
    # Megatron's expert grid: the search may put whole experts (etp 1) beside a split attention (tp > 1)
    assert all({"ep", "etp"} <= set(row) for row in expected["layouts"])


def test_etp_and_dispatcher_match_the_installed_executable(client):
    exe = Path(sys.executable).with_name("trainledger")
    argv = ["step", *MEGATRON_TP2_EP4, "--etp", "1", "--ep-dispatcher", "deepep"]
    run = subprocess.run([str(exe), *argv, "--json"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert client.get("/api/step", params=query_of(argv[1:])).json() == json.loads(run.stdout)


# (the rest of the form, the bad flag(s), the query parameter the page shows the error beside)
BAD = [
    (MEGATRON_TP2_EP4, ["--etp", "5"], "etp"),                          # 5 does not divide the experts' d_ff 768
    ([*QWEN_8, "--ep", "8"], ["--etp", "2"], "etp"),                    # another etp than tp needs Megatron
    (["--model", "llama-2-7b", "--num-gpus", "8"], ["--etp", "2"], "etp"),  # a dense model has no experts
    (QWEN_8, ["--etp", "0"], "etp"),                                    # argparse: a positive integer
    ([*MEGATRON_TP2_EP4[:-1], "8"], ["--etp", "2"], "ep"),              # ep 8 × etp 2 does not divide tp·cp·dp = 8
    ([*QWEN_8, "--ep", "8"], ["--ep-dispatcher", "nccl"], "ep-dispatcher"),
    ([*QWEN_8, "--ep", "8"], ["--capacity-factor", "0"], "capacity-factor"),
    ([*QWEN_8, "--ep", "8"], ["--capacity-factor", "lots"], "capacity-factor"),
    (QWEN_8, ["--schedule", "dualpipe"], "schedule"),                   # needs an even --pp ≥ 2
    (QWEN_8, ["--schedule", "zigzag"], "schedule"),
    (QWEN_8, ["--framework", "jax"], "framework"),
    (QWEN_8, ["--mtp"], "mtp"),                                         # qwen3 has no MTP modules
    (["--model", "deepseek-v3", "--num-gpus", "64", "--ep", "8", "--pp", "8"], ["--mtp"], "mtp"),  # Megatron's only
]


@pytest.mark.parametrize("base,flags,param", BAD, ids=[" ".join(f) for _, f, _ in BAD])
def test_bad_values_are_the_cli_line_beside_the_field(client, base, flags, param):
    response = client.get("/api/step", params=query_of([*base, *flags]))
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["error"] == cli_error(["step", *base, *flags]) and "\n" not in body["error"]
    assert body["param"] == param


def test_a_boolean_field_takes_true_or_false(client):
    body = client.get("/api/step", params=[*query_of(QWEN_8), ("mtp", "maybe")]).json()
    assert body["param"] == "mtp" and "true or false" in body["error"]


def test_schema_gives_the_page_its_choices_and_defaults(client):
    """The selects fill from /api/schema: the dispatchers (checked in compute, not by argparse), the frameworks and
    schedules; blank etp and capacity factor are the CLI's own defaults (tp, dropless)."""
    flags = {f["param"]: f for f in client.get("/api/schema").json()["step"]["flags"]}
    # issue 41: blank = decided by the schedule (deepep with --schedule dualpipe, DeepSeek-V3 Sec. 3.2.2; else alltoall)
    assert flags["ep-dispatcher"]["choices"] == list(DISPATCHERS) and flags["ep-dispatcher"]["default"] is None
    assert flags["ep-overlap"]["default"] is None
    assert flags["framework"]["choices"] == ["trainledger", "torchtitan", "megatron"]
    assert flags["schedule"]["choices"] == ["1f1b", "dualpipe"] and flags["schedule"]["default"] == "1f1b"
    assert flags["etp"]["default"] is None and flags["capacity-factor"]["default"] is None
    assert flags["mtp"]["boolean"] and flags["mtp"]["default"] is None
    assert flags["tp-overlap"]["default"] is True and flags["dp-overlap"]["default"] is True
    assert flags["pp-overlap"]["boolean"] and flags["pp-overlap"]["default"] is None
