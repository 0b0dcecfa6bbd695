"""The inference calculator: /api/infer answers what `trainledger infer --json` prints, and the page's numbers equal
it after a slider moves (headless Chromium, as tests/web/test_web_browser.py)."""

from __future__ import annotations

import json
import os
import threading

import pytest

pytest.importorskip("fastapi", reason="the web API needs the optional extra trainledger[web]")
from fastapi.testclient import TestClient  # noqa: E402

from trainledger.cli import main as cli  # noqa: E402
from trainledger.cli.common import json_ready  # noqa: E402
from trainledger.web.app import create_app  # noqa: E402

CHROMIUM = "/usr/bin/chromium"


def cli_json(argv):
    return json.loads(json.dumps(json_ready(cli.compute(argv))))


def test_api_infer_is_the_cli_answer():
    client = TestClient(create_app(), base_url="http://127.0.0.1:8000")
    reply = client.get("/api/infer", params={"model": "llama-3-8b", "gpu": "h100", "batch-size": "32",
                                             "prompt-len": "8064", "gen-len": "128"})
    assert reply.status_code == 200
    expected = cli_json(["infer", "--model", "llama-3-8b", "--gpu", "h100", "--batch-size", "32", "--prompt-len", "8064",
                         "--gen-len", "128"])
    assert reply.json() == expected and expected["kv_cache_bytes"] == 32 * 2**30
    bad = client.get("/api/infer", params={"model": "llama-3-8b", "dtype": "fp64"})
    assert bad.status_code == 422 and bad.json()["flag"] == "--dtype"
    local = client.get("/api/infer", params={"model": "llama-3-8b", "gpu": "cpu"})   # this machine: command line only
    assert local.status_code == 422 and local.json()["flag"] == "--gpu"


def test_generate_and_export_are_not_web_commands():
    client = TestClient(create_app(), base_url="http://127.0.0.1:8000")
    for command in ("generate", "export"):
        assert client.get(f"/api/{command}", params={"run": "/etc"}).status_code == 404


@pytest.mark.browser
@pytest.mark.timeout(180)
@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Chromium not installed: run scripts/install_chromium.sh")
def test_the_page_shows_the_cli_numbers_after_a_slider_moves():
    playwright_api = pytest.importorskip("playwright.sync_api", reason="the browser tests need playwright")
    uvicorn = pytest.importorskip("uvicorn", reason="the web page needs the optional extra trainledger[web]")
    from trainledger.cli.serve import listen
    sock = listen("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(create_app(port=sock.getsockname()[1]), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        with playwright_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            errors = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.goto(f"http://127.0.0.1:{sock.getsockname()[1]}/#infer.batch-size=16")
            page.wait_for_function("Number(document.querySelector('#calc-infer').dataset.updates || 0) > 0",
                                   timeout=30000)
            before = int(page.get_attribute("#calc-infer", "data-updates"))
            page.focus("#infer-batch-size-slider")
            page.keyboard.press("ArrowRight")                      # 16 -> 32 sequences
            page.wait_for_function(f"Number(document.querySelector('#calc-infer').dataset.updates) > {before}",
                                   timeout=15000)
            page.wait_for_timeout(300)
            page.wait_for_function("!document.querySelector('#calc-infer').classList.contains('pending')", timeout=15000)
            assert page.get_attribute("#calc-infer", "data-state") == "ok"
            assert page.input_value("#infer-batch-size") == "32"
            values = page.eval_on_selector_all("#calc-infer .results [data-path]",
                                               "nodes => Object.fromEntries(nodes.map(n => [n.dataset.path, n.dataset.value]))")
            expected = cli_json(["infer", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--batch-size", "32"])
            assert len(values) > 10
            for path, raw in values.items():
                want = expected
                for key in path.split("."):
                    want = want[key]
                assert json.loads(raw) == want, path
            assert page.eval_on_selector_all("#calc-infer svg rect.part", "n => n.length") >= 2
            text = page.inner_text("#calc-infer")
            assert "NaN" not in text and "undefined" not in text
            assert not errors, errors
            browser.close()
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
