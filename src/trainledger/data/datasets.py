"""Text datasets on disk: the documents of a text column in a JSON Lines, Parquet or Arrow (IPC/Feather) file.

    for document in iter_documents("train.parquet", "text"):     # streamed: one record batch at a time
        ...

The format comes from the extension (.jsonl/.ndjson, .parquet/.pq, .arrow/.feather/.ipc) and is checked
against the file's first bytes before a reader opens it (Parquet: "PAR1" at both ends; Arrow IPC file:
"ARROW1"; Arrow IPC stream, as Hugging Face `datasets` saves: a 0xFFFFFFFF continuation marker). Parquet and
Arrow are read with pyarrow, column by column and batch by batch, so memory stays at one batch however large
the file; JSON Lines with the standard library, line by line. Every problem is one line naming the flag:
a missing column (the columns are listed), a non-string or null value (with its row), an empty file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Iterator

from trainledger.data.limits import lone_surrogate
from trainledger.data.tokens import check_input
from trainledger.errors import TrainledgerError

KINDS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet", ".pq": "parquet", ".arrow": "arrow",
         ".feather": "arrow", ".ipc": "arrow"}
BATCH_ROWS = 1024


def dataset_kind(path) -> str | None:
    """'jsonl', 'parquet' or 'arrow' by the file's extension; None for anything else (text)."""
    return KINDS.get(Path(path).suffix.lower())


def dataset_size(path) -> tuple[int, str]:
    """(total, unit) for a progress bar: bytes of a JSON Lines file, rows of a Parquet or Arrow file."""
    path = Path(path)
    kind = dataset_kind(path)
    if kind == "jsonl":
        return path.stat().st_size, "B"
    try:
        if kind == "parquet":
            import pyarrow.parquet as pq
            return pq.ParquetFile(path).metadata.num_rows, "rows"
        import pyarrow as pa
        if _arrow_format(path) == "file":
            with pa.memory_map(str(path)) as source:
                reader = pa.ipc.open_file(source)
                return sum(reader.get_batch(i).num_rows for i in range(reader.num_record_batches)), "rows"
    except Exception:       # the reader names the problem when it opens the file
        pass
    return 0, "rows"


def iter_documents(path, column: str = "text", flag: str = "--dataset",
                   advance: Callable[[int], None] | None = None) -> Iterator[str]:
    """The strings of column `column`, in row order; `advance(done)` reports bytes (jsonl) or rows read."""
    path = check_input(path, flag, "dataset file")
    kind = dataset_kind(path)
    if kind is None:
        raise TrainledgerError(f"{flag} {path} is not a dataset: give a .jsonl, .parquet or .arrow/.feather file "
                               "(a plain text file goes to --text)")
    if kind == "jsonl":
        return _jsonl(path, column, flag, advance)
    return _columnar(path, kind, column, flag, advance)


def _jsonl(path: Path, column: str, flag: str, advance) -> Iterator[str]:
    done = 0
    with open(path, "rb") as f:
        for number, line in enumerate(f, 1):
            done += len(line)
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except (ValueError, RecursionError):
                raise TrainledgerError(f"{flag} {path} is not a JSON Lines dataset: line {number} is not valid JSON"
                                       ) from None
            if not isinstance(record, dict):
                raise TrainledgerError(f"{flag} {path}: line {number} is a JSON {type(record).__name__}, not an "
                                       f"object with a '{column}' field")
            if column not in record:
                keys = ", ".join(map(str, record)) or "none"
                raise TrainledgerError(f"{flag} {path}: line {number} has no field '{column}' (--text-column); "
                                       f"its fields: {keys}")
            value = record[column]
            if not isinstance(value, str):
                raise TrainledgerError(f"{flag} {path}: line {number}: '{column}' is "
                                       f"{'null' if value is None else 'a JSON ' + type(value).__name__}, not a string")
            where = lone_surrogate(value)
            if where is not None:        # "\ud800": valid JSON, but no Unicode text; no tokenizer can encode it
                raise TrainledgerError(f"{flag} {path}: line {number}: '{column}' holds a lone surrogate "
                                       f"(U+{ord(value[where]):04X} at character {where}), which is not Unicode text; "
                                       "fix or drop that line")
            if advance and number % BATCH_ROWS == 0:
                advance(done)
            yield value
    if advance:
        advance(done)


def _arrow_format(path: Path) -> str | None:
    """'file' (Arrow IPC file / Feather v2), 'stream' (Arrow IPC stream), 'feather1', or None."""
    with open(path, "rb") as f:
        start = f.read(8)
    if start.startswith(b"ARROW1"):
        return "file"
    if start.startswith(b"\xff\xff\xff\xff"):
        return "stream"
    if start.startswith(b"FEA1"):
        return "feather1"
    return None


def _open_columnar(path: Path, kind: str, flag: str):
    """(schema, function(columns) -> iterator of record batches) of a Parquet or Arrow file."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise TrainledgerError(f"{flag} {path}: reading {kind} files needs pyarrow (pip install pyarrow)") from None
    if kind == "parquet":
        with open(path, "rb") as f:
            head = f.read(4)
            f.seek(max(path.stat().st_size - 4, 0))
            tail = f.read(4)
        if head != b"PAR1" or tail != b"PAR1":
            raise TrainledgerError(f"{flag} {path} is not a Parquet file (no PAR1 magic at both ends)")
        parquet = pq.ParquetFile(path)
        return parquet.schema_arrow, lambda columns: parquet.iter_batches(batch_size=BATCH_ROWS, columns=columns)
    form = _arrow_format(path)
    if form == "feather1":
        raise TrainledgerError(f"{flag} {path} is a Feather version 1 file; rewrite it as Feather 2 / Arrow IPC "
                               "(pyarrow.feather.write_feather) or as Parquet")
    if form is None:
        raise TrainledgerError(f"{flag} {path} is not an Arrow IPC file or stream (no ARROW1 magic or stream marker)")
    source = pa.memory_map(str(path))
    if form == "file":
        reader = pa.ipc.open_file(source)
        return reader.schema, lambda columns: (reader.get_batch(i).select(columns)
                                               for i in range(reader.num_record_batches))
    reader = pa.ipc.open_stream(source)
    return reader.schema, lambda columns: (batch.select(columns) for batch in reader)


def _columnar(path: Path, kind: str, column: str, flag: str, advance) -> Iterator[str]:
    import pyarrow as pa
    try:
        schema, batches = _open_columnar(path, kind, flag)
    except (pa.ArrowException, OSError) as error:
        raise TrainledgerError(f"{flag} {path} is not a readable {kind} file: {_first_line(error)}") from None
    names = list(schema.names)
    if column not in names:
        raise TrainledgerError(f"{flag} {path} has no column '{column}' (--text-column); its columns: "
                               + (", ".join(names) or "none"))
    field_type = schema.field(column).type
    if not (pa.types.is_string(field_type) or pa.types.is_large_string(field_type)
            or getattr(pa.types, "is_string_view", lambda _: False)(field_type)):
        raise TrainledgerError(f"{flag} {path}: column '{column}' holds {field_type} values, not strings; choose a "
                               f"text column with --text-column (columns: {', '.join(names)})")
    row = 0
    try:
        for batch in batches([column]):
            values = batch.column(0)
            if values.null_count:
                first = next(i for i, v in enumerate(values.is_null().to_pylist()) if v)
                raise TrainledgerError(f"{flag} {path}: row {row + first} of column '{column}' is null, not a string")
            try:
                strings = values.to_pylist()
            except UnicodeDecodeError:        # pyarrow does not validate UTF-8 on read: say which row
                bad = next(i for i, v in enumerate(values.cast(pa.binary()).to_pylist()) if not _utf8(v))
                raise TrainledgerError(f"{flag} {path}: row {row + bad} of column '{column}' is not valid UTF-8 "
                                       "text; fix or drop that row") from None
            yield from strings
            row += len(values)
            if advance:
                advance(row)
    except (pa.ArrowException, OSError) as error:
        raise TrainledgerError(f"{flag} {path}: cannot read row {row} on: {_first_line(error)}") from None


def _utf8(value: bytes) -> bool:
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
