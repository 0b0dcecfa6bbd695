"""The page in headless Chromium: move a slider (with the keyboard) in each calculator and check that every number
shown equals `trainledger <command> --json` for the same inputs (each shown number carries data-path, its key in
the JSON, and data-value, its raw value). Screenshots of each calculator go to artifacts/screenshots/.

Debian's Chromium (/usr/bin/chromium, scripts/install_chromium.sh) driven by Playwright; never `playwright install`.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
import threading
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic"]
SCREENSHOTS = Path(__file__).resolve().parents[2] / "artifacts" / "screenshots"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.timeout(180),  # a hung browser or server fails the test instead of stalling CI
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Chromium not installed: run scripts/install_chromium.sh"),
]
playwright_api = pytest.importorskip("playwright.sync_api", reason="the browser tests need the python package playwright")
pytest.importorskip("uvicorn", reason="the web page needs the optional extra trainledger[web]")

from trainledger.cli import main as cli  # noqa: E402
from trainledger.cli.common import json_ready  # noqa: E402
from trainledger.errors import TrainledgerError  # noqa: E402
from trainledger.specs.dtypes import DTYPES, round_to_dtype  # noqa: E402
from trainledger.web import api  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from web_answers import my_knob  # noqa: E402,F401 (a fixture: one setting added to specs/run.py)


@pytest.fixture(scope="module")
def base_url():
    """The app on a free loopback port, served by uvicorn in a thread for the module's tests."""
    import uvicorn

    from trainledger.cli.serve import listen
    from trainledger.web.app import create_app

    sock = listen("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(create_app(port=sock.getsockname()[1]), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{sock.getsockname()[1]}/"
    server.should_exit = True
    thread.join(timeout=10)
    sock.close()


@pytest.fixture(scope="module")
def browser():
    with playwright_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def page(browser, base_url):
    """One loaded page for the module (the calculators are independent sections of it)."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(base_url)
    page.wait_for_selector("body[data-ready=true]", state="attached", timeout=30000)
    yield page
    assert not errors, errors
    text = page.inner_text("body")  # after every calculator has been moved: no unformatted value anywhere
    assert "NaN" not in text and "undefined" not in text and "[object" not in text and "\nnull\n" not in text
    context.close()


def cli_json(argv):
    return json.loads(json.dumps(json_ready(cli.compute(argv))))


def updates(page, calc) -> int:
    return int(page.get_attribute(f"#calc-{calc}", "data-updates") or 0)


def wait_for_answer(page, calc, before, state="ok"):
    """Wait until the calculator has drawn an answer newer than `before` updates and check its state."""
    page.wait_for_function(f"Number(document.querySelector('#calc-{calc}').dataset.updates || 0) > {before}", timeout=15000)
    page.wait_for_timeout(250)  # a debounced follow-up request (another key press) may still be on its way
    page.wait_for_function(f"!document.querySelector('#calc-{calc}').classList.contains('pending')", timeout=15000)
    # under load the last request of a burst of edits may start after the 250 ms: an intermediate answer (an
    # invalid layout's error) is then drawn first; give the final one time to arrive before judging the state
    try:
        page.wait_for_function(f"(() => {{ const c = document.querySelector('#calc-{calc}'); "
                               f"return c.dataset.state === '{state}' && !c.classList.contains('pending'); }})()",
                               timeout=5000)
    except Exception:   # playwright's TimeoutError: the assertion below says what was shown instead
        pass
    assert page.get_attribute(f"#calc-{calc}", "data-state") == state


def press(page, calc, selector, key, times=1):
    """Move a slider (or select) with the keyboard, as a user without a mouse would, and wait for the answer."""
    before = updates(page, calc)
    page.focus(selector)
    for _ in range(times):
        page.keyboard.press(key)
    wait_for_answer(page, calc, before)


def shown(page, calc) -> dict:
    """{data-path: data-value} of every number the calculator shows."""
    return page.eval_on_selector_all(f"#calc-{calc} .results [data-path]",
                                     "nodes => Object.fromEntries(nodes.map(n => [n.dataset.path, n.dataset.value]))")


def pick(data, path):
    for key in path.split("."):
        data = data[int(key)] if isinstance(data, list) else data[key]
    return data


def assert_shown_equals(values: dict, expected, prefix_map=None):
    """Each shown raw value equals the JSON value at its path, exactly (numbers as numbers)."""
    assert values, "the calculator shows no numbers"
    for path, raw in values.items():
        want = pick(expected, path)
        got = json.loads(raw) if raw not in ("undefined",) else None
        if isinstance(want, float) or isinstance(got, float):
            assert float(got) == float(want), (path, raw, want)
        else:
            assert got == want, (path, raw, want)


def screenshot(page, calc):
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.locator(f"#calc-{calc}").screenshot(path=str(SCREENSHOTS / f"{calc}.png"))


def test_training_time(page):
    press(page, "plan", "#plan-num-gpus-slider", "ArrowRight")  # 1024 -> 2048 GPUs
    assert page.input_value("#plan-num-gpus") == "2048"
    expected = cli_json(["plan", "--params", "70B", "--tokens", "15T", "--num-gpus", "2048", "--mfu", "0.5"])
    values = shown(page, "plan")
    assert_shown_equals(values, expected)
    assert float(values["train_days"]) == pytest.approx(143.93 / 2, rel=1e-4)  # CS336 Lecture 2: 143.93 days on 1024
    screenshot(page, "plan")


def test_tensor_layout(page):
    press(page, "tensor", "#tensor-rows-slider", "ArrowRight")  # shape 4,6 -> 5,6
    assert page.input_value("#tensor-shape") == "5,6"
    before = updates(page, "tensor")
    page.select_option("#tensor-transpose", "0,1")
    wait_for_answer(page, "tensor", before)
    expected = cli_json(["tensor", "--shape", "5,6", "--transpose", "0,1"])
    assert_shown_equals(shown(page, "tensor"), expected)
    assert expected["stride"] == [1, 6] and expected["contiguous"] is False
    cells = page.eval_on_selector_all("#calc-tensor svg text.cell-text", "nodes => nodes.map(n => n.textContent)")
    view_slots = cells[:30]  # the view grid is drawn first, row by row
    assert view_slots == [str(6 * c + r) for r in range(6) for c in range(5)]
    screenshot(page, "tensor")


def test_number_formats(page):
    press(page, "dtypes", "#dtypes-marker-slider", "ArrowLeft")  # 1e-8 -> 10^-8.01
    value = page.input_value("#dtypes-marker")
    assert value == "9.8e-9"
    values = shown(page, "dtypes")
    table = {k: v for k, v in values.items() if not k.startswith("round.")}
    assert_shown_equals(table, cli_json(["dtypes"]))
    floats = [d for d in DTYPES if d.kind == "float"]
    for i, dtype in enumerate(floats):
        assert float(values[f"round.{i}.rounded"]) == round_to_dtype(9.8e-9, dtype), dtype.name
    bits = page.eval_on_selector_all("#calc-dtypes svg rect.bit-exponent", "nodes => nodes.length")
    assert bits == sum(d.exponent_bits for d in DTYPES)
    screenshot(page, "dtypes")


def test_matmul(page):
    press(page, "matmul", "#matmul-m-slider", "ArrowLeft")  # 16384 -> 8192
    assert page.input_value("#matmul-m") == "8192"
    expected = cli_json(["matmul", "--m", "8192", "--dtype", "fp32,tf32,bf16,fp8"])
    assert expected["flops"] == 2 * 8192 * 32768 * 8192
    values = shown(page, "matmul")
    assert_shown_equals(values, expected)
    assert sum(1 for path in values if path.endswith("ideal_time_s")) == len(expected["results"])
    screenshot(page, "matmul")


def test_transformer_parameters(page):
    press(page, "params", "#params-n_layers-slider", "ArrowRight")  # llama-2-7b sizes, 33 layers: a custom config
    assert page.input_value("#params-model") == "custom"
    fields = {"family": "llama", "d_model": "4096", "n_layers": "33", "n_heads": "32", "n_kv_heads": "32",
              "d_ff": "11008", "vocab_size": "32000", "tied": "false"}
    expected = cli_json(["params", "--model", api.custom_config_path(fields)])
    assert_shown_equals(shown(page, "params"), expected)
    assert expected["n_params"] == 6_738_415_616 + expected["n_params_per_layer"]
    before = updates(page, "params")
    page.select_option("#params-model", "gpt2")
    wait_for_answer(page, "params", before)
    assert_shown_equals(shown(page, "params"), cli_json(["params", "--model", "gpt2"]))
    assert page.input_value("#params-d_model") == "768"
    screenshot(page, "params")


def test_memory_budget(page):
    # the calculator opens on a run that fits (issue 41): llama-2-7b on 8 H100 with ZeRO 3 (the default)
    assert page.input_value("#memory-num-gpus") == "8" and page.input_value("#memory-model") == "llama-2-7b"
    page.wait_for_function("document.querySelector('#calc-memory').dataset.state === 'ok'", timeout=15000)
    opened = cli_json(["memory", "--model", "llama-2-7b", "--gpu", "h100-sxm", "--num-gpus", "8"])
    assert opened["fits"] is True and opened["dp"] == 8 and opened["zero"] == 3
    assert page.inner_text("#calc-memory .results [data-path=fits]") == "fits"
    assert_shown_equals(shown(page, "memory"), opened)
    press(page, "memory", "#memory-num-gpus-slider", "ArrowLeft", times=3)  # 8 -> 1 GPU: AdamW's 16 B/param alone
    assert page.input_value("#memory-num-gpus") == "1"                       # exceed an H100's 80 GB
    one = cli_json(["memory", "--model", "llama-2-7b", "--num-gpus", "1"])
    assert one["fits"] is False and page.inner_text("#calc-memory .results [data-path=fits]") == "does not fit"
    before = updates(page, "memory")
    page.select_option("#memory-zero", "3")
    wait_for_answer(page, "memory", before)
    press(page, "memory", "#memory-num-gpus-slider", "ArrowRight", times=3)  # 1 -> 8 GPUs, data-parallel ranks
    assert page.input_value("#memory-num-gpus") == "8"
    expected = cli_json(["memory", "--model", "llama-2-7b", "--zero", "3", "--num-gpus", "8"])
    by_dp = cli_json(["memory", "--model", "llama-2-7b", "--zero", "3", "--dp", "8"])        # the same run, by --dp
    assert {k: v for k, v in by_dp.items() if k != "run"} == {k: v for k, v in expected.items() if k != "run"}
    assert_shown_equals(shown(page, "memory"), expected)
    verdict = page.inner_text("#calc-memory .results [data-path=fits]")
    assert verdict == ("fits" if expected["fits"] else "does not fit")
    assert page.eval_on_selector_all("#calc-memory svg rect.part", "n => n.length") == \
        sum(1 for k, v in expected.items() if k.endswith("_bytes") and k not in ("total_bytes", "memory_per_gpu_bytes", "headroom_bytes")
            and "peak" not in k and v > 0)      # the peaks are moments of the step, not parts of the bar
    screenshot(page, "memory")
    # the "Same answer" line, copied as a user would (its words are separate spans), is a command giving these numbers
    argv = shlex.split(page.text_content("#calc-memory .command-line"))
    assert argv[0] == "trainledger" and argv[-1] == "--json"
    assert_shown_equals(shown(page, "memory"), cli_json(argv[1:-1]))
    before = updates(page, "memory")  # the model of calculator 5 (gpt2 after test_transformer_parameters)
    page.select_option("#memory-model", "from-params")
    wait_for_answer(page, "memory", before)
    assert_shown_equals(shown(page, "memory"), cli_json(["memory", "--model", page.input_value("#params-model"),
                                                         "--zero", "3", "--num-gpus", "8"]))
    before = updates(page, "memory")
    page.select_option("#memory-model", "llama-2-7b")
    wait_for_answer(page, "memory", before)


def test_compute_optimal(page):
    press(page, "optimal", "#optimal-num-gpus-slider", "ArrowRight")  # 32 -> 64 H100 for 2 weeks
    assert page.input_value("#optimal-num-gpus") == "64"
    expected = cli_json(["optimal", "--num-gpus", "64"])
    # CS336 Lecture 2's budget: GPUs × seconds × H100 dense bf16 peak × MFU
    assert expected["budget_flops"] == pytest.approx(64 * 14 * 86400 * 989.5e12 * 0.5, rel=1e-12)
    page.wait_for_selector("#calc-optimal svg circle.optimum")
    assert_shown_equals(shown(page, "optimal"), expected)
    assert page.get_attribute("#calc-optimal svg[data-points]", "data-points") == "81"
    screenshot(page, "optimal")


def test_bad_input_shows_the_cli_message_beside_the_field(page):
    before = updates(page, "plan")
    page.fill("#plan-mfu", "1.5")
    wait_for_answer(page, "plan", before, state="error")
    with pytest.raises(TrainledgerError) as info:
        cli.compute(["plan", "--mfu", "1.5"])
    assert page.inner_text("#plan-mfu-error") == str(info.value)
    assert page.get_attribute("#plan-mfu", "aria-invalid") == "true"
    before = updates(page, "plan")
    page.fill("#plan-deadline", "soon")
    wait_for_answer(page, "plan", before, state="error")  # two bad fields: argparse names the first it meets
    before = updates(page, "plan")
    page.fill("#plan-mfu", "0.5")
    wait_for_answer(page, "plan", before, state="error")
    with pytest.raises(TrainledgerError) as info:
        cli.compute(["plan", "--deadline", "soon"])
    assert page.inner_text("#plan-deadline-error") == str(info.value) and page.inner_text("#plan-mfu-error") == ""
    before = updates(page, "plan")
    page.fill("#plan-deadline", "30d")
    wait_for_answer(page, "plan", before)
    assert page.inner_text("#plan-deadline-error") == ""
    expected = cli_json(["plan", "--num-gpus", page.input_value("#plan-num-gpus"), "--deadline", "30d"])
    assert_shown_equals(shown(page, "plan"), expected)
    assert "gpus_needed" in shown(page, "plan")


def test_state_is_in_the_url(browser, page, base_url):
    """The address holds the settings: opening it in a new page shows the same answers."""
    press(page, "plan", "#plan-mfu-slider", "ArrowLeft")
    before = updates(page, "memory")
    page.select_option("#memory-zero", "2")
    wait_for_answer(page, "memory", before)
    page.wait_for_timeout(300)  # the hash is written 150 ms after the last change
    url = page.url
    assert f"plan.mfu={page.input_value('#plan-mfu')}" in url and "memory.zero=2" in url
    other = browser.new_page()
    other.goto(url)
    other.wait_for_selector("body[data-ready=true]", state="attached", timeout=30000)
    for calc in ("plan", "memory", "params", "tensor"):
        assert shown(other, calc) == shown(page, calc), calc
    other.close()


def test_every_input_has_a_label(page):
    unlabelled = page.eval_on_selector_all(
        "input, select", "nodes => nodes.filter(n => !(n.labels && n.labels.length)).map(n => n.id || n.name)")
    assert unlabelled == []


def test_answers_follow_a_slider_while_it_moves(page):
    """Holding a key on a slider (a change every ≥ 60 ms for ≥ 1.2 s): requests go out during the movement, at
    most 250 ms apart (not only 100 ms after it stops), yet far fewer than one per change; the last answer shown is
    the CLI's for the final value. The lower bound needs no fast machine: a slower one only stretches the time."""
    sent = []
    listener = lambda request: sent.append(request.url) if "/api/plan?" in request.url or request.url.endswith("/api/plan") else None  # noqa: E731
    page.on("request", listener)
    before = updates(page, "plan")
    page.focus("#plan-mfu-slider")
    for _ in range(20):
        page.keyboard.press("ArrowLeft")
        page.wait_for_timeout(60)
    during = len(sent)
    wait_for_answer(page, "plan", before)
    page.remove_listener("request", listener)
    assert during >= 3 and len(sent) < 20, sent
    expected = cli_json(["plan", "--num-gpus", page.input_value("#plan-num-gpus"), "--mfu", page.input_value("#plan-mfu"),
                         *(["--deadline", page.input_value("#plan-deadline")] if page.input_value("#plan-deadline") else [])])
    assert_shown_equals(shown(page, "plan"), expected)


def test_a_phone_wide_window_does_not_scroll_sideways(page):
    """At 420 px the columns stack and wide tables scroll inside their calculator, not the whole page."""
    page.set_viewport_size({"width": 420, "height": 900})
    try:
        page.wait_for_timeout(100)
        assert page.evaluate("document.documentElement.scrollWidth") <= 430
    finally:
        page.set_viewport_size({"width": 1280, "height": 900})


def test_gpt2_family_fixes_kv_heads_and_tying(page):
    """GPT-2 has no grouped KV heads and always ties its head: those fields are disabled, not sent, and one more
    layer on GPT-2 small's sizes counts its published 124,439,808 plus one layer."""
    before = updates(page, "params")
    page.select_option("#params-model", "gpt2")
    wait_for_answer(page, "params", before)
    assert page.is_disabled("#params-tied") and page.is_checked("#params-tied")
    assert page.is_disabled("#params-n_kv_heads") and page.is_disabled("#params-n_kv_heads-slider")
    press(page, "params", "#params-n_layers-slider", "ArrowRight")  # 12 -> 13 layers: a custom gpt2 config
    assert page.input_value("#params-model") == "custom"
    fields = {"family": "gpt2", "d_model": "768", "n_layers": "13", "n_heads": "12", "d_ff": "3072", "vocab_size": "50257"}
    expected = cli_json(["params", "--model", api.custom_config_path(fields)])
    assert_shown_equals(shown(page, "params"), expected)
    assert expected["n_params"] == 124_439_808 + expected["n_params_per_layer"]
    before = updates(page, "params")
    page.select_option("#params-family", "llama")
    wait_for_answer(page, "params", before)
    assert not page.is_disabled("#params-tied") and not page.is_disabled("#params-n_kv_heads")


def split_step_and_layout(values: dict) -> tuple[dict, dict]:
    """Calculator 8 shows `trainledger step`'s numbers and, in its table, `trainledger layout`'s (layouts.*)."""
    layout_keys = ("layouts.", "considered", "fitting")
    layout = {k: v for k, v in values.items() if k.startswith(layout_keys)}
    return {k: v for k, v in values.items() if k not in layout}, layout


def test_step_time_and_layout(page):
    """Calculator 8: the step's breakdown (a stacked bar) and the layout table equal `trainledger step --json` and
    `trainledger layout --json`; "Use" on a row puts that layout in the step form, and the step then takes the
    time the table gave it."""
    press(page, "step", "#step-num-gpus-slider", "ArrowRight")  # 8 -> 16 H100
    assert page.input_value("#step-num-gpus") == "16"
    common = ["--model", "llama-2-7b", "--gpu", "h100-sxm", "--num-gpus", "16", "--global-batch-size", "32"]
    step_values, layout_values = split_step_and_layout(shown(page, "step"))
    expected = cli_json(["step", *common])
    assert_shown_equals(step_values, expected)
    assert sum(1 for path in step_values if path.startswith("breakdown.")) == len(expected["breakdown"])
    # the error bar of every time answer (issue 27): the range the most similar published runs were off by
    assert {"step_seconds_low", "step_seconds_high"} <= set(step_values)
    assert expected["interval_words"] in page.text_content("#calc-step .interval")
    # issue 41: the step lies in its range, in seconds and in tokens/s
    assert float(step_values["step_seconds_low"]) <= float(step_values["step_seconds"]) <= \
        float(step_values["step_seconds_high"])
    assert float(step_values["tokens_per_s_low"]) <= float(step_values["tokens_per_s"]) <= \
        float(step_values["tokens_per_s_high"])
    assert page.text_content("#calc-step .interval").startswith("expect ")
    layout = cli_json(["layout", *common, "--top", "5"])
    assert_shown_equals(layout_values, layout)
    assert sum(1 for path in layout_values if path.endswith(".step_seconds")) == len(layout["layouts"]) == 5
    launch = cli_json(["layout", *common, "--top", "5", "--launch", "torchrun"])["launch"]   # the text to copy
    for kind in ("torchrun", "slurm"):
        assert page.text_content(f"#calc-step pre.launch-text[data-launch={kind}]") == launch[kind]
    bars = page.eval_on_selector_all("#calc-step svg rect.part", "n => n.length")
    assert bars == sum(1 for v in expected["breakdown"].values() if v > 0)

    row = layout["layouts"][1]  # the second fastest, so that the form really changes
    before = updates(page, "step")
    page.click("#calc-step button.use-layout[data-rank='1']")
    wait_for_answer(page, "step", before)
    for key in ("tp", "pp", "interleave", "cp", "zero", "batch-size", "recompute"):
        assert page.input_value(f"#step-{key}") == str(row[key.replace('-', '_')]), key
    assert page.is_checked("#step-sp") == row["sp"]
    argv = shlex.split(page.text_content("#calc-step .command-line"))
    step_values, _ = split_step_and_layout(shown(page, "step"))
    assert_shown_equals(step_values, cli_json(argv[1:-1]))
    assert float(step_values["step_seconds"]) == row["step_seconds"] and float(step_values["mfu"]) == row["mfu"]
    screenshot(page, "step")


GEOMETRY = """svg => {
  const box = (n) => { const b = n.getBBox(); return {x: b.x, y: b.y, w: b.width, h: b.height}; };
  const view = svg.viewBox.baseVal;
  return {width: view.width, height: view.height,
          legend: [...svg.querySelectorAll("text.legend")].map((n) => Object.assign(box(n), {text: n.textContent})),
          labels: [...svg.querySelectorAll("text.bar-label")].map((n) => Object.assign(box(n), {text: n.textContent})),
          parts: [...svg.querySelectorAll("rect.part")].map(box)};
}"""


def test_step_chart_shows_every_legend_entry_and_no_overlapping_labels(browser, base_url):
    """Issue 31, item 5: the precision dropdown started blank (its CLI default is picked at run time), two of six
    legend entries (optimizer step, data-parallel communication) were cut off, and labels inside the bar overlapped.
    At 16 H100 and at 1 GPU (fewer parts): every legend entry lies inside the picture, every label inside the bar
    fits its part, and no two overlap. The formula says what the step is now: the longer of two timelines."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})   # a fresh page: no layout from "Use"
    page = context.new_page()
    page.goto(base_url)
    page.wait_for_selector("body[data-ready=true]", state="attached", timeout=30000)
    text = page.eval_on_selector("#step-precision", "s => s.options[s.selectedIndex].textContent")
    assert text == "default (amp-bf16)" and page.input_value("#step-precision") == ""
    formula = page.inner_text("#calc-step .formula")
    assert "longer of two timelines" in formula and "sum of its parts" not in formula
    for gpus in ("16", "1"):
        before = updates(page, "step")
        page.fill("#step-num-gpus", gpus)
        wait_for_answer(page, "step", before)
        geometry = page.eval_on_selector("#calc-step svg", GEOMETRY)
        assert len(geometry["legend"]) == len(geometry["parts"]) >= 5
        for entry in geometry["legend"]:
            assert entry["x"] >= 0 and entry["x"] + entry["w"] <= geometry["width"], entry
            assert entry["y"] >= 0 and entry["y"] + entry["h"] <= geometry["height"], entry
        for a, b in zip(geometry["legend"], geometry["legend"][1:]):       # same row: no overlap
            assert abs(a["y"] - b["y"]) > 1 or a["x"] + a["w"] <= b["x"], (a, b)
        labels = sorted(geometry["labels"], key=lambda n: n["x"])
        for a, b in zip(labels, labels[1:]):
            assert a["x"] + a["w"] <= b["x"], (a, b)
        for label in labels:
            assert any(p["x"] <= label["x"] and label["x"] + label["w"] <= p["x"] + p["w"] for p in geometry["parts"]), label
    screenshot(page, "step")
    context.close()


def test_plan_with_mfu_auto(page):
    """Calculator 1 with "MFU auto": `plan --mfu auto`, the MFU and the layout it names as the CLI gives them."""
    before = updates(page, "plan")
    page.select_option("#plan-model", "llama-2-7b")
    wait_for_answer(page, "plan", before)
    before = updates(page, "plan")
    page.fill("#plan-num-gpus", "8")  # a search over 8 GPUs takes a fraction of a second
    wait_for_answer(page, "plan", before)
    before = updates(page, "plan")
    page.check("#plan-mfu-auto")
    wait_for_answer(page, "plan", before)
    assert page.is_disabled("#plan-mfu")
    deadline = page.input_value("#plan-deadline")
    expected = cli_json(["plan", "--model", "llama-2-7b", "--num-gpus", page.input_value("#plan-num-gpus"), "--mfu", "auto",
                         *(["--deadline", deadline] if deadline else [])])
    values = shown(page, "plan")
    assert_shown_equals(values, expected)
    assert float(values["mfu"]) == expected["layout"]["mfu"] and "layout.step_seconds" in values
    # issue 41: the time to train lies in its range, shown in days and GPU-hours with the CLI's words
    assert float(values["train_days_low"]) <= float(values["train_days"]) <= float(values["train_days_high"])
    assert {"gpu_hours_low", "gpu_hours_high"} <= set(values)
    text = page.text_content("#calc-plan .interval")
    assert text.startswith("expect ") and " days" in text and expected["interval_words"] in text
    before = updates(page, "plan")
    page.uncheck("#plan-mfu-auto")
    wait_for_answer(page, "plan", before)
    assert not page.is_disabled("#plan-mfu") and "mfu" not in shown(page, "plan")
    before = updates(page, "plan")
    page.select_option("#plan-model", "")
    wait_for_answer(page, "plan", before)


def labels_of(page, calc) -> list[str]:
    return page.eval_on_selector_all(f"#calc-{calc} .results dt", "nodes => nodes.map(n => n.textContent.trim())")


# what a JSON key turned into words looks like: "mtbf seconds", "checkpoint bytes per s per node", "n params"
RAW_KEY = re.compile(r"_|\bmtbf\b|\bper s\b|\bseconds$|\bbytes$|^n |\bparams\b")


def test_every_label_is_human(page):
    """No panel shows a JSON key as its label ("mtbf seconds", "checkpoint bytes per s per node"): each has words and
    its value a unit. The plan's failure figures: the checkpoint bandwidth is a rate in B/s (as the CLI's assumptions
    print it), the interruptions a count without decimals, durations in days/h/min."""
    for calc in ("plan", "memory", "optimal", "step", "params", "fit", "mfu"):
        for label in labels_of(page, calc):
            assert not RAW_KEY.search(label.lower()), (calc, label)
    values = {n["path"]: n for n in page.eval_on_selector_all(
        "#calc-plan .results [data-path]", "ns => ns.map(n => ({path: n.dataset.path, text: n.textContent, raw: n.dataset.value}))")}
    bandwidth = values["checkpoint_bytes_per_s_per_node"]
    assert bandwidth["text"].endswith("GB/s") and float(bandwidth["text"].split()[0]) == pytest.approx(float(bandwidth["raw"]) / 1e9, rel=1e-2)
    interruptions = values["expected_interruptions"]
    assert interruptions["text"] == f"about {round(float(interruptions['raw'])):,}"
    assert values["mtbf_seconds"]["text"].endswith(("days", "h", "min"))
    assert values["goodput"]["text"].endswith("%")
    parts = page.eval_on_selector_all("#calc-step .results dt", "ns => ns.map(n => n.textContent)")
    assert "tensor-parallel communication" in parts and "tp comm" not in parts


def test_zero_dropdowns_are_filled(page):
    """Every option of every ZeRO select has words (the memory calculator's used to be blank)."""
    for select in ("#memory-zero", "#step-zero", "#fit-zero"):
        options = page.eval_on_selector_all(f"{select} option", "ns => ns.map(n => [n.value, n.textContent])")
        assert {value for value, _ in options} >= {"0", "1", "2", "3"}, select
        assert all(text.strip() for _, text in options), (select, options)
        selected = page.eval_on_selector(select, "s => s.options[s.selectedIndex].textContent")
        assert selected.strip(), select


def test_fit_calculator(page):
    """Calculator 9 equals `trainledger fit --json`: 8 H100 × the 79.18 GiB each reports / 16 B = 42.5B (the lecture's
    80e9 B gives 40B), then 16 GPUs, then a model's largest micro-batch, then a custom memory size that is not called
    an H100."""
    assert_shown_equals(shown(page, "fit"), cli_json(["fit"]))
    assert float(shown(page, "fit")["max_params"]) == 8 * 85_017_493_504 / 16
    press(page, "fit", "#fit-num-gpus-slider", "ArrowRight")                     # 8 -> 16 GPUs
    assert page.input_value("#fit-num-gpus") == "16"
    assert_shown_equals(shown(page, "fit"), cli_json(["fit", "--num-gpus", "16"]))
    before = updates(page, "fit")
    page.select_option("#fit-model", "gpt2")
    wait_for_answer(page, "fit", before)
    expected = cli_json(["fit", "--num-gpus", "16", "--model", "gpt2"])
    assert_shown_equals(shown(page, "fit"), expected)
    assert shown(page, "fit")["max_batch_size"] == str(expected["max_batch_size"])
    before = updates(page, "fit")
    page.fill("#fit-memory-per-gpu", "24GB")
    wait_for_answer(page, "fit", before)
    argv = shlex.split(page.text_content("#calc-fit .command-line"))[1:-1]    # the page also names its --gpu
    assert "--memory-per-gpu=24GB" in argv
    expected = cli_json(argv)
    assert_shown_equals(shown(page, "fit"), expected)
    assert expected["memory_per_gpu_bytes"] == 24e9 and expected["max_params"] == pytest.approx(16 * 24e9 / 16)
    device = page.inner_text("#calc-fit .results").split("\n")[2]      # the GPU's memory is not silently replaced
    assert device == f"on 16 × {expected['gpu_label']}" and "--memory-per-gpu" in device and "22.4 GiB" in device
    before = updates(page, "fit")
    page.fill("#fit-memory-per-gpu", "")
    wait_for_answer(page, "fit", before)
    screenshot(page, "fit")


def test_mfu_calculator(page):
    """Calculator 10 equals `trainledger mfu --json`, the predicted MFU and its layout included."""
    press(page, "mfu", "#mfu-tokens-per-s-per-gpu-slider", "ArrowRight")       # 3000 -> 10^3.49 tokens/s per GPU
    rate = page.input_value("#mfu-tokens-per-s-per-gpu")
    expected = cli_json(["mfu", "--model", "llama-3-8b", "--tokens-per-s-per-gpu", rate, "--num-gpus", "8"])
    values = shown(page, "mfu")
    assert_shown_equals(values, expected)
    assert float(values["mfu"]) == pytest.approx(expected["tokens_per_s_per_gpu"] * expected["model_flops_per_token"] /
                                                 expected["peak_flops_per_s"], rel=1e-12)     # PaLM App. B
    assert "predicted_layout.step_seconds" in values and float(values["predicted_mfu"]) == expected["predicted_mfu"]
    before = updates(page, "mfu")
    page.select_option("#mfu-model", "")                                          # a bare parameter count: 6·N
    wait_for_answer(page, "mfu", before)
    expected = cli_json(["mfu", "--params", "8B", "--tokens-per-s-per-gpu", rate, "--num-gpus", "8"])
    assert_shown_equals(shown(page, "mfu"), expected)
    assert expected["model_flops_per_token"] == 6 * 8e9
    screenshot(page, "mfu")


def test_step_points_to_a_faster_micro_batch(page):
    """gpt2 on 8 H100, global batch 64, micro-batch 1: the page shows `step`'s suggestion (micro-batch 8), the CLI's."""
    before = updates(page, "step")
    for selector, value in (("#step-num-gpus", "8"), ("#step-global-batch-size", "64"), ("#step-batch-size", "1"),
                            ("#step-tp", "1"), ("#step-pp", "1"), ("#step-interleave", "1"), ("#step-cp", "1")):
        page.fill(selector, value)           # (intermediate layouts may be invalid: only the final answer counts)
    page.select_option("#step-zero", "")
    page.select_option("#step-recompute", "none")
    page.select_option("#step-model", "gpt2")
    wait_for_answer(page, "step", before)
    argv = shlex.split(page.text_content("#calc-step .command-line"))
    expected = cli_json(argv[1:-1])
    assert expected["suggestion"] and "--batch-size 8" in expected["suggestion"]["changes"]
    values, _ = split_step_and_layout(shown(page, "step"))
    assert_shown_equals(values, expected)
    assert page.inner_text("#calc-step .suggestion").startswith("Faster with --batch-size 8")


def test_step_with_expert_tensor_parallel_and_a_dispatcher(browser, base_url):
    """Calculator 8's mixture-of-experts fields, typed in the form: Qwen3-30B-A3B on 8 H100 under Megatron-LM, tp 2
    with sp, ep 4, etp 1 (whole experts per GPU beside a split attention: MoE Parallel Folding) and the DeepEP
    dispatcher. The page shows `step --json` for those flags, which differs from etp = tp and from alltoall, and its
    table is `layout --framework megatron` (the one new field the search takes). etp 5 (no divisor of the experts'
    d_ff 768) shows the CLI's line beside the field; so does an unknown dispatcher arriving in a shared address."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})   # a fresh page: the form's defaults
    page = context.new_page()
    page.goto(base_url)
    page.wait_for_selector("body[data-ready=true]", state="attached", timeout=30000)
    # issue 41: blank = decided by the schedule (alltoall; deepep with --schedule dualpipe)
    assert page.input_value("#step-ep-dispatcher") == "" and page.input_value("#step-etp") == ""
    assert page.get_attribute("#step-etp", "placeholder") == "= tp"
    before = updates(page, "step")
    page.select_option("#step-model", "qwen3-30b-a3b")
    page.select_option("#step-framework", "megatron")
    page.fill("#step-tp", "2")
    page.check("#step-sp")
    page.fill("#step-ep", "4")
    page.fill("#step-etp", "1")
    page.select_option("#step-ep-dispatcher", "deepep")
    wait_for_answer(page, "step", before)
    common = ["--model", "qwen3-30b-a3b", "--gpu", "h100-sxm", "--num-gpus", "8", "--global-batch-size", "32",
              "--framework", "megatron"]
    argv = ["step", *common, "--tp", "2", "--sp", "--ep", "4", "--etp", "1", "--ep-dispatcher", "deepep"]
    expected = cli_json(argv)
    step_values, layout_values = split_step_and_layout(shown(page, "step"))
    assert_shown_equals(step_values, expected)
    line = shlex.split(page.text_content("#calc-step .command-line"))
    assert "--etp=1" in line and "--ep-dispatcher=deepep" in line and "--framework=megatron" in line
    assert_shown_equals(step_values, cli_json(line[1:-1]))
    without_etp = cli_json([a for a in argv if a not in ("--etp", "1")])
    alltoall = cli_json(argv[:-2])
    assert float(step_values["step_seconds"]) != without_etp["step_seconds"]
    assert float(step_values["step_seconds"]) != alltoall["step_seconds"]
    assert "deepep dispatcher" in page.text_content("#calc-step .assumptions")
    layout = cli_json(["layout", *common, "--top", "5"])
    assert_shown_equals(layout_values, layout)
    assert sum(1 for path in layout_values if path.endswith(".etp")) == len(layout["layouts"])

    before = updates(page, "step")
    page.fill("#step-etp", "5")
    wait_for_answer(page, "step", before, state="error")
    with pytest.raises(TrainledgerError) as info:
        cli.compute([*argv[:argv.index("--etp") + 1], "5", *argv[argv.index("--etp") + 2:]])
    assert page.inner_text("#step-etp-error") == str(info.value) and "must divide" in str(info.value)
    assert page.get_attribute("#step-etp", "aria-invalid") == "true"
    before = updates(page, "step")
    page.fill("#step-etp", "1")
    wait_for_answer(page, "step", before)
    assert page.inner_text("#step-etp-error") == ""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.locator("#calc-step").screenshot(path=str(SCREENSHOTS / "step-experts.png"))
    # "Use" copies a row's etp too (blank where it equals the row's tp): the step then takes the row's time
    before = updates(page, "step")
    page.select_option("#step-ep-dispatcher", "alltoall")     # the search ran with the default dispatcher
    page.fill("#step-etp", "")
    wait_for_answer(page, "step", before)
    row = layout["layouts"][0]
    assert row["etp"] != row["tp"]                              # Megatron's folding: the search found it faster
    before = updates(page, "step")
    page.click("#calc-step button.use-layout[data-rank='0']")
    wait_for_answer(page, "step", before)
    assert page.input_value("#step-etp") == ("" if row["etp"] == row["tp"] else str(row["etp"]))
    step_values, _ = split_step_and_layout(shown(page, "step"))
    assert float(step_values["step_seconds"]) == row["step_seconds"] and float(step_values["mfu"]) == row["mfu"]

    shared = context.new_page()   # a shared address with a dispatcher the select does not offer
    shared.goto(base_url + "#step.model=qwen3-30b-a3b&step.ep=8&step.ep-dispatcher=nccl")
    shared.wait_for_selector("body[data-ready=true]", state="attached", timeout=30000)
    assert shared.get_attribute("#calc-step", "data-state") == "error"
    with pytest.raises(TrainledgerError) as info:
        cli.compute(["step", "--model", "qwen3-30b-a3b", "--gpu", "h100-sxm", "--num-gpus", "8", "--global-batch-size",
                     "32", "--ep", "8", "--ep-dispatcher", "nccl"])
    assert shared.inner_text("#step-ep-dispatcher-error") == str(info.value)
    assert str(info.value).startswith("--ep-dispatcher must be one of alltoall, deepep, hybridep")
    context.close()


def test_step_names_the_flag_the_cli_names(browser, base_url):
    """tp 3 on llama-2-7b (32 heads) over 8 GPUs: the CLI's own line, naming --tp (the heads it must divide), stands
    beside the tp field, not beside the GPU count (issue 41); a tp that divides the heads answers again."""
    context, page, errors = fresh_page(browser, base_url)
    before = updates(page, "step")
    page.fill("#step-tp", "3")
    wait_for_answer(page, "step", before, state="error")
    with pytest.raises(TrainledgerError) as info:
        cli.compute(["step", "--model", "llama-2-7b", "--gpu", "h100-sxm", "--num-gpus", "8", "--tp", "3"])
    assert str(info.value).startswith("--tp 3 must divide n_heads=32") and info.value.flag == "--tp"
    assert page.inner_text("#step-tp-error") == str(info.value)
    assert page.get_attribute("#step-tp", "aria-invalid") == "true"
    assert page.inner_text("#step-num-gpus-error") == ""
    before = updates(page, "step")
    page.fill("#step-tp", "2")
    wait_for_answer(page, "step", before)
    assert page.inner_text("#step-tp-error") == "" and not errors
    context.close()


# Calculator 8's fields when calculators.js listed them by hand (model, GPU, GPUs and 26 run settings)
STEP_FORM_FIELDS_BEFORE_THE_TABLE = 29
# Its fieldsets by the run group of their fields (calculators.js FIELDSETS); None: the top of the form
STEP_FIELDSETS = {"batch": None, "numerics": None, "layout": "layout of the step (the table's Use button fills it)",
                  "levers": "layout of the step (the table's Use button fills it)",
                  "layout.experts": "mixture of experts: routing and dispatch (MoE models)",
                  "kernels": "framework, kernels and overlaps"}
FORM_FIELDS = """f => [...f.querySelectorAll('.field')].map(d => {
  const input = d.querySelector('input:not([type=range]), select'), slider = d.querySelector('input[type=range]');
  const box = d.closest('fieldset');
  return {param: d.dataset.param, label: d.querySelector('label').textContent, tag: input.tagName.toLowerCase(),
          type: input.type, placeholder: input.placeholder || null, value: input.value,
          slider: slider ? [Number(slider.min), Number(slider.max)] : null,
          legend: box ? box.querySelector('legend').textContent : null,
          options: input.tagName === 'SELECT' ? [...input.options].map(o => o.value) : null};
})"""


def fresh_page(browser, base_url):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(base_url)
    page.wait_for_selector("body[data-ready=true]", state="attached", timeout=30000)
    return context, page, errors


def test_the_step_form_is_made_from_the_schema(browser, base_url):
    """Calculator 8's run settings are one field per flag of `step` in /api/schema with a label (specs/run.py's
    table), in the table's order: a count a slider (over powers of two where the table's `web` hint says so, with
    its range), a choice or ZeRO stage a select of its choices, an on/off switch a checkbox, or a select of default /
    on / off where its default is decided from the rest of the run, a fraction or factor a float slider; each in the
    fieldset of its group, with the table's placeholder. The form has no more fields than the hand-written one."""
    context, page, errors = fresh_page(browser, base_url)
    flags = [f for f in api.schema()["step"]["flags"] if f.get("label")]
    form = page.eval_on_selector("#calc-step form", FORM_FIELDS)
    assert sorted(f["param"] for f in form) == sorted(["model", "gpu", "num-gpus", *(f["param"] for f in flags)])
    for legend in set(STEP_FIELDSETS.values()):           # in each fieldset, the table's order
        assert [f["param"] for f in form[3:] if f["legend"] == legend] == \
            [f["param"] for f in flags if STEP_FIELDSETS[f["group"]] == legend], legend
    assert len(form) <= STEP_FORM_FIELDS_BEFORE_THE_TABLE and len(flags) == 26
    fields = {f["param"]: f for f in form}
    for flag in flags:
        field, kind, web = fields[flag["param"]], flag["kind"].rstrip("?"), flag["web"]
        assert field["label"] == flag["label"] and field["legend"] == STEP_FIELDSETS[flag["group"]], flag["param"]
        if kind == "switch" and flag["default"] is None:
            assert field["tag"] == "select" and field["options"] == ["", "true", "false"], flag["param"]
        elif kind in ("flag", "switch"):
            assert field["type"] == "checkbox", flag["param"]
        elif kind in ("choice", "zero"):
            assert field["tag"] == "select" and set(flag["choices"]) <= set(field["options"]), flag["param"]
        else:
            assert field["type"] == "text" and field["slider"], flag["param"]
            if "min" in web:
                assert field["slider"] == [web["min"], web["max"]], flag["param"]
        if "placeholder" in web and field["tag"] == "input":
            assert field["placeholder"] == web["placeholder"], flag["param"]
    assert fields["etp"]["placeholder"] == "= tp" and fields["capacity-factor"]["placeholder"] == "dropless"
    assert fields["tp"]["slider"] == [0, 3] and fields["global-batch-size"]["value"] == "32"
    assert page.eval_on_selector("#step-mtp", "s => s.options[0].textContent") == "default: with Megatron only"
    assert page.eval_on_selector("#step-pp-overlap", "s => s.options[2].textContent") == "off (--no-pp-overlap)"
    assert page.get_attribute("#calc-step", "data-state") == "ok" and not errors
    context.close()


def test_a_setting_added_to_the_table_is_a_field_of_the_step_form(my_knob, browser, base_url):
    """The fixture adds one field to specs/run.py's Kernels and nothing else: the step form has a field for it, with
    its label, a count's slider, in the kernels' fieldset, at its default (so not sent: the answer is the same)."""
    context, page, errors = fresh_page(browser, base_url)
    knob = {f["param"]: f for f in page.eval_on_selector("#calc-step form", FORM_FIELDS)}["my-knob"]
    assert (knob["label"], knob["legend"], knob["type"], knob["slider"], knob["value"]) == \
        ("My knob", STEP_FIELDSETS["kernels"], "text", [1, 8], "1")
    page.wait_for_function("document.querySelector('#calc-step').dataset.state === 'ok'", timeout=15000)
    assert "--my-knob" not in page.text_content("#calc-step .command-line") and not errors
    context.close()


def test_finetune_ladder_calculator(page):
    """The fine-tuning calculator draws `fit --model llama-3.1-8b --gpu rtx-4090 --seq-len 2048 --batch-size 2`'s
    ladder: one bar per rung, fitting rungs marked so and the others not, the fastest that fits named; a smaller
    batch moves with the CLI."""
    page.click("a[href='#calc-finetune']")
    page.wait_for_function("document.querySelector('#calc-finetune').dataset.state === 'ok'", timeout=30000)
    expected = cli_json(["fit", "--model", "llama-3.1-8b", "--gpu", "rtx-4090", "--num-gpus", "1", "--seq-len", "2048",
                         "--batch-size", "2", "--lora-rank", "8"])
    bars = page.eval_on_selector_all("#calc-finetune svg rect.rung",
                                     "nodes => nodes.map(n => [n.dataset.key, n.getAttribute('class')])")
    assert [key for key, _ in bars] == [r["key"] for r in expected["ladder"]]
    for (key, cls), rung in zip(bars, expected["ladder"]):
        assert ("fits" in cls.split()) == bool(rung["fits"]) and ("oom" in cls.split()) == (not rung["fits"] and not rung["error"]), key
    assert any("oom" in cls for _, cls in bars) and any("fits" in cls.split() for _, cls in bars)
    best = next(r for r in expected["ladder"] if r["key"] == expected["fastest_fitting"])
    assert shown(page, "finetune")["fastest_fitting"] == best["label"]
    press(page, "finetune", "#finetune-batch-size-slider", "ArrowLeft")         # 2 -> 1 sequence
    assert page.input_value("#finetune-batch-size") == "1"
    expected = cli_json(["fit", "--model", "llama-3.1-8b", "--gpu", "rtx-4090", "--num-gpus", "1", "--seq-len", "2048",
                         "--batch-size", "1", "--lora-rank", "8"])
    fits = page.eval_on_selector_all("#calc-finetune svg rect.rung", "nodes => nodes.map(n => n.classList.contains('fits'))")
    assert fits == [bool(r["fits"]) for r in expected["ladder"]]
    screenshot(page, "finetune")
