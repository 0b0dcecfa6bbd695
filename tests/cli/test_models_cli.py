"""`trainledger models`: a JSON list of records, one per preset, and the table."""

import json

from trainledger.cli.main import main
from trainledger.specs import PRESETS


def test_json_records(capsys):
    assert main(["models", "--json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert isinstance(records, list) and [r["name"] for r in records] == list(PRESETS)
    by_name = {r["name"]: r for r in records}
    gpt2 = by_name["gpt2"]
    assert (gpt2["n_params"], gpt2["d_model"], gpt2["n_layers"], gpt2["n_heads"], gpt2["n_kv_heads"],
            gpt2["d_ff"], gpt2["vocab_size"], gpt2["max_seq_len"]) == (124_439_808, 768, 12, 12, 12, 3072, 50257, 1024)
    assert by_name["llama-2-70b"]["n_kv_heads"] == 8 and by_name["llama-2-70b"]["n_params"] == 68_976_648_192
    assert by_name["cruncher"]["n_params"] == 8256 and by_name["cruncher"]["kind"] == "cruncher"
    assert by_name["gpt3-13b"]["d_head"] == 128
    assert all(r["source"] for r in records)
    assert "gpt3-xl" in by_name["gpt3-1.3b"]["aliases"]


def test_table(capsys):
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert "llama-3.1-405b" in out and "406B" in out and "12.9B active" in out
