"""What the web server refuses (issue 14, "Web"): server paths as models, foreign Host headers (DNS rebinding),
oversized bodies, unbounded work, growing headers, an online docs page; and where its custom configs live.

References: the CLI's own answers (main.compute) for what is allowed, and the answer to a missing file for what
is refused, so that the two cannot be told apart.
"""

from __future__ import annotations

import json
import os
import stat
import threading
import time

import pytest

pytest.importorskip("fastapi", reason="the web API needs the optional extra trainledger[web]")
from fastapi.testclient import TestClient  # noqa: E402

from trainledger.cli import main as cli  # noqa: E402
from trainledger.cli.common import json_ready  # noqa: E402
from trainledger.web import api, guard  # noqa: E402
from trainledger.web.app import create_app  # noqa: E402
from trainledger.web.paths import hide_paths, server_folders  # noqa: E402

BASE = "http://127.0.0.1:8000"  # create_app()'s default address: the Host the server answers


@pytest.fixture(scope="module")
def client():
    return TestClient(create_app(), base_url=BASE)


def cli_json(argv):
    return json.loads(json.dumps(json_ready(cli.compute(argv))))


def as_served(answer, settings=None):
    """`answer` as the server shows it: its private store's and --config-dir's paths hidden (web/paths.py)."""
    return hide_paths(answer, server_folders(settings))


LLAMA_TINY = api.custom_config({"d_model": "64", "n_layers": "2", "n_heads": "4", "d_ff": "256", "vocab_size": "100"})


# ---------- models: never a server path ----------

SERVER_PATHS = ["/etc/passwd", "/etc/hostname", "/etc", "/proc/self/environ", "../../../../etc/passwd",
                "/no/such/config.json", "/tmp", "~/.bashrc", "config.json"]


@pytest.mark.parametrize("command", ["params", "memory", "flops", "plan", "step", "layout", "mfu", "fit"])
def test_server_paths_answer_exactly_like_a_missing_file(client, command):
    """Existing files, directories and missing files get one status and one message, the value sent being the
    only difference: nothing tells whether a path exists (before: 'is not valid JSON' vs 'no such config file')."""
    missing = "/no/such/config.json"
    reference = client.get(f"/api/{command}", params={"model": missing, "tokens-per-s": "1000"})
    assert reference.status_code == 422
    for path in SERVER_PATHS:
        response = client.get(f"/api/{command}", params={"model": path, "tokens-per-s": "1000"})
        assert response.status_code == reference.status_code, path
        body = response.json()
        assert body["flag"] == "--model" and body["param"] == "model"
        assert body["error"].replace(repr(path), "X") == reference.json()["error"].replace(repr(missing), "X"), path
        assert set(body) == set(reference.json())


def test_a_refused_model_reads_no_file(monkeypatch):
    """The refusal is decided from the value alone: no stat, no open (a 300 MB file is never read into memory)."""
    import builtins
    import pathlib

    def forbidden(*args, **kwargs):
        raise AssertionError("the file system was touched")

    monkeypatch.setattr(builtins, "open", forbidden)
    monkeypatch.setattr(pathlib.Path, "stat", forbidden)
    monkeypatch.setattr(os, "stat", forbidden)
    status, body, _ = api.answer("params", [("model", "/etc/passwd")])
    assert status == 422 and "never a path on the server" in body["error"]


def test_config_dir_serves_its_files_by_name_only(tmp_path):
    folder = tmp_path / "configs"
    folder.mkdir()
    (folder / "tiny.json").write_text(json.dumps(LLAMA_TINY))
    (folder / "huge.json").write_text(" " * (guard.MAX_CONFIG_FILE_BYTES + 1) + json.dumps(LLAMA_TINY))
    (tmp_path / "outside.json").write_text(json.dumps(LLAMA_TINY))
    app = create_app(config_dir=folder)
    client = TestClient(app, base_url=BASE)
    body = client.get("/api/params?model=tiny.json").json()
    assert body == as_served(cli_json(["params", "--model", str(folder / "tiny.json")]), app.state.settings)
    assert str(folder) not in json.dumps(body)                                  # the server's directory stays there
    assert body["n_params"] == 2 * 100 * 64 + 2 * (4 * 64 * 64 + 3 * 64 * 256 + 2 * 64) + 64  # embed+head, layers, norm
    refused = client.get("/api/params?model=no-such.json").json()["error"]
    for value in (str(folder / "tiny.json"), "../outside.json", "huge.json", "sub/tiny.json"):
        response = client.get("/api/params", params={"model": value})
        assert response.status_code == 422, value
        assert response.json()["error"].replace(repr(value), "X") == refused.replace("'no-such.json'", "X")


def test_config_in_the_body_of_a_post(client):
    """POST /api/<command> with a config.json body answers like `--model that.json`; bodies are capped."""
    response = client.post("/api/memory?batch-size=2&seq-len=128", json={"config": LLAMA_TINY})
    assert response.status_code == 200, response.text
    written = json.loads(response.headers["X-Trainledger-Argv"])          # the file's name, not its path
    assert str(guard.STORE.folder) not in json.dumps(written) + response.text
    on_server = [f"--model={guard.STORE.folder / a[len('--model='):]}" if a.startswith("--model=") else a for a in written]
    assert response.json() == as_served(cli_json(on_server))
    assert client.post("/api/memory?batch-size=2&seq-len=128", json=LLAMA_TINY).json() == response.json()
    too_big = {"config": {**LLAMA_TINY, "padding": "x" * guard.MAX_BODY_BYTES}}
    assert client.post("/api/params", json=too_big).status_code == 413

    def chunks():  # no Content-Length: counted as it arrives
        for _ in range(100):
            yield b" " * 1024

    assert client.post("/api/params", content=chunks()).status_code == 413
    bad = client.post("/api/params", content=b"{not json")
    assert bad.status_code == 422 and bad.json()["param"] == "config"
    both = client.post("/api/params?arch.d_model=64", json=LLAMA_TINY)
    assert both.status_code == 422 and both.json()["flag"] == "--model"


# ---------- Host header ----------

@pytest.mark.parametrize("host,status", [
    ("127.0.0.1:8000", 200), ("localhost:8000", 200), ("LOCALHOST:8000", 200), ("[::1]:8000", 200),
    ("evil.example:8000", 421), ("evil.example", 421), ("127.0.0.1:8001", 421), ("localhost", 421),
    ("127.0.0.1.nip.io:8000", 421), ("", 421), ("[::1", 421),
])
def test_a_foreign_host_is_refused(client, host, status):
    """DNS rebinding: a page whose name resolves to 127.0.0.1 sends its own name as Host, and is refused."""
    for path in ("/api/plan", "/", "/api/health"):
        response = client.get(path, headers={"Host": host})
        assert response.status_code == status, (path, host)
    if status == 421:
        assert "--allow-host" in response.json()["error"]


def test_hosts_of_a_server_on_every_interface_and_allowed_names():
    everywhere = TestClient(create_app(host="0.0.0.0", port=8000, allow_hosts=("box.lan",)), base_url=BASE)
    for host, status in (("192.168.1.5:8000", 200), ("[fe80::1]:8000", 200), ("box.lan:8000", 200),
                         ("evil.example:8000", 421), ("192.168.1.5:80", 421)):
        assert everywhere.get("/api/plan", headers={"Host": host}).status_code == status, host
    one = TestClient(create_app(host="10.0.0.2", port=80), base_url="http://10.0.0.2")
    assert one.get("/api/plan").status_code == 200  # port 80: browsers send no port
    assert one.get("/api/plan", headers={"Host": "10.0.0.3"}).status_code == 421


# ---------- heavy work ----------

@pytest.mark.parametrize("query,flag", [
    ("layout?model=gpt2&num-gpus=65537", "--num-gpus"),
    ("layout?model=gpt2&num-gpus=8&global-batch-size=131072", "--global-batch-size"),
    ("layout?model=gpt2&top=51", "--top"),
    ("step?model=gpt2&num-gpus=131072", "--num-gpus"),
    ("plan?model=gpt2&mfu=auto&num-gpus=1000000", "--num-gpus"),
    ("layout?model=gpt3-175b&num-gpus=55440&global-batch-size=55440", "--num-gpus"),  # 2,974 candidate layouts
    ("optimal?mfu=auto&num-gpus=45360&days=1000", "--num-gpus"),
    ("mfu?model=gpt3-175b&num-gpus=55440&tokens-per-s=1000", "--num-gpus"),
    ("tensor?shape=4096,4096&torch=true&device=cpu", "--torch"),  # 64 MiB of fp32
])
def test_heavy_requests_are_capped(client, query, flag):
    start = time.perf_counter()
    response = client.get(f"/api/{query}")
    assert response.status_code == 422, response.text[:300]
    assert response.json()["flag"] == flag
    assert time.perf_counter() - start < 5  # refused before the work: a generous bound for a loaded machine


def test_heavy_requests_within_the_caps_answer_like_the_cli(client):
    for query, argv in (("layout?model=gpt2&num-gpus=8&global-batch-size=64",
                         ["layout", "--model", "gpt2", "--num-gpus", "8", "--global-batch-size", "64"]),
                        ("step?model=gpt2&num-gpus=8&global-batch-size=64&batch-size=8",
                         ["step", "--model", "gpt2", "--num-gpus", "8", "--global-batch-size", "64", "--batch-size", "8"])):
        response = client.get(f"/api/{query}")
        assert response.status_code == 200, response.text[:300]
        assert response.json() == cli_json(argv)


def test_torch_tensor_within_the_cap(client, one_torch_thread):
    response = client.get("/api/tensor?shape=64,32&transpose=0,1&torch=true&device=cpu")
    assert response.status_code == 200, response.text[:300]
    body = response.json()
    assert body["torch_agrees"] is True and body["torch"]["stride"] == [1, 32]


def test_busy_server_answers_503_for_heavy_work_only():
    limiter = guard.HeavyLimiter(running=1, waiting=0, wait_seconds=0.1)
    app = create_app()
    app.state.settings.heavy = limiter
    client = TestClient(app, base_url=BASE)
    release, started = threading.Event(), threading.Event()

    def hold():
        started.set()
        release.wait(30)

    worker = threading.Thread(target=limiter.run, args=(hold,))
    worker.start()
    try:
        assert started.wait(10)
        busy = client.get("/api/layout?model=gpt2")
        assert busy.status_code == 503 and busy.headers["Retry-After"] == "5" and "busy" in busy.json()["error"]
        assert client.get("/api/plan").status_code == 200  # light answers are not queued behind heavy ones
    finally:
        release.set()
        worker.join()
    assert client.get("/api/layout?model=gpt2").status_code == 200


def test_limiter_queues_then_refuses():
    limiter = guard.HeavyLimiter(running=1, waiting=1, wait_seconds=5)
    release, order = threading.Event(), []
    first = threading.Thread(target=limiter.run, args=(lambda: (order.append("first"), release.wait(30)),))
    first.start()
    while not order:
        time.sleep(0.01)
    second = threading.Thread(target=limiter.run, args=(lambda: order.append("second"),))
    second.start()
    time.sleep(0.2)  # `second` waits for the slot; a third finds the queue full
    with pytest.raises(guard.GuardError) as info:
        limiter.run(lambda: order.append("third"))
    assert info.value.status == 503
    release.set()
    first.join()
    second.join()
    assert order == ["first", "second"]


# ---------- arch.* caps ----------

def test_arch_sizes_are_capped(client):
    query = {"arch.d_model": "64", "arch.n_heads": "4", "arch.d_ff": "256", "arch.vocab_size": "100"}
    ok = client.get("/api/params", params={**query, "arch.n_layers": "10000"})
    assert ok.status_code == 200 and ok.json()["n_params"] == 2 * 100 * 64 + 10_000 * ok.json()["n_params_per_layer"] + 64
    for value in ("10001", "9" * 400, "9" * 5000):
        start = time.perf_counter()
        response = client.get("/api/params", params={**query, "arch.n_layers": value})
        assert response.status_code == 422 and response.json()["param"] == "arch.n_layers"
        assert "at most 10,000" in response.json()["error"] and len(response.json()["error"]) < 300
        assert time.perf_counter() - start < 2


# ---------- files, headers, docs ----------

def test_custom_configs_live_in_a_private_bounded_directory(tmp_path):
    path = api.custom_config_path({"d_model": "64", "n_layers": "3", "n_heads": "4", "d_ff": "256", "vocab_size": "100"})
    folder = os.path.dirname(path)
    assert os.path.basename(folder).startswith("trainledger-web-") and folder != "/tmp/trainledger-web"
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    store = guard.ConfigStore(limit=3)
    paths = [store.path_for({"n": i}) for i in range(5)]
    assert sorted(os.listdir(store.folder)) == sorted(os.path.basename(p) for p in paths[2:])
    assert store.path_for({"n": 2}) == paths[2]  # equal content, one file
    folder = store.folder
    store.close()
    assert not folder.exists()


def test_response_headers_stay_small(client):
    """An echoed argv header used to grow with the query (70 KB); now it is sent only while it is short."""
    response = client.get("/api/plan", params={"colour": "x" * 12_000})
    assert response.status_code == 422
    assert sum(len(k) + len(v) for k, v in response.headers.items()) < 4096
    small = client.get("/api/plan?num-gpus=8")
    assert json.loads(small.headers["X-Trainledger-Argv"]) == ["plan", "--num-gpus=8"]


def test_no_api_docs_page_that_loads_a_cdn(client):
    """Swagger UI fetched its scripts from a CDN: it is gone; /api/schema and /api/openapi.json remain."""
    docs = client.get("/api/docs")
    assert docs.status_code == 404 and "cdn" not in docs.text.lower() and "<script" not in docs.text
    assert client.get("/api/openapi.json").status_code == 200
    assert "plan" in client.get("/api/schema").json()


@pytest.mark.parametrize("config,status", [
    ({**LLAMA_TINY, "num_hidden_layers": 10_001}, 422),
    ({**LLAMA_TINY, "num_hidden_layers": 10**400}, 422),
    ({**LLAMA_TINY, "vocab_size": 1 << 30}, 422),
    ({**LLAMA_TINY, "num_hidden_layers": 10_000}, 200),
    ({"model_type": "no-such-family"}, 422),
    ([], 422),
])
def test_posted_configs_are_capped_like_arch_fields(client, config, status):
    response = client.post("/api/params", content=json.dumps(config).encode())
    assert response.status_code == status, response.text[:300]
    if status == 422:
        assert response.json()["error"] and "\n" not in response.json()["error"]


def test_odd_bodies_are_422_not_500(client):
    for body in (b"[" * 60_000, b"\xff\xfe", b"", b"1e400", b'{"config": 3}'):
        response = client.post("/api/params", content=body)
        assert response.status_code == 422, (body[:10], response.text[:200])


@pytest.mark.parametrize("query", ["step?model=gpt2&gpu=cpu", "layout?model=gpt2&gpu=CUDA:0", "matmul?gpu=h100,cpu",
                                   "plan?gpu=mps", "memory?model=gpt2&gpu=cuda"])
def test_this_machines_device_is_command_line_only(client, query):
    """`--gpu cpu/cuda` describe this machine by measuring it (bench --calibrate): not something a web request
    should start on the server."""
    response = client.get(f"/api/{query}")
    assert response.status_code == 422 and response.json()["flag"] == "--gpu"
    assert "command-line only" in response.json()["error"]
