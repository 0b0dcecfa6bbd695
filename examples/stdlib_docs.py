"""Write docs.jsonl and docs.parquet: a small dataset every machine has, for the README's `tokenize` and
`train --dataset` examples.

One document per top-level module of the Python standard library (`sysconfig.get_paths()["stdlib"]/*.py`, in
sorted order), with the fields the examples read: {"path": file name, "text": source}. The same documents in
both files (Parquet via pyarrow, a dependency of trainledger). Usage: python examples/stdlib_docs.py [OUT_DIR]
"""

import json
import sys
import sysconfig
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


def main(out_dir: str = ".") -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))
    docs = [{"path": f.name, "text": f.read_bytes().decode("utf-8", errors="replace")} for f in files]
    with open(out / "docs.jsonl", "w", encoding="utf-8") as handle:
        for doc in docs:
            handle.write(json.dumps(doc) + "\n")
    pq.write_table(pa.table({"path": [d["path"] for d in docs], "text": [d["text"] for d in docs]}),
                   out / "docs.parquet")
    size = sum(len(d["text"].encode()) for d in docs)
    print(f"{len(docs)} documents ({size / 1e6:.1f} MB of source) -> {out / 'docs.jsonl'}, {out / 'docs.parquet'}")


if __name__ == "__main__":
    main(*sys.argv[1:])
