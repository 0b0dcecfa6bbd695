"""`trainledger tokenize`: writes a token file and reports count, bytes and time; errors exit 2 in one line."""

import json
import subprocess
import sys

import numpy as np

from trainledger.cli import main as cli_main
from trainledger.data import open_tokens, read_header


def test_json_reports_count_bytes_and_time(tmp_path, capsys):
    text = "to be or not to be — ça va\n" * 40
    (tmp_path / "in.txt").write_text(text, encoding="utf-8")
    out = tmp_path / "out.tokens"
    assert cli_main.main(["tokenize", str(tmp_path / "in.txt"), str(out), "--dtype", "uint8", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    n_bytes = len(text.encode("utf-8"))
    assert result["n_tokens"] == result["input_bytes"] == n_bytes
    assert result["output_bytes"] == out.stat().st_size == 128 + n_bytes
    assert result["dtype"] == "uint8" and result["seconds"] > 0
    assert read_header(out)["n_tokens"] == n_bytes
    np.testing.assert_array_equal(open_tokens(out), np.frombuffer(text.encode("utf-8"), np.uint8))


def test_table_output(tmp_path, capsys):
    (tmp_path / "in.txt").write_text("hello\n")
    assert cli_main.main(["tokenize", str(tmp_path / "in.txt"), str(tmp_path / "o.tokens")]) == 0
    out = capsys.readouterr().out
    assert "tokens" in out and "uint16" in out


def test_missing_input_is_one_line_exit_2(tmp_path, capsys):
    assert cli_main.main(["tokenize", str(tmp_path / "missing.txt"), str(tmp_path / "o.tokens")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and err.count("\n") == 1 and "does not exist" in err


def test_bad_dtype_flag_exits_2(tmp_path, capsys):
    (tmp_path / "in.txt").write_text("hello\n")
    assert cli_main.main(["tokenize", str(tmp_path / "in.txt"), str(tmp_path / "o.tokens"), "--dtype", "float32"]) == 2
    assert "--dtype" in capsys.readouterr().err


def test_command_module_does_not_import_torch():
    code = "import sys, trainledger.cli.tokenize, trainledger.data; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_fractional_chunk_size_is_an_error_not_an_empty_file(tmp_path, capsys):
    # int(0.5) = 0 bytes per read would end the stream at once and write 0 tokens
    (tmp_path / "in.txt").write_text("hello\n")
    for size in ("0.5", "1.5"):
        assert cli_main.main(["tokenize", str(tmp_path / "in.txt"), str(tmp_path / "o.tokens"),
                              "--chunk-size", size]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--chunk-size" in err
    assert not (tmp_path / "o.tokens").exists()
    assert cli_main.main(["tokenize", str(tmp_path / "in.txt"), str(tmp_path / "o.tokens"), "--chunk-size", "2",
                          "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["n_tokens"] == 6


def test_directory_arguments_are_one_line_errors(tmp_path, capsys):
    (tmp_path / "in.txt").write_text("hello\n")
    assert cli_main.main(["tokenize", str(tmp_path), str(tmp_path / "o.tokens")]) == 2
    assert "(INPUT)" in capsys.readouterr().err
    assert cli_main.main(["tokenize", str(tmp_path / "in.txt"), str(tmp_path)]) == 2
    assert "OUTPUT.tokens" in capsys.readouterr().err


def test_train_bpe_saves_the_tokenizer_beside_and_refuses_to_replace_another(tmp_path, capsys):
    from trainledger.data import load_tokenizer
    text = "".join(f"line {i}: the quick brown fox jumps over the lazy dog {i * 7}\n" for i in range(3000))
    (tmp_path / "in.txt").write_text(text)
    (tmp_path / "out").mkdir()
    args = ["tokenize", str(tmp_path / "in.txt"), str(tmp_path / "out" / "a.tokens"), "--train-bpe", "400", "--json"]
    assert cli_main.main(args) == 0
    result = json.loads(capsys.readouterr().out)
    tokenizer = load_tokenizer(tmp_path / "out" / "tokenizer.json")
    assert result["vocab_size"] == tokenizer.vocab_size == 400 and result["tokenizer_sha256"] == tokenizer.sha256
    np.testing.assert_array_equal(open_tokens(tmp_path / "out" / "a.tokens"), tokenizer.encode(text))
    assert result["bytes_per_s"] > 0 and result["n_tokens"] < len(text) / 2
    assert cli_main.main(args) == 0                  # the same BPE again: the same tokenizer.json, kept
    capsys.readouterr()
    other = ["tokenize", str(tmp_path / "in.txt"), str(tmp_path / "out" / "b.tokens"), "--train-bpe", "300"]
    assert cli_main.main(other) == 2
    assert "exists and is another tokenizer" in capsys.readouterr().err
    assert load_tokenizer(tmp_path / "out" / "tokenizer.json").sha256 == tokenizer.sha256


def test_output_that_is_a_device_is_refused_not_replaced(tmp_path, capsys):
    (tmp_path / "in.txt").write_text("hello\n")
    assert cli_main.main(["tokenize", str(tmp_path / "in.txt"), "/dev/null"]) == 2
    assert "not a regular file" in capsys.readouterr().err
    import os
    import stat
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
