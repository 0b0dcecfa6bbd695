"""Issue 40 on the web server: `flag=--` and empty values are 422s (eight endpoints answered 500), a gpt_oss config
of 65,536 experts × 2,000 layers is refused before any work (it built a list of ~400M tensors: MemoryError, a 500),
a worker's memory is bounded (RLIMIT_AS: 503, never a 500, never the server's memory), no answer or header names
a path of the server (`source`, X-Trainledger-Argv, a --config-dir config.json named after its directory), and a
client that sends its request slowly is disconnected (slowloris sockets stayed open for ever).

References: the status codes and bodies of the server in this process (TestClient), a real uvicorn server on a
socket for the slow clients, a worker process run with a small address-space cap, the server's peak RSS.
"""

from __future__ import annotations

import json
import resource
import socket
import threading
import time

import pytest

pytest.importorskip("fastapi", reason="the web API needs the optional extra trainledger[web]")
from fastapi.testclient import TestClient  # noqa: E402

from trainledger.cli import main as cli  # noqa: E402
from trainledger.web import api, guard, worker  # noqa: E402
from trainledger.web.app import create_app  # noqa: E402

BASE = "http://127.0.0.1:8000"
HOSTILE_OSS = {"model_type": "gpt_oss", "vocab_size": 32000, "hidden_size": 64, "num_hidden_layers": 2_000,
               "num_attention_heads": 4, "num_key_value_heads": 4, "head_dim": 16, "intermediate_size": 64,
               "max_position_embeddings": 2048, "num_local_experts": 65_536, "num_experts_per_tok": 2}
ENDPOINTS = ("plan", "memory", "step", "matmul", "fit", "mfu", "optimal", "layout")


@pytest.fixture(scope="module")
def client():
    return TestClient(create_app(), base_url=BASE)


@pytest.mark.parametrize("value", ["--", ""])
def test_double_dash_and_empty_values_are_422_on_every_flag(client, value):
    schema = client.get("/api/schema").json()
    seen = 0
    for command in ENDPOINTS:
        for flag in schema[command]["flags"]:
            if flag["boolean"] or flag["positional"] or flag["param"] in ("model", "gpu") and value == "":
                continue
            response = client.get(f"/api/{command}", params={flag["param"]: value})
            assert response.status_code in (200, 422), (command, flag["param"], response.text[:200])
            if value == "--":
                assert response.status_code == 422, (command, flag["param"])
                if flag["param"] != "model":                # model= is resolved by the guard: "unknown model '--'"
                    assert "expected a value, got '--'" in response.json()["error"], (command, flag["param"])
            seen += 1
    assert seen > 100


@pytest.mark.parametrize("content_type", ["application/json", "text/plain"])
def test_the_hostile_gpt_oss_config_is_refused_before_any_work(client, content_type):
    started = time.monotonic()
    response = client.post("/api/step?gpu=h100", content=json.dumps(HOSTILE_OSS).encode(),
                           headers={"Content-Type": content_type})
    assert response.status_code == 422 and time.monotonic() - started < 5
    assert "bound" in response.json()["error"] and worker.running() == 0


def test_a_memoryerror_is_a_503_never_a_500(monkeypatch):
    def exhausted(argv):
        raise MemoryError
    monkeypatch.setattr(cli, "compute", exhausted)
    status, body = api.outcome("step", ["step", "--model=gpt2"])
    assert status == 503 and "more memory than a web request may take" in body["error"]


@pytest.mark.timeout(120)
def test_a_worker_cannot_take_more_memory_than_its_cap():
    """A worker allocating 2 GiB under a 256 MiB cap: stopped (the child died of its MemoryError), and this process
    (the server's) did not grow by the allocation."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(worker.WorkStopped) as stopped:
        worker.run(bytearray, (2 << 30,), 30.0, memory_bytes=256 << 20)
    assert stopped.value.reason == "died"
    assert worker.run(len, (b"abc",), 30.0, memory_bytes=256 << 20) == 3      # small work still runs under the cap
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200_000     # KiB: far below 2 GiB


@pytest.mark.timeout(180)
def test_a_heavy_request_within_the_bounds_under_a_small_cap_is_a_503():
    """gpt-oss with 65,536 experts in each of 64 layers (at the experts × layers bound): `step` lists 12.6M tensors,
    ~1.5 GB; under a 300 MiB cap the worker answers 503 (MemoryError) or dies (503 too): never a 500."""
    config = {**HOSTILE_OSS, "num_hidden_layers": 64}
    path = guard.STORE.path_for(config, "posted")
    try:
        status, body = worker.run(api.outcome, ("step", ["step", f"--model={path}", "--gpu=h100"], True), 120.0,
                                  memory_bytes=300 << 20)
    except worker.WorkStopped as stopped:
        assert stopped.reason == "died"
    else:
        assert status == 503 and "memory" in body["error"], body


def test_no_answer_or_header_names_a_path_of_the_server(tmp_path):
    folder = tmp_path / "alice-private-configs"
    folder.mkdir()
    tiny = {"model_type": "llama", "vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 4, "intermediate_size": 256, "max_position_embeddings": 512}
    (folder / "tiny.json").write_text(json.dumps(tiny))
    (folder / "config.json").write_text(json.dumps(tiny))
    client = TestClient(create_app(config_dir=folder), base_url=BASE)
    answers = [client.get("/api/params?model=tiny.json"), client.get("/api/params?model=config.json"),
               client.post("/api/memory?batch-size=2", json=tiny),
               client.get("/api/params?arch.d_model=64&arch.n_layers=2&arch.n_heads=4&arch.d_ff=256&arch.vocab_size=100"),
               client.get("/api/layout?model=tiny.json&gpu=h100&num-gpus=2&launch=slurm"),
               client.post("/api/layout?gpu=h100&num-gpus=2&launch=torchrun", json=tiny)]
    private = str(guard.STORE.folder)
    for response in answers:
        assert response.status_code == 200, response.text[:300]
        shown = response.text + response.headers.get("X-Trainledger-Argv", "")
        assert str(folder) not in shown and private not in shown and str(tmp_path) not in shown
        assert "alice-private-configs" not in shown
    assert answers[0].json()["source"] == "config.json at tiny.json"
    assert answers[1].json()["model"].startswith("config-")          # not the server directory's name
    assert json.loads(answers[2].headers["X-Trainledger-Argv"])[-1].startswith("--model=posted-")


def _serve_in_thread(read_seconds: float):
    """A real uvicorn server (the protocol `trainledger serve` runs, its read deadline shortened) on a free port."""
    import uvicorn

    from trainledger.cli.serve import listen
    from trainledger.web.slow_clients import DeadlineH11Protocol

    class Quick(DeadlineH11Protocol):
        pass
    Quick.read_seconds = read_seconds
    sock = listen("127.0.0.1", 0)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(port=port), http=Quick, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    return server, thread, port


def _closed_within(sock: socket.socket, seconds: float) -> float | None:
    """Seconds until the server closes `sock` (recv gives b'' or a reset), or None if it stays open that long."""
    sock.settimeout(seconds)
    started = time.monotonic()
    try:
        while sock.recv(4096):
            pass
    except socket.timeout:
        return None
    except ConnectionResetError:
        pass
    return time.monotonic() - started


@pytest.mark.timeout(60)
def test_slow_clients_are_disconnected_and_others_still_answered():
    server, thread, port = _serve_in_thread(read_seconds=1.0)
    try:
        head = socket.create_connection(("127.0.0.1", port))            # slowloris: a head that never ends
        head.sendall(f"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-a: ".encode())
        body = socket.create_connection(("127.0.0.1", port))            # a body declared and never sent
        body.sendall(f"POST /api/params HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 1000\r\n\r\n{{".encode())
        silent = socket.create_connection(("127.0.0.1", port))          # connects, sends nothing
        for sock in (head, body, silent):
            closed = _closed_within(sock, 10.0)
            assert closed is not None and closed < 5, "the server kept a slow client's socket open"
            sock.close()
        import httpx
        reply = httpx.get(f"http://127.0.0.1:{port}/api/health", timeout=10)
        assert reply.status_code == 200 and reply.json()["status"] == "ok"
        slow_ok = socket.create_connection(("127.0.0.1", port))         # a request sent in time, in two parts
        slow_ok.sendall(f"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode())
        time.sleep(0.3)
        slow_ok.sendall(b"Connection: close\r\n\r\n")
        slow_ok.settimeout(10)
        assert slow_ok.recv(4096).startswith(b"HTTP/1.1 200")
        slow_ok.close()
    finally:
        server.should_exit = True
        thread.join(timeout=20)
