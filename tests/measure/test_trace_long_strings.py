"""Issue 31, item 9: `profile --from-trace` with one 300 MB string inside an event gave no answer after 120 s
(100 MB: 28 s): ijson's cost grows with the square of a string's length. A string longer than MAX_STRING_BYTES
is now one line, exit 2, raised before the parser has read more than one buffer past the bound; strings up to
the bound (and escaped quotes inside them) still read.

Reference: the trace's own bytes (where the long string starts), and the events a reader keeps.
"""

from __future__ import annotations

import gzip
import json

import pytest

from trainledger.cli import main as cli_main
from trainledger.errors import TrainledgerError
from trainledger.measure import trace_read

CHUNK_BYTES = 1 << 16          # ijson reads 64 KiB at a time (yajl2_c's buf_size)


def _trace(path, blob: str, gz: bool = False):
    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1.0, "dur": 2.0, "pid": 1, "tid": 1, "args": {}},
              {"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 3.0, "dur": 1.0, "pid": 1, "tid": 1,
               "args": {"blob": blob}}]
    text = json.dumps({"traceEvents": events}).encode()
    path.write_bytes(gzip.compress(text) if gz else text)
    return text


@pytest.mark.parametrize("gz", [False, True], ids=["json", "json.gz"])
def test_a_string_longer_than_the_bound_is_refused_within_a_buffer_of_it(tmp_path, gz, capsys):
    path = tmp_path / ("t.json.gz" if gz else "t.json")
    text = _trace(path, "x" * (3 * trace_read.MAX_STRING_BYTES), gz)
    start = text.index(b'"xxx')
    reader_count = []
    original = trace_read._CappedReader._check_strings

    def spy(self, lengths):
        reader_count.append(self.count)
        return original(self, lengths)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(trace_read._CappedReader, "_check_strings", spy)
        with pytest.raises(TrainledgerError, match="a JSON string longer than 1 MiB"):
            trace_read.read_trace(path)
    assert reader_count[-1] <= start + trace_read.MAX_STRING_BYTES + CHUNK_BYTES + 1   # never read to the end
    assert cli_main.main(["profile", "--from-trace", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--from-trace" in err[0] and "longer than 1 MiB" in err[0]


def test_strings_up_to_the_bound_and_escaped_quotes_still_read(tmp_path):
    path = tmp_path / "t.json"
    blob = ('ab\\"c' * (trace_read.MAX_STRING_BYTES // 8))[: trace_read.MAX_STRING_BYTES - 1024]
    _trace(path, blob)
    trace = trace_read.read_trace(path)
    assert trace.n_events == 2 and [op[2] for op in trace.cpu_ops[(1, 1)]] == ["aten::mm", "aten::add"]
