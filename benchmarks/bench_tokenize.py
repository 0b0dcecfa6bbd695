"""Benchmark: `tokenize` throughput in MB/s, the byte tokenizer beside a byte-level BPE, in one run.

    .venv/bin/python benchmarks/bench_tokenize.py [--megabytes 32] [--vocab 8192] [--chunk-size 16MiB]

The input is the standard-library corpus (the one `train` uses by default), repeated to --megabytes. A BPE of
--vocab tokens is trained on its first 4 MB (reported separately), then the same file is tokenized three ways:
bytes (one token per byte, no decoding), the BPE through `tokenize_file` (streamed chunks cut into pieces and
encoded as one batch per chunk on all cores), and the BPE's library encode of the whole text in one call (one
core for the BPE merges; the reference for "how fast is encoding without the streaming"). Reports MB/s of
input and tokens/s of each, and the ratios. The numbers depend on the machine and its load: `uptime` is printed.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path

from trainledger.data import ByteTokenizer, load_tokenizer, tokenize_file
from trainledger.data.bpe import train_bpe
from trainledger.train.corpus import stdlib_files
from trainledger.units import parse_bytes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, default=32)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--chunk-size", default="16MiB")
    args = parser.parse_args()
    chunk = int(parse_bytes(args.chunk_size))
    corpus = b"".join(p.read_bytes() for p in stdlib_files()).decode("utf-8", errors="replace").encode()
    size = int(args.megabytes * 1e6)
    data = (corpus * (size // len(corpus) + 1))[:size]
    data = data[: len(data.decode("utf-8", errors="ignore").encode())]     # never end inside a character
    load = os.getloadavg()
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, load {load[0]:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        text = Path(tmp) / "in.txt"
        text.write_bytes(data)
        start = time.perf_counter()
        sample = corpus[:4_000_000].decode()
        bpe = train_bpe((sample[i:i + 65536] for i in range(0, len(sample), 65536)), args.vocab)
        print(f"BPE training: {args.vocab} tokens on 4.0 MB in {time.perf_counter() - start:.1f} s")
        bpe.save(Path(tmp) / "tokenizer.json")       # each BPE run loads it afresh: no word cache carried over
        rows = []
        for name, tokenizer in (("bytes", ByteTokenizer()),
                                (f"bpe-{args.vocab} streamed", load_tokenizer(Path(tmp) / "tokenizer.json"))):
            result = tokenize_file(text, Path(tmp) / "out.tokens", tokenizer=tokenizer, chunk_bytes=chunk,
                                   progress=False)
            rows.append((name, result["seconds"], result["n_tokens"]))
        whole, fresh = data.decode(), load_tokenizer(Path(tmp) / "tokenizer.json")
        start = time.perf_counter()
        n_tokens = len(fresh.backend.encode(whole, add_special_tokens=False).ids)
        rows.append((f"bpe-{args.vocab} one encode call", time.perf_counter() - start, n_tokens))
    print(f"{'tokenizer':<32}{'MB/s':>10}{'tokens/s':>14}{'tokens':>14}")
    for name, seconds, n in rows:
        print(f"{name:<32}{len(data) / seconds / 1e6:>10.1f}{n / seconds:>14,.0f}{n:>14,}")
    print(f"bytes / streamed BPE: {rows[1][1] / rows[0][1]:.1f}× faster; streamed BPE / one encode call: "
          f"{rows[2][1] / rows[1][1]:.2f}× ({os.cpu_count()} cores)")


if __name__ == "__main__":
    main()
