"""`trainledger tokenize`: text or a dataset into a `.tokens` file (header + raw tokens) for training."""

from __future__ import annotations

import argparse

from trainledger.cli import common

HELP = "tokenize a text file or a dataset into a .tokens file (bytes, a tokenizer.json, a .tiktoken file, or a BPE trained on it)"
DESCRIPTION = """\
Writes the token ids of INPUT to OUTPUT with a 128-byte header (magic TLTOKENS, version, dtype, token
count, and the tokenizer's name, sha256 and vocabulary size), streaming the input in chunks so files
larger than memory work, encoding each chunk on all cores; a progress bar shows on big inputs. INPUT is
text, or a dataset by its extension (.jsonl, .parquet, .arrow/.feather: the strings of --text-column,
each document followed by the tokenizer's end-of-text token). OUTPUT is written under a temporary name
and renamed into place. Reports the token count, bytes in and out, time and MB/s.

--tokenizer bytes (default) writes one token per UTF-8 byte (vocabulary 256); --tokenizer FILE uses a
Hugging Face tokenizer.json, a .tiktoken rank file or GPT-2's vocab.json (its merges.txt beside it) on
disk (no network is used); --train-bpe N first trains a byte-level BPE of N tokens on INPUT, split on its
special tokens (<|endoftext|> and each --special-token) so that none is learned as text, and saves it as
tokenizer.json beside OUTPUT (train --data OUTPUT finds it there). Ties between equally frequent pairs are broken
as the tokenizers library does (the pair of the smallest ids in its numbering) or, with --bpe-ties lexicographic,
by the greatest pair of bytes (GPT-2-style reference trainers, CS336); both are deterministic (docs/optim_data.md).

Special tokens are matched in INPUT as tiktoken matches them: a special token's string is ordinary text (several
ids) unless allowed, by --allow-special TOKEN (or all) or by naming it with --special-token; a dataset's documents
are still separated by the end-of-text id, which is ours, not the text's.

examples:
  trainledger tokenize book.txt book.tokens
  trainledger tokenize book.txt data/book.tokens --train-bpe 4096
  trainledger tokenize docs.parquet docs.tokens --tokenizer data/tokenizer.json --text-column content
  trainledger tokenize book.txt book.tokens --tokenizer cl100k_base.tiktoken --json
  trainledger tokenize chats.txt data/chats.tokens --train-bpe 8192 --special-token '<|im_start|>' --special-token '<|im_end|>'
  trainledger tokenize book.txt book.tokens --tokenizer gpt2/vocab.json
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("input", metavar="INPUT", help="text file (UTF-8), or a .jsonl / .parquet / .arrow dataset")
    parser.add_argument("output", metavar="OUTPUT.tokens", help="token file to write (replaced atomically)")
    parser.add_argument("--tokenizer", metavar="bytes|FILE", default=None,
                        help="'bytes' (default), a tokenizer.json or a .tiktoken rank file")
    parser.add_argument("--train-bpe", metavar="VOCAB_SIZE", type=common.positive_int,
                        help="train a byte-level BPE of VOCAB_SIZE tokens (257 or more) on INPUT, save it as "
                             "tokenizer.json beside OUTPUT and tokenize with it")
    parser.add_argument("--bpe-ties", choices=("library", "lexicographic"), default="library",
                        help="how --train-bpe breaks ties between equally frequent pairs: library (the tokenizers "
                             "library's BpeTrainer: the pair of the smallest ids in its numbering; fast) or "
                             "lexicographic (the greatest pair of bytes, as GPT-2-style reference trainers and "
                             "CS336 do; pure Python, slower); both deterministic (default: library)")
    parser.add_argument("--special-token", metavar="TOKEN", action="append", default=None,
                        help="a special token (repeatable), e.g. '<|im_start|>': matched whole, one id, never split; "
                             "with --train-bpe it gets an id after <|endoftext|> and the training text is split on it; "
                             "with --tokenizer FILE it is added and the tokenizer saved as tokenizer.json beside OUTPUT")
    parser.add_argument("--allow-special", metavar="TOKEN", action="append", default=[],
                        help="a special token of the tokenizer (repeatable; 'all' for every one) that INPUT may contain "
                             "as itself, e.g. '<|endoftext|>' between documents: its id; any other special token's "
                             "string in INPUT is ordinary text, as tiktoken encodes it (--special-token ones are allowed)")
    parser.add_argument("--text-column", metavar="NAME", default="text",
                        help="a dataset's text column or JSON field (default: text)")
    parser.add_argument("--dtype", choices=["uint8", "uint16", "uint32", "int32"], default=None,
                        help="token dtype on disk: default uint16 (2 B/token) for vocabularies up to 65,536, else "
                             "uint32; uint8 (1 B/token) holds bytes; a dtype too small for the vocabulary is refused")
    parser.add_argument("--chunk-size", type=common.positive_bytes, default=16 * 2**20,
                        help="bytes read (and text encoded) per chunk, e.g. 16MiB (default: 16MiB)")
    common.add_json_flag(parser)


def _make_folder(folder) -> None:
    """Creates OUTPUT's folder (and its parents) when missing, as `train --out-dir` does; one line when it cannot."""
    from trainledger.errors import TrainledgerError
    if folder.is_dir():
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise TrainledgerError(f"cannot create the folder {folder} for OUTPUT.tokens: {error.strerror or error}") from None


def run(args) -> int:
    import sys
    from trainledger import units
    from trainledger.data.tokenizer import check_output, load_tokenizer, save_beside, tokenize_file
    from trainledger.errors import TrainledgerError
    from pathlib import Path

    if args.chunk_size != int(args.chunk_size):
        raise TrainledgerError(f"--chunk-size must be a whole number of bytes, got {args.chunk_size:g}")
    if args.train_bpe and args.tokenizer:
        raise TrainledgerError("give --tokenizer or --train-bpe, not both (--train-bpe trains the tokenizer)")
    if args.bpe_ties != "library" and not args.train_bpe:
        raise TrainledgerError("--bpe-ties applies with --train-bpe N (how the training breaks ties)")
    specials = args.special_token or []
    if specials and not (args.train_bpe or args.tokenizer not in (None, "bytes")):
        raise TrainledgerError("--special-token needs a BPE tokenizer: give --train-bpe N or --tokenizer FILE (the "
                               "byte tokenizer has only the 256 byte values)")
    tokenizer = load_tokenizer(args.tokenizer or "bytes", special_tokens=[] if args.train_bpe else specials,
                               allowed_special=[] if args.train_bpe else args.allow_special)
    if Path(args.input).is_file():          # a bad INPUT or flag is refused first and leaves no folder behind
        _make_folder(Path(args.output).parent)
    saved = None
    if specials and not args.train_bpe:
        from trainledger.data.tokens import check_input
        check_input(args.input, "INPUT", "input file")      # before a tokenizer.json is written beside OUTPUT
        check_output(Path(args.output), Path(args.input), Path(args.input).stem)
        saved = save_beside(tokenizer, args.output, "--special-token")
    if args.train_bpe:
        from trainledger.data.bpe_train import train_bpe_file
        from trainledger.data.tokens import check_input
        check_input(args.input, "INPUT", "input file")
        check_output(Path(args.output), Path(args.input), Path(args.input).stem)
        tokenizer = train_bpe_file(args.input, args.train_bpe, args.text_column, int(args.chunk_size),
                                   progress=not args.json and sys.stderr.isatty(), special_tokens=specials,
                                   ties=args.bpe_ties)
        if args.allow_special:
            tokenizer.allowed_special |= tokenizer.allowed("all" if "all" in args.allow_special else args.allow_special)
        saved = save_beside(tokenizer, args.output)
    try:
        result = tokenize_file(args.input, args.output, dtype=args.dtype, chunk_bytes=int(args.chunk_size),
                               progress=not args.json, tokenizer=tokenizer, text_column=args.text_column)
    except PermissionError as error:
        raise TrainledgerError(f"cannot access {error.filename}: permission denied (INPUT / OUTPUT.tokens)") from None
    except OSError as error:
        raise TrainledgerError(f"cannot write {args.output}: {error.strerror or error} (OUTPUT.tokens)") from None
    result["tokenizer_path"] = str(saved) if saved else (None if args.tokenizer in (None, "bytes") else args.tokenizer)
    for warning in result["warnings"]:
        print(f"warning: {warning}", file=sys.stderr)
    if args.json:
        common.print_json(result)
        return 0
    rate = result["tokens_per_s"]
    rows = [
        ["input", result["input_path"] + (f" ({result['n_documents']:,} documents)" if result["n_documents"] else "")],
        ["output", result["path"]],
        ["tokenizer", f"{result['tokenizer']} (vocabulary {result['vocab_size']:,}, sha256 {result['tokenizer_sha256'][:12]}…)"
         + (f" saved as {saved}" if saved else "")],
        ["tokens", f"{result['n_tokens']:,}" + (f" ({units.format_count(result['n_tokens'])})"
                                                 if result["n_tokens"] >= 1000 else "")],
        ["input bytes per token", f"{result['input_bytes'] / result['n_tokens']:.2f}"],
        ["dtype", result["dtype"]],
        ["input bytes", units.format_bytes(result["input_bytes"])],
        ["output bytes", f"{units.format_bytes(result['output_bytes'])} (128 B header + tokens)"],
        ["time", units.format_seconds(result["seconds"])],
        ["throughput", (f"{units.format_count(rate)} tokens/s, {result['bytes_per_s'] / 1e6:.2f} MB/s" if rate else "—")],
    ]
    common.console().print(common.table("Tokenized", ["", "value"], rows))
    return 0
