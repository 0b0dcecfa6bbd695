"""The web API answers exactly what `trainledger <command> --json` prints, and bad input gets the CLI's message.

References: trainledger.cli.main.compute (in-process) and the `trainledger` executable (subprocess) for the
same flags; PyTorch's own strides for the tensor drawing; torch's casts for the dtype rounding.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the web API needs the optional extra trainledger[web]")
from fastapi.testclient import TestClient  # noqa: E402

from trainledger.cli import main as cli  # noqa: E402
from trainledger.web import api, flags  # noqa: E402
sys.path.insert(0, str(Path(__file__).parent))
from web_answers import as_served, cli_error, cli_json  # noqa: E402
from trainledger.web.app import STATIC_DIR, create_app  # noqa: E402


@pytest.fixture(scope="module")
def client():
    return TestClient(create_app(), base_url="http://127.0.0.1:8000")


# (query string, the same flags as an argv) — one row per calculator and per kind of flag
CASES = [
    ("plan", "", ["plan"]),
    ("plan", "params=7B&tokens=2T&gpu=a100&num-gpus=512&mfu=0.4", ["plan", "--params", "7B", "--tokens", "2T", "--gpu", "a100", "--num-gpus", "512", "--mfu", "0.4"]),
    ("plan", "model=llama-2-7b&tokens=2T&num_gpus=64", ["plan", "--model", "llama-2-7b", "--tokens", "2T", "--num-gpus", "64"]),
    ("matmul", "m=128&k=256&n=64&dtype=fp32,tf32,bf16,fp8", ["matmul", "--m", "128", "--k", "256", "--n", "64", "--dtype", "fp32,tf32,bf16,fp8"]),
    ("matmul", "m=64&gpu=h100&gpu=a100", ["matmul", "--m", "64", "--gpu", "h100", "--gpu", "a100"]),
    ("params", "model=llama-2-7b", ["params", "--model", "llama-2-7b"]),
    ("params", "", ["params"]),
    ("memory", "model=gpt2&batch-size=8&seq-len=1024&flash=false&zero=3&dp=8",
     ["memory", "--model", "gpt2", "--batch-size", "8", "--seq-len", "1024", "--no-flash", "--zero", "3", "--dp", "8"]),
    ("memory", "params=7.5e9&precision=mixed-fp16&optimizer=adam&zero=3&dp=64&flash=true&sp=false",
     ["memory", "--params", "7.5e9", "--precision", "mixed-fp16", "--optimizer", "adam", "--zero", "3", "--dp", "64", "--flash"]),
    ("optimal", "", ["optimal"]),
    ("optimal", "budget-flops=5.76e23&law=approach3", ["optimal", "--budget-flops", "5.76e23", "--law", "approach3"]),
    ("tensor", "shape=4,6&transpose=0,1&slice=1:3,::2&dtype=bf16", ["tensor", "--shape", "4,6", "--transpose", "0,1", "--slice", "1:3,::2", "--dtype", "bf16"]),
    ("tensor", "", ["tensor"]),
    ("dtypes", "", ["dtypes"]),
    ("hardware", "", ["hardware"]),
    ("models", "", ["models"]),
    ("fit", "num-gpus=16&zero=1", ["fit", "--num-gpus", "16", "--zero", "1"]),
    ("flops", "model=gpt2&batch-size=4&seq-len=512", ["flops", "--model", "gpt2", "--batch-size", "4", "--seq-len", "512"]),
]


@pytest.mark.parametrize("command,query,argv", CASES, ids=[f"{c}?{q}" for c, q, _ in CASES])
def test_endpoint_returns_the_cli_json(client, command, query, argv):
    response = client.get(f"/api/{command}?{query}")
    assert response.status_code == 200, response.text
    assert response.json() == cli_json(argv)
    sent = json.loads(response.headers["X-Trainledger-Argv"])
    assert sent[0] == command and cli_json(sent) == response.json()


def test_endpoints_match_the_installed_executable(client):
    """Three answers compared with a real `trainledger ... --json` process (parsing, defaults, printing)."""
    exe = Path(sys.executable).with_name("trainledger")
    for command, query, argv in (CASES[1], CASES[7], CASES[11]):
        run = subprocess.run([str(exe), *argv, "--json"], capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr
        assert client.get(f"/api/{command}?{query}").json() == json.loads(run.stdout)


def test_custom_architecture_is_a_config_json_the_cli_reads(client):
    """arch.* fields become a llama config.json; `params --model that.json` gives the same answer, and the
    count equals the Llama-2-7B preset plus one layer when one layer is added (its published 6,738,415,616)."""
    fields = {"family": "llama", "d_model": "4096", "n_layers": "33", "n_heads": "32", "n_kv_heads": "32",
              "d_ff": "11008", "vocab_size": "32000", "tied": "false"}
    query = "&".join(f"arch.{k}={v}" for k, v in fields.items())
    body = client.get(f"/api/params?{query}").json()
    assert body == as_served(cli_json(["params", "--model", api.custom_config_path(fields)]))
    preset = cli_json(["params", "--model", "llama-2-7b"])
    assert preset["n_params"] == 6_738_415_616
    assert body["n_params"] == preset["n_params"] + preset["n_params_per_layer"]
    memory = client.get(f"/api/memory?{query}&batch-size=2").json()
    assert memory == as_served(cli_json(["memory", "--model", api.custom_config_path(fields), "--batch-size", "2"]))


def test_custom_gpt2_matches_the_gpt2_preset(client):
    """The gpt2 family written as a GPT2Config counts 124,439,808 parameters at GPT-2 small's sizes."""
    query = "arch.family=gpt2&arch.d_model=768&arch.n_layers=12&arch.n_heads=12&arch.d_ff=3072&arch.vocab_size=50257&arch.max_seq_len=1024"
    body = client.get(f"/api/params?{query}").json()
    assert body["n_params"] == 124_439_808
    assert body["components"] == cli_json(["params", "--model", "gpt2"])["components"]


BAD = [
    ("plan", "mfu=2", ["plan", "--mfu", "2"], "--mfu"),
    ("plan", "num-gpus=0", ["plan", "--num-gpus", "0"], "--num-gpus"),
    ("plan", "gpu=h1000", ["plan", "--gpu", "h1000"], "--gpu"),
    ("plan", "params=lots", ["plan", "--params", "lots"], "--params"),
    ("memory", "model=gpt2&zero=5", ["memory", "--model", "gpt2", "--zero", "5"], "--zero"),
    ("memory", "", ["memory"], "--model"),  # "one of the arguments --model --params is required"
    ("matmul", "m=-3", ["matmul", "--m=-3"], "--m"),
    ("tensor", "shape=4,6&transpose=0,2", ["tensor", "--shape", "4,6", "--transpose", "0,2"], "--transpose"),
    ("plan", "colour=blue", ["plan", "--colour=blue"], "--colour"),
]


@pytest.mark.parametrize("command,query,argv,flag", BAD, ids=[f"{c}?{q}" for c, q, _, _ in BAD])
def test_bad_input_is_422_with_the_cli_message(client, command, query, argv, flag):
    response = client.get(f"/api/{command}?{query}")
    assert response.status_code == 422
    body = response.json()
    assert body["error"] == body["detail"] == cli_error(argv)
    assert body["flag"] == flag
    if flag:
        assert body["param"] == flag[2:]


def test_bad_input_message_is_what_the_executable_prints(client):
    exe = Path(sys.executable).with_name("trainledger")
    run = subprocess.run([str(exe), "plan", "--mfu", "2", "--json"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert run.stderr.strip() == "error: " + client.get("/api/plan?mfu=2").json()["error"]


@pytest.mark.parametrize("query,param", [
    ("arch.d_model=64x&arch.n_layers=2&arch.n_heads=4&arch.d_ff=256&arch.vocab_size=100", "arch.d_model"),
    ("arch.d_model=64&arch.n_layers=2&arch.d_ff=256&arch.vocab_size=100", "arch.n_heads"),
    ("arch.family=t5&arch.d_model=64&arch.n_layers=2&arch.n_heads=4&arch.d_ff=256&arch.vocab_size=100", "arch.family"),
    ("arch.d_model=64&arch.n_layers=2&arch.n_heads=5&arch.d_ff=256&arch.vocab_size=100", "arch"),
    ("arch.d_model=64&arch.n_layers=2&arch.n_heads=4&arch.d_ff=256&arch.vocab_size=100&arch.tied=maybe", "arch.tied"),
])
def test_bad_architecture_is_422_naming_the_field(client, query, param):
    body = client.get(f"/api/params?{query}").json()
    assert body["param"] == param and body["error"]


def test_booleans_and_unknown_commands(client):
    body = client.get("/api/memory?model=gpt2&flash=perhaps").json()
    assert body["flag"] == "--flash" and "true or false" in body["error"]
    assert client.get("/api/serve").status_code == 404
    assert client.get("/api/nonsense").status_code == 404
    assert api.argv_for("memory", [("model", "gpt2"), ("flash", "0"), ("sp", "1"), ("json", "")]) == \
        ["memory", "--model=gpt2", "--no-flash", "--sp"]


def test_health_and_schema(client):
    health = client.get("/api/health").json()
    assert health["status"] == "ok" and {"plan", "tensor", "memory"} <= set(health["commands"])
    schema = client.get("/api/schema").json()
    memory = {f["param"]: f for f in schema["memory"]["flags"]}
    assert "mixed-bf16" in memory["precision"]["choices"] and memory["zero"]["choices"] == ["0", "1", "2", "3"]
    assert memory["flash"]["boolean"] and memory["flash"]["default"] is True


def test_optimal_curve_spends_the_same_budget(client):
    """Every point of the iso-FLOP curve has N·D of the optimum (the same C = 6ND); under Approach 3 the
    command's optimum is the lowest point of the curve (Hoffmann et al. 2022, Sec. 3.3)."""
    from trainledger.account.planning.plan import approach3_loss

    query = "budget-flops=5.76e23&law=approach3"
    curve = client.get(f"/api/optimal-curve?{query}").json()
    body = cli_json(["optimal", "--budget-flops", "5.76e23", "--law", "approach3"])
    assert curve["optimum"]["n_params"] == body["n_params"] and curve["budget_flops"] == body["budget_flops"]
    assert len(curve["points"]) == 81
    for point in curve["points"]:
        assert point["n_params"] * point["n_tokens"] == pytest.approx(body["n_params"] * body["n_tokens"], rel=1e-12)
        assert point["predicted_loss"] == approach3_loss(point["n_params"], point["n_tokens"])
    assert min(p["predicted_loss"] for p in curve["points"]) >= body["predicted_loss"] - 1e-12
    assert client.get("/api/optimal-curve?mfu=3").status_code == 422


@pytest.mark.parametrize("shape,transpose,index", [((2, 3), (0, 1), None), ((4, 6), None, "1:3,::2"),
                                                   ((2, 3, 4), (0, 2), "1"), ((5,), None, "::2")])
def test_tensor_storage_map_matches_torch(client, shape, transpose, index):
    """Storage slot of every view element, against torch: arange(numel) viewed the same way holds its own slots."""
    import torch

    query = f"shape={','.join(map(str, shape))}" + (f"&transpose={transpose[0]},{transpose[1]}" if transpose else "")
    query += f"&slice={index}" if index else ""
    body = client.get(f"/api/tensor-storage?{query}").json()
    x = torch.arange(torch.Size(shape).numel()).view(shape)
    if transpose:
        x = x.transpose(*transpose)
    if index:
        x = eval(f"x[{index}]")  # the test's own Python indexing of the same text
    assert body["drawable"] and body["storage_index"] == x.flatten().tolist()
    assert body["view_shape"] == list(x.shape)


def test_tensor_storage_too_large_to_draw(client):
    body = client.get("/api/tensor-storage").json()  # the lecture's 49152 × 12288 matrix
    assert body == {"numel": 603979776, "view_shape": [49152, 12288], "limit": 1024, "drawable": False}


def test_dtype_round_reproduces_the_lecture_and_torch(client):
    """CS336 Lecture 2: fp16(1e-8) == 0, bf16(1e-8) ≈ 1.0012e-8; every format against torch's own cast."""
    import torch

    rows = {r["name"]: r for r in client.get("/api/dtype-round?value=1e-8").json()}
    assert rows["fp16"]["rounded"] == 0 and rows["fp16"]["underflows"]
    assert rows["bf16"]["rounded"] == pytest.approx(1.0012e-8, rel=1e-4) and not rows["bf16"]["underflows"]
    casts = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16,
             "fp8-e4m3": torch.float8_e4m3fn, "fp8-e5m2": torch.float8_e5m2}
    for value in ("1e-8", "0.1", "300", "70000"):
        rows = {r["name"]: r for r in client.get(f"/api/dtype-round?value={value}").json()}
        for name, dtype in casts.items():
            expected = torch.tensor([float(value)], dtype=torch.float64).to(dtype).double().item()
            got = rows[name]["rounded"]
            # JSON has no inf or NaN: like the CLI's --json they arrive as null, with `overflows` set
            assert got == expected if math.isfinite(expected) else (got is None and rows[name]["overflows"]), (value, name)
    assert client.get("/api/dtype-round?value=abc").status_code == 422


def test_page_is_served_and_offline(client):
    page = client.get("/")
    assert page.status_code == 200
    for calc in ("plan", "tensor", "dtypes", "matmul", "params", "memory", "optimal", "step"):
        assert f'id="calc-{calc}"' in page.text
    for name in ("index.html", "app.js", "charts.js", "calculators.js", "style.css"):
        text = (STATIC_DIR / name).read_text().replace('"http://www.w3.org/2000/svg"', "")  # a namespace name, not a fetch
        assert client.get(f"/{name}").status_code == 200
        assert "http://" not in text and "https://" not in text and "//cdn" not in text, name


def test_api_answers_in_well_under_100_ms(client):
    """The calculators call the API on every slider move (debounced 100 ms): each answer must be quick."""
    queries = ["/api/plan", "/api/memory?model=llama-2-7b", "/api/matmul", "/api/params?model=llama-2-7b",
               "/api/tensor-storage?shape=16,16&transpose=0,1", "/api/optimal-curve", "/api/dtype-round"]
    for query in queries:
        client.get(query)  # imports, caches
        seconds = []
        for _ in range(5):
            start = time.perf_counter()
            assert client.get(query).status_code == 200
            seconds.append(time.perf_counter() - start)
        # the median, so one answer delayed by a busy machine does not decide; typical answers take 2-15 ms
        assert sorted(seconds)[2] < 0.1, (query, seconds)


def test_a_bug_is_a_500_with_one_line_not_a_traceback(client, monkeypatch):
    from trainledger.cli import dtypes

    def broken(args):
        raise RuntimeError("boom")

    monkeypatch.setattr(dtypes, "compute", broken)
    response = client.get("/api/dtypes")
    assert response.status_code == 500
    assert response.json()["error"] == "unexpected RuntimeError: boom (rerun with TRAINLEDGER_DEBUG=1 for details)"


def test_positional_arguments_and_many_values(monkeypatch):
    """A command with a positional argument and an nargs='+' flag (none of today's commands has one)."""
    parser = cli.OneLineParser(prog="trainledger fake")
    parser.add_argument("names", nargs="+")
    parser.add_argument("--sizes", nargs="+")
    parser.add_argument("--verbose", action="store_true")
    monkeypatch.setattr(api, "command_parsers", lambda: {"fake": parser})
    monkeypatch.setitem(flags.WEB_FLAGS, "fake", frozenset({"sizes", "verbose"}))    # the web allow-list
    argv = api.argv_for("fake", [("names", "a b"), ("names", "-c"), ("sizes", "1 2"), ("verbose", "no")])
    assert argv == ["fake", "--sizes", "1", "2", "--", "a", "b", "-c"]
    assert vars(parser.parse_args(argv[1:])) == {"names": ["a", "b", "-c"], "sizes": ["1", "2"], "verbose": False}


WEIRD = ["", "-1", "1e308", "9" * 400, "ü💥"]


def test_weird_values_of_every_flag_are_never_a_500(client):
    """Every flag of every endpoint (from /api/schema) with empty, zero, negative, huge, non-numeric, unicode
    and path-like values, alone and repeated: a 200 (the CLI's answer) or a 422 with a one-line message."""
    schema = client.get("/api/schema").json()
    seen = 0
    for command, info in schema.items():
        for flag in info["flags"]:
            for value in WEIRD:
                for params in ([(flag["param"], value)], [(flag["param"], "1"), (flag["param"], value)])[:1 + (value == "")]:
                    response = client.get(f"/api/{command}", params=params)
                    assert response.status_code in (200, 422), (command, params, response.text[:300])
                    if response.status_code == 422:
                        assert response.json()["error"] and "\n" not in response.json()["error"]
                    seen += 1
    for path, param in (("optimal-curve", "budget-flops"), ("optimal-curve", "num-gpus"), ("tensor-storage", "shape"),
                        ("tensor-storage", "slice"), ("dtype-round", "value")):
        for value in WEIRD:
            assert client.get(f"/api/{path}", params={param: value}).status_code in (200, 422), (path, param, value)
    for field in api.ARCH_INT_FIELDS:
        query = {"arch.d_model": "64", "arch.n_layers": "2", "arch.n_heads": "4", "arch.d_ff": "256", "arch.vocab_size": "100"}
        for value in ("0", "-3", "9" * 400, "x"):  # 10^400 layers: capped at 10,000 on the web (test_web_guard)
            for command in ("params", "memory", "flops", "plan"):
                response = client.get(f"/api/{command}", params={**query, f"arch.{field}": value})
                assert response.status_code == 422, (command, field, value, response.text[:300])
                assert response.json()["param"] == f"arch.{field}"
    assert seen > 300


@pytest.mark.parametrize("query", ["help=1", "help", "version=true", "h=1", "=1", "-=1", "arch.=1", "%00=1"])
def test_odd_parameter_names_are_422(client, query):
    """Parameters named like argparse's own --help/--version (which print and exit) or oddly: 422, never a 500."""
    response = client.get(f"/api/memory?model=gpt2&{query}")
    assert response.status_code == 422, response.text[:300]
    assert response.json()["error"]


def test_overflow_is_a_422_with_the_cli_line(client):
    """`trainledger matmul --m 1e308` cannot compute (the count overflows a float): the CLI refuses it in one
    line naming the flag, and the API answers that line with 422, as bad input, rather than 500."""
    response = client.get("/api/matmul?m=1e308")
    assert response.status_code == 422
    assert "--m" in response.json()["error"] and "below 2^63" in response.json()["error"]


def test_commands_that_run_work_are_not_endpoints(client):
    """bench (size² matrices) and measure (a whole model) run on the host: the calculator never exposes them."""
    assert client.get("/api/bench?size=100000").status_code == 404
    assert client.get("/api/measure?model=llama-2-7b&device=cpu").status_code == 404
    assert not {"bench", "measure"} & set(client.get("/api/health").json()["commands"])
    assert not {"bench", "measure"} & set(client.get("/api/schema").json())


def test_layout_launch_text_is_the_clis(client):
    """`launch=` gives the text of `layout --launch` (cli/launch.py): both forms, as the command line computes them."""
    body = client.get("/api/layout?model=gpt2&gpu=h100&num-gpus=16&launch=slurm").json()
    assert body == cli_json(["layout", "--model", "gpt2", "--gpu", "h100", "--num-gpus", "16", "--launch", "slurm"])
    assert body["launch"]["slurm"].startswith("#!/bin/bash") and "\nsrun torchrun --nnodes 2 " in body["launch"]["slurm"]
    assert "--model gpt2 " in body["launch"]["torchrun"]


def test_layout_launch_of_a_custom_model_names_its_file_not_the_server_path(client):
    fields = {"family": "llama", "d_model": "256", "n_layers": "4", "n_heads": "4", "n_kv_heads": "4",
              "d_ff": "512", "vocab_size": "1000", "max_seq_len": "512"}
    query = "&".join(f"arch.{k}={v}" for k, v in fields.items())
    body = client.get(f"/api/layout?{query}&num-gpus=2&launch=torchrun").json()
    path = api.custom_config_path(fields)
    assert str(Path(path).parent) not in json.dumps(body["launch"])
    assert f"--model {Path(path).name} " in body["launch"]["torchrun"]
    assert body["launch"]["train_args"][:2] == ["--model", Path(path).name]


def test_the_fine_tuning_ladder_is_the_clis(client):
    """/api/fit with a model, a sequence and a micro-batch answers fit's ladder, rung for rung as the CLI's JSON."""
    query = {"model": "llama-3.1-8b", "gpu": "rtx-4090", "num-gpus": 1, "seq-len": 2048, "batch-size": 2, "lora-rank": 16}
    r = client.get("/api/fit", params=query)
    assert r.status_code == 200, r.text
    served = r.json()
    expected = cli_json(["fit", "--model", "llama-3.1-8b", "--gpu", "rtx-4090", "--num-gpus", "1", "--seq-len", "2048",
                         "--batch-size", "2", "--lora-rank", "16"])
    assert served["fastest_fitting"] == expected["fastest_fitting"] and served["ladder_num_gpus"] == 1
    assert [(x["key"], x["fits"], x["required_bytes"]) for x in served["ladder"]] == \
        [(x["key"], x["fits"], x["required_bytes"]) for x in expected["ladder"]]
    assert not served["ladder"][0]["fits"] and any(x["fits"] for x in served["ladder"])


@pytest.mark.parametrize("field, value, words", [("lora-rank", "0", "--lora-rank"), ("lora-rank", "100000", "--lora-rank"),
                                                 ("lora-targets", "q,zz", "--lora-targets"),
                                                 ("seq-len", "-5", "--seq-len")])
def test_bad_fine_tuning_input_is_a_422_naming_the_field(client, field, value, words):
    """As every calculator's bad input: 422, the CLI's one line, the field it came from (the page puts it beside it)."""
    query = {"model": "llama-3.1-8b", "gpu": "rtx-4090", "seq-len": 2048, "batch-size": 2, "finetune": "lora", field: value}
    r = client.get("/api/fit", params=query)
    assert r.status_code == 422, r.text
    assert words in r.json()["error"] and r.json()["param"] == field
