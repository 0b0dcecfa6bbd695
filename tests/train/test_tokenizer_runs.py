"""Training with real tokenizers and datasets: .jsonl and .parquet end to end with a BPE of 2,048 tokens, the
model's vocabulary following the tokenizer (--vocab-multiple padding counted), vocabulary mismatches refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from train_helpers import SMALL, env, train_in_process

from trainledger.cli.main import main
from trainledger.data import load_tokenizer, read_header, run_tokenizer

import pyarrow as pa
import pyarrow.parquet as pq

RUN = [*SMALL, "--steps", "3", "--json"]


@pytest.fixture(scope="module")
def docs(tmp_path_factory):
    """A .jsonl and a .parquet of the same ~250 KB of documents (standard-library modules), and a byte-level BPE
    of 2,048 tokens trained on the .jsonl by `trainledger tokenize --train-bpe` (saved beside docs.tokens)."""
    from trainledger.train.corpus import stdlib_files
    root = tmp_path_factory.mktemp("docs")
    texts = [p.read_bytes().decode("utf-8", errors="replace") for p in stdlib_files(250_000)]
    with open(root / "docs.jsonl", "w") as f:
        for i, text in enumerate(texts):
            f.write(json.dumps({"id": i, "content": text}) + "\n")
    pq.write_table(pa.table({"id": list(range(len(texts))), "content": texts}), root / "docs.parquet", row_group_size=16)
    result = subprocess.run([sys.executable, "-m", "trainledger.cli.main", "tokenize", str(root / "docs.jsonl"),
                             str(root / "docs.tokens"), "--train-bpe", "2048", "--text-column", "content", "--json"],
                            capture_output=True, text=True, timeout=300, env=env())
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["vocab_size"] == 2048 and report["tokenizer_path"] == str(root / "tokenizer.json")
    return {"root": root, "texts": texts, "tokenizer": root / "tokenizer.json", "tokens": root / "docs.tokens"}


def _summary(out: str) -> dict:
    return json.loads(out)


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_a_dataset_trains_end_to_end_with_a_bpe_of_2048(docs, tmp_path, capsys, kind):
    out = tmp_path / "run"
    status, stdout, err = train_in_process(capsys, "--dataset", docs["root"] / f"docs.{kind}", "--text-column", "content",
                                           "--tokenizer", docs["tokenizer"], "--out-dir", out, *RUN)
    assert status == 0, err
    summary = _summary(stdout)
    assert summary["steps"] == 3 and np.isfinite(summary["final_loss"])
    assert summary["tokenizer_vocab_size"] == summary["model_vocab_size"] == 2048
    assert summary["held_out_tokens"] > 0 and summary["held_out_start"] + summary["held_out_tokens"] == summary["n_tokens"]
    # the cache holds the same tokens as `tokenize` wrote from the .jsonl: both formats, one tokenization
    cached = read_header(summary["data_path"])
    assert cached["n_tokens"] == read_header(docs["tokens"])["n_tokens"] == summary["n_tokens"]
    # the run recorded its tokenizer where generate/export look
    tokenizer = load_tokenizer(docs["tokenizer"])
    assert run_tokenizer(out).sha256 == tokenizer.sha256
    import torch
    state = torch.load(next((out / "checkpoints").glob("step_*")) / "trainer.pt", weights_only=True)
    assert state["config"]["tokenizer_sha256"] == tokenizer.sha256 and state["config"]["model_vocab_size"] == 2048
    embedding = [v for k, v in state["model"].items() if v.ndim == 2 and v.shape[0] == 2048]
    assert embedding, "the model's embedding has the tokenizer's 2,048 rows"
    # the text trained on decodes back to the documents
    from trainledger.data import open_tokens
    ids = np.asarray(open_tokens(summary["data_path"]))
    assert tokenizer.decode(ids[:2000]).startswith(docs["texts"][0][:300])
    # generate prints text from the checkpoint through the run's BPE; export ships that tokenizer beside the weights
    capsys.readouterr()
    assert main(["generate", str(out), "--prompt", "def ", "--max-new-tokens", "8", "--no-predict", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["tokenizer"] == tokenizer.name and len(result["tokens"]) == 8
    assert result["text"] == tokenizer.decode(result["tokens"]) and result["prompt_tokens"] == list(tokenizer.encode("def "))
    assert main(["export", str(out), str(tmp_path / "hf")]) == 0
    assert load_tokenizer(tmp_path / "hf" / "tokenizer.json").sha256 == tokenizer.sha256


def test_data_finds_the_tokenizer_beside_the_token_file(docs, tmp_path, capsys):
    status, stdout, err = train_in_process(capsys, "--data", docs["tokens"], "--out-dir", tmp_path / "run", *RUN)
    assert status == 0, err
    summary = _summary(stdout)
    assert summary["model_vocab_size"] == 2048 and summary["tokenizer_sha256"] == load_tokenizer(docs["tokenizer"]).sha256
    assert (tmp_path / "run" / "tokenizer.json").is_file()


def test_a_token_file_of_another_vocabulary_is_refused_exit_2(docs, tmp_path, capsys):
    from trainledger.data.bpe import train_bpe
    other = train_bpe(docs["texts"][:3], 400)
    other.save(tmp_path / "other" / "tokenizer.json")
    status = main(["train", "--data", str(docs["tokens"]), "--tokenizer", str(tmp_path / "other" / "tokenizer.json"),
                   "--out-dir", str(tmp_path / "run"), *RUN])
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1
    assert "vocabulary 2,048" in err and "vocabulary 400" in err and "--tokenizer" in err
    # bytes against a 2,048-token file: refused too
    assert main(["train", "--data", str(docs["tokens"]), "--tokenizer", "bytes", "--out-dir", str(tmp_path / "r2"), *RUN]) == 2


def test_vocab_multiple_pads_and_counts_the_cost_as_measured(docs, tmp_path, capsys):
    from trainledger.data.bpe import train_bpe
    tokenizer = train_bpe(docs["texts"], 2000)
    tokenizer.save(tmp_path / "tok" / "tokenizer.json")
    status, stdout, err = train_in_process(capsys, "--dataset", docs["root"] / "docs.parquet", "--text-column", "content",
                                           "--tokenizer", tmp_path / "tok" / "tokenizer.json", "--vocab-multiple", "64",
                                           "--out-dir", tmp_path / "run", *RUN)
    assert status == 0, err
    summary = _summary(stdout)
    assert (summary["tokenizer_vocab_size"], summary["model_vocab_size"]) == (2000, 2048)    # 2000 -> 32 × 64
    # the parameters the padding adds, against the models' own numel on the meta device
    import torch
    from dataclasses import replace
    from trainledger.models import Transformer
    from trainledger.specs import get_model
    with torch.device("meta"):
        sizes = {v: sum(p.numel() for p in Transformer(replace(get_model("tiny"), vocab_size=v)).parameters())
                 for v in (2000, 2048)}
    assert summary["vocab_padding_params"] == sizes[2048] - sizes[2000]
    from trainledger.account.counting.flops import flops_per_step
    flops = {v: flops_per_step(replace(get_model("tiny"), vocab_size=v), 4, 16)["train_flops_per_step"] for v in (2000, 2048)}
    # LM head: 2·d_model FLOPs per token and row forward, ×3 with backward, for 4 × 16 tokens
    assert summary["vocab_padding_train_flops_per_step"] == pytest.approx(flops[2048] - flops[2000]) == 6 * 128 * 48 * 64


def test_resume_refuses_another_tokenizer(docs, tmp_path, capsys):
    from trainledger.data.bpe import train_bpe
    text = tmp_path / "book.txt"
    text.write_text("".join(docs["texts"][:6]))
    first = ["--text", text, "--out-dir", tmp_path / "run", *SMALL, "--steps", "2"]
    status, _, err = train_in_process(capsys, *first, "--tokenizer", docs["tokenizer"])
    assert status == 0, err
    other = train_bpe(docs["texts"][:6], 2048)
    other.save(tmp_path / "other" / "tokenizer.json")
    status, _, err = train_in_process(capsys, *first[:4], "--resume", "--steps", "4", "--tokenizer",
                                      tmp_path / "other" / "tokenizer.json")
    assert status == 2 and "cannot change its tokenizer" in err and len(err.strip().splitlines()) == 1
    # --resume alone takes the checkpoint's tokenizer and continues
    status, _, err = train_in_process(capsys, "--out-dir", tmp_path / "run", "--resume", "--steps", "3", "--quiet")
    assert status == 0, err


def test_cruncher_refuses_tokenizer_flags(capsys, tmp_path):
    assert main(["train", "--model", "cruncher", "--tokenizer", "bytes", "--out-dir", str(tmp_path)]) == 2
    assert "without a vocabulary" in capsys.readouterr().err


def test_text_and_dataset_flags_are_checked_against_the_file(docs, tmp_path, capsys):
    assert main(["train", "--text", str(docs["root"] / "docs.parquet"), "--out-dir", str(tmp_path), *RUN]) == 2
    assert "--dataset" in capsys.readouterr().err
    (tmp_path / "a.txt").write_text("plain text\n")
    assert main(["train", "--dataset", str(tmp_path / "a.txt"), "--out-dir", str(tmp_path), *RUN]) == 2
    assert "is not a dataset" in capsys.readouterr().err
    assert main(["train", "--dataset", str(docs["root"] / "docs.parquet"), "--out-dir", str(tmp_path), *RUN]) == 2
    assert "has no column 'text' (--text-column); its columns: id, content" in capsys.readouterr().err


@pytest.mark.timeout(120)
@pytest.mark.parametrize("flag, make", [
    ("--text", lambda d: os.mkfifo(d / "f.txt") or d / "f.txt"),
    ("--text", lambda d: "/dev/zero"),
    ("--text", lambda d: d),
    ("--dataset", lambda d: os.mkfifo(d / "f.jsonl") or d / "f.jsonl"),
    ("--dataset", lambda d: "/dev/zero"),
    ("--tokenizer", lambda d: os.mkfifo(d / "tokenizer.json") or d / "tokenizer.json"),
    ("--tokenizer", lambda d: "/dev/zero"),
    ("--tokenizer", lambda d: (d / "t.json").write_text("{corrupt") and d / "t.json"),
], ids=["text-fifo", "text-dev-zero", "text-dir", "dataset-fifo", "dataset-dev-zero", "tokenizer-fifo",
        "tokenizer-dev-zero", "tokenizer-corrupt"])
def test_bad_inputs_to_train_are_one_line_exit_2_without_hanging(tmp_path, capsys, flag, make):
    target = make(tmp_path)
    status = main(["train", flag, str(target), "--out-dir", str(tmp_path / "run"), *RUN])
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert flag in err
