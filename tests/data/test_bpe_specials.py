"""Special tokens and GPT-2's vocab.json + merges.txt (issue 31, item 7): BPE training never learns a separator as
text, --special-token adds tokens that are one id each (tokenize, train, .tiktoken files), and a vocab.json +
merges.txt pair encodes as tiktoken does with the same ranks (tiktoken: an independent implementation)."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import tiktoken            # the test extras: an independent implementation of byte-level BPE encoding
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from trainledger.cli.main import main
from trainledger.data import load_tokenizer, read_header, tokenize_file
from trainledger.data.bpe import bytes_to_unicode, split_on_specials, train_bpe
from trainledger.errors import TrainledgerError

EOT = "<|endoftext|>"
# tiktoken 0.14's tiktoken_ext/openai_public.py pattern of gpt2 / r50k_base (GPT-2's encoder.py regex)
R50K = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""


@pytest.fixture(scope="module")
def documents() -> list[str]:
    """~2,000 short stories from a small vocabulary: <|endoftext|> between them is the most frequent string."""
    rng = random.Random(0)
    words = "the cat sat on a mat and then ran far away from home because it was late".split()
    return [" ".join(rng.choice(words) for _ in range(rng.randint(5, 40))) + "." for _ in range(2000)]


def library_bpe(texts, vocab_size, specials=(EOT,)):
    """The library's own byte-level BPE trainer, fed `texts` as they are (what --train-bpe did before)."""
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(specials), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator(texts, trainer)
    return backend.get_vocab(with_added_tokens=False)


def separator_pieces(vocab) -> list[str]:
    """Learned entries (merges, not bytes) holding a piece of <|endoftext|>: '<|', '|>', 'endoftext', ..."""
    return sorted(t for t in vocab if len(t) > 1 and t != EOT and any(p in t for p in ("<|", "|>", "endof", "oftext")))


def test_training_text_is_split_on_the_separator_before_pairs_are_counted(documents):
    """One text with <|endoftext|> between the documents trains the same tokenizer as the documents one by one; fed
    unsplit, the library learns pieces of the separator (the issue: 9 such entries on a 5 MB story corpus)."""
    joined = EOT.join(documents)
    assert separator_pieces(library_bpe([joined], 400))                           # the bug this prevents
    ours = train_bpe([joined], 400)
    assert not separator_pieces(ours.backend.get_vocab(with_added_tokens=False))
    assert ours.sha256 == train_bpe(documents, 400).sha256
    assert ours.encode(EOT, allowed_special="all").tolist() == [0] and ours.decode(ours.encode(joined)) == joined
    assert len(ours.encode(EOT)) > 1                  # not allowed (issue 40): the string is ordinary text


def test_split_on_specials_drops_them_and_keeps_the_rest():
    pieces = list(split_on_specials(["a<|endoftext|>b<|im_end|><|endoftext|>c", "plain"], [EOT, "<|im_end|>"]))
    assert pieces == ["a", "b", "c", "plain"]


def test_train_bpe_takes_more_special_tokens(documents):
    specials = ["<|im_start|>", "<|im_end|>"]
    text = [f"<|im_start|>{d}<|im_end|>" for d in documents]
    bpe = train_bpe(text, 400, special_tokens=specials)
    assert bpe.encode("<|im_start|><|im_end|><|endoftext|>", allowed_special="all").tolist() == [1, 2, 0]   # adjacent
    assert bpe.encode("<|im_start|><|im_end|>").tolist() == [1, 2]    # the ones asked for are allowed by default
    assert not any("im_" in t for t in bpe.backend.get_vocab(with_added_tokens=False) if t not in specials)
    with pytest.raises(TrainledgerError, match="from 259"):
        train_bpe(text, 258, special_tokens=specials)                # 256 bytes + 3 specials need 259
    with pytest.raises(TrainledgerError, match="--special-token must be a non-blank"):
        train_bpe(text, 400, special_tokens=[" "])


def rank_files(bpe, folder):
    """`bpe`'s merges as GPT-2's vocab.json + merges.txt (the library's own writer) and {token bytes: id}."""
    folder.mkdir(exist_ok=True)
    bpe.backend.model.save(str(folder))
    to_byte = {char: byte for byte, char in bytes_to_unicode().items()}
    vocab = json.loads((folder / "vocab.json").read_text())
    return {bytes(to_byte[c] for c in token): i for token, i in vocab.items() if token != EOT}


SAMPLES = ["the cat sat on the mat.", "  Ünïcödé 数字 12345 don't  \r\n\n\tend", "emoji 😀👍🏽 and 日本語のテキスト",
           f"one story.{EOT}another story.{EOT}"]


def test_vocab_json_and_merges_encode_as_tiktoken_does(tmp_path, documents):
    """GPT-2's file pair (vocab.json + merges.txt) loads as a byte-level BPE with GPT-2's pattern: ids equal
    tiktoken's Encoding of the same ranks with <|endoftext|> special, for ASCII, CJK, emoji and separators."""
    bpe = train_bpe(documents + SAMPLES * 20, 700)
    ranks = rank_files(bpe, tmp_path / "gpt2")
    reference = tiktoken.Encoding("pair", pat_str=R50K, mergeable_ranks=ranks, special_tokens={EOT: 0})
    for path in (tmp_path / "gpt2" / "vocab.json", tmp_path / "gpt2"):            # the file or its folder
        ours = load_tokenizer(path)
        assert ours.eot_id == 0 and ours.vocab_size == bpe.vocab_size
        for sample in SAMPLES + ["\n".join(documents[:50])]:
            assert ours.encode(sample, allowed_special="all").tolist() == reference.encode(sample, allowed_special="all"), sample
            assert ours.encode(sample).tolist() == reference.encode_ordinary(sample), sample       # issue 40
            assert ours.decode(ours.encode(sample)) == sample


def test_vocab_json_streamed_equals_one_shot(tmp_path, documents):
    bpe = train_bpe(documents, 600)
    rank_files(bpe, tmp_path / "gpt2")
    text = EOT.join(documents) + " 😀 数字"
    (tmp_path / "in.txt").write_text(text)
    ours = load_tokenizer(tmp_path / "gpt2" / "vocab.json")
    tokenize_file(tmp_path / "in.txt", tmp_path / "a.tokens", tokenizer=ours, chunk_bytes=997, progress=False)
    tokens = np.fromfile(tmp_path / "a.tokens", dtype=np.uint16, offset=128)
    assert tokens.tolist() == ours.encode(text).tolist()


def test_vocab_json_without_its_merges_is_one_line(tmp_path):
    (tmp_path / "vocab.json").write_text('{"a": 0}')
    with pytest.raises(TrainledgerError, match="needs its merges.txt beside it"):
        load_tokenizer(tmp_path / "vocab.json")
    (tmp_path / "merges.txt").write_text("#version: 0.2\nq z\n")
    with pytest.raises(TrainledgerError, match="not a vocab.json \\+ merges.txt pair"):
        load_tokenizer(tmp_path / "vocab.json")


def test_tiktoken_file_takes_special_tokens(tmp_path, documents):
    """A .tiktoken file named like no published one gets <|endoftext|> only; --special-token adds more, each one
    id after it, matched whole even when two are adjacent (tiktoken's own Encoding with those specials agrees)."""
    bpe = train_bpe(documents, 500)
    ranks = {k: v - 1 for k, v in rank_files(bpe, tmp_path / "pair").items()}
    (tmp_path / "mine.tiktoken").write_text("".join(f"{__import__('base64').b64encode(t).decode()} {r}\n"
                                                    for t, r in sorted(ranks.items(), key=lambda x: x[1])))
    plain = load_tokenizer(tmp_path / "mine.tiktoken")
    extra = load_tokenizer(tmp_path / "mine.tiktoken", special_tokens=["<|im_start|>", "<|im_end|>"])
    n = len(ranks)
    specials = {EOT: n, "<|im_start|>": n + 1, "<|im_end|>": n + 2}
    reference = tiktoken.Encoding("mine", pat_str=r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s""",
                                  mergeable_ranks=ranks, special_tokens=specials)
    text = "<|im_start|><|im_end|>the cat sat<|endoftext|><|im_start|>"
    assert extra.encode(text, allowed_special="all").tolist() == reference.encode(text, allowed_special="all")
    assert extra.encode("<|im_start|><|im_end|>").tolist() == [n + 1, n + 2]
    assert len(plain.encode("<|im_start|><|im_end|>")) > 2                        # without: split into pieces
    assert extra.sha256 != plain.sha256 and extra.vocab_size == n + 3


def test_tokenize_cli_special_tokens(tmp_path, documents, capsys):
    (tmp_path / "chats.txt").write_text("".join(f"<|im_start|>{d}<|im_end|>" for d in documents))
    out = tmp_path / "data" / "chats.tokens"
    out.parent.mkdir()
    assert main(["tokenize", str(tmp_path / "chats.txt"), str(out), "--train-bpe", "400", "--special-token",
                 "<|im_start|>", "--special-token", "<|im_end|>", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    saved = load_tokenizer(out.parent / "tokenizer.json")
    assert saved.sha256 == result["tokenizer_sha256"] == read_header(out)["tokenizer_sha256"]
    assert saved.encode("<|im_start|><|im_end|>", allowed_special="all").tolist() == [1, 2]
    # --tokenizer FILE with a new special token: the extended tokenizer is saved beside the output
    other = tmp_path / "other"
    other.mkdir()
    assert main(["tokenize", str(tmp_path / "chats.txt"), str(other / "c.tokens"), "--tokenizer",
                 str(out.parent / "tokenizer.json"), "--special-token", "<|tool|>", "--json"]) == 0
    extended = json.loads(capsys.readouterr().out)
    assert load_tokenizer(other / "tokenizer.json").encode("<|tool|>", allowed_special="all").tolist() == [saved.vocab_size]
    assert extended["tokenizer_sha256"] == load_tokenizer(other / "tokenizer.json").sha256 != saved.sha256


def test_special_token_without_a_bpe_is_refused(tmp_path, capsys):
    (tmp_path / "a.txt").write_text("hello")
    assert main(["tokenize", str(tmp_path / "a.txt"), str(tmp_path / "a.tokens"), "--special-token", "<|x|>"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--special-token" in err
    assert main(["train", "--text", str(tmp_path / "a.txt"), "--special-token", "<|x|>", "--steps", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--special-token needs --tokenizer" in err


def test_train_adds_special_tokens_to_its_tokenizer_and_keeps_them_on_resume(tmp_path, documents, capsys):
    """`train --tokenizer FILE --special-token X`: the run's tokenizer.json has X as one id, the config records
    it, and a --resume without the flag trains with the same tokenizer (its sha256 is checked on resume)."""
    (tmp_path / "c.txt").write_text(EOT.join(documents[:300]))
    bpe = train_bpe(documents, 300)
    bpe.save(tmp_path / "tokenizer.json")
    common = ["--steps", "2", "--seq-len", "16", "--batch-size", "2", "--eval-every", "0", "--no-plot", "--quiet",
              "--threads", "1", "--out-dir", str(tmp_path / "run")]
    assert main(["train", "--text", str(tmp_path / "c.txt"), "--tokenizer", str(tmp_path / "tokenizer.json"),
                 "--special-token", "<|tool|>", *common]) == 0
    run_tokenizer = load_tokenizer(tmp_path / "run" / "tokenizer.json")
    assert run_tokenizer.encode("<|tool|>", allowed_special="all").tolist() == [bpe.vocab_size] and run_tokenizer.vocab_size == 301
    manifests = sorted((tmp_path / "run" / "checkpoints").glob("step_*/manifest.json"))
    assert json.loads(manifests[-1].read_text())["info"]["config"]["special_tokens"] == ["<|tool|>"]
    assert main(["train", "--resume", *common[:-2], "--steps", "3", "--out-dir", str(tmp_path / "run")]) == 0
    assert (tmp_path / "run" / "checkpoints" / "step_00000003").is_dir()
