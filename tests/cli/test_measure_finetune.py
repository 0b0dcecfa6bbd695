"""`measure --finetune`: predicted vs measured memory of a fine-tuning step on real CPU tensors, by category."""

import json

import pytest

from trainledger.cli.main import main

pytest.importorskip("torchao", reason="NF4 and 8-bit states are torchao's")
TINY = ["measure", "--model", "tiny", "--device", "cpu", "--precision", "fp32", "--batch-size", "4", "--seq-len", "64"]


@pytest.mark.parametrize("flags", [["--finetune", "lora", "--activation-offload"],
                                   ["--finetune", "qlora", "--optimizer-in-backward"],
                                   ["--finetune", "full", "--chunked-loss", "4"]])
def test_each_category_within_two_percent(flags, capsys):
    assert main([*TINY, *flags, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["measured"]["trainable_params"] == result["predicted"]["trainable_params"] > 0
    for key, error in result["relative_error"].items():
        assert error is None or abs(error) <= 0.022, (key, error)
    if "--activation-offload" in flags:
        assert result["measured"]["host_bytes"] > 0


def test_human_output_names_the_run(capsys):
    assert main([*TINY, "--finetune", "qlora"]) == 0
    out = capsys.readouterr().out
    assert "--finetune qlora (nf4-dq)" in out and "trainable parameters" in out and "peak of a later step" in out


@pytest.mark.parametrize("flags, words", [
    (["--device", "fake"], "--device cpu or cuda"),
    (["--precision", "amp-bf16"], "--precision fp32 or --precision bf16"),
    (["--lora-rank", "1000"], "--lora-rank"),
    (["--lora-targets", "q,zz"], "--lora-targets"),
])
def test_bad_input_is_one_line(flags, words, capsys):
    assert main([*TINY, "--finetune", "lora", *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err, err
