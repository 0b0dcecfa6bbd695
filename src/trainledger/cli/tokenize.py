"""`trainledger tokenize`: byte-tokenize a text file into a `.tokens` file (header + raw tokens) for training."""

from __future__ import annotations

import argparse

from trainledger.cli import common

HELP = "byte-tokenize a text file into a .tokens file (header + tokens, memory-mapped by `train --data`)"
DESCRIPTION = """\
Writes one token per UTF-8 byte (vocabulary 256) to OUTPUT with a 64-byte header (magic TLTOKENS, version,
dtype, token count), streaming the input in chunks so files larger than memory work; a progress bar shows
on big inputs. Reports the token count, bytes in and out, and time.

examples:
  trainledger tokenize book.txt book.tokens
  trainledger tokenize book.txt book.tokens --dtype uint8 --json
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("input", metavar="INPUT.txt", help="text file (any bytes; UTF-8 expected)")
    parser.add_argument("output", metavar="OUTPUT.tokens", help="token file to write (overwritten)")
    parser.add_argument("--dtype", choices=["uint8", "uint16", "int32"], default="uint16",
                        help="token dtype on disk: uint8 is enough for bytes (1 B/token), uint16 is the usual "
                             "LM convention (2 B/token) (default: uint16)")
    parser.add_argument("--chunk-size", type=common.positive_bytes, default=16 * 2**20,
                        help="bytes read per chunk, e.g. 16MiB (default: 16MiB)")
    common.add_json_flag(parser)


def _check_paths(source: str, output: str) -> None:
    """INPUT must be a regular file (a FIFO or /dev/zero never ends); an existing OUTPUT too (/dev/full, a pipe):
    one line naming which, before anything is read or written."""
    import os
    import stat
    from pathlib import Path

    from trainledger.files import check_regular_file, not_regular
    path = Path(source)
    if path.exists() or path.is_symlink():      # a missing input keeps tokenize_file's own message
        check_regular_file(path, "INPUT.txt")
    try:
        mode = os.stat(output).st_mode
    except OSError:
        return                                  # a new file (or an unusable directory: tokenize_file names it)
    if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        raise not_regular("OUTPUT.tokens", output, mode, "give a file name to write the tokens to")


def run(args) -> int:
    from trainledger import units
    from trainledger.data.tokenizer import tokenize_file

    if args.chunk_size != int(args.chunk_size):
        from trainledger.errors import TrainledgerError
        raise TrainledgerError(f"--chunk-size must be a whole number of bytes, got {args.chunk_size:g}")
    _check_paths(args.input, args.output)
    try:
        result = tokenize_file(args.input, args.output, dtype=args.dtype, chunk_bytes=int(args.chunk_size),
                               progress=not args.json)
    except OSError as error:          # a full disk, a file-size limit: one line, never a traceback
        from trainledger.errors import TrainledgerError
        reason = error.strerror or str(error)
        raise TrainledgerError(f"cannot write {args.output} (OUTPUT.tokens): {reason}; free space or choose "
                               "another OUTPUT") from None
    if args.json:
        common.print_json(result)
        return 0
    rate = result["tokens_per_s"]
    rows = [
        ["input", result["input_path"]],
        ["output", result["path"]],
        ["tokens", f"{result['n_tokens']:,}" + (f" ({units.format_count(result['n_tokens'])})"
                                                 if result["n_tokens"] >= 1000 else "")],
        ["dtype", result["dtype"]],
        ["input bytes", units.format_bytes(result["input_bytes"])],
        ["output bytes", f"{units.format_bytes(result['output_bytes'])} (64 B header + tokens)"],
        ["time", units.format_seconds(result["seconds"])],
        ["tokens/s", units.format_count(rate) if rate else "—"],
    ]
    common.console().print(common.table("Tokenized (byte-level, vocabulary 256)", ["", "value"], rows))
    return 0
