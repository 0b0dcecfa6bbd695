"""`trainledger dtypes`: a JSON list of records computed from bit layouts, and the table."""

import json

from trainledger.cli.main import main


def test_json_records(capsys):
    assert main(["dtypes", "--json"]) == 0
    records = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert records["fp16"]["max"] == 65504 and records["fp16"]["bytes"] == 2
    assert records["fp8-e4m3"]["max"] == 448 and records["fp8-e5m2"]["max"] == 57344
    assert records["bf16"]["exponent_bits"] == 8 and records["bf16"]["mantissa_bits"] == 7
    assert records["int4"]["bytes"] == 0.5
    assert records["fp32"]["smallest_subnormal"] == 2.0**-149


def test_table(capsys):
    assert main(["dtypes"]) == 0
    out = capsys.readouterr().out
    assert "65504" in out and "57344" in out and "448" in out and "bfloat16" in out
