"""docs/conventions.md lists every key of a run file as specs/run.py defines it (specs/run_docs.py)."""

from pathlib import Path

from trainledger.specs import run_docs
from trainledger.specs.run_table import fields_by_path

PAGE = Path(__file__).resolve().parents[2] / "docs" / "conventions.md"


def test_the_page_shows_the_table_as_it_is():
    text = PAGE.read_text(encoding="utf-8")
    assert run_docs.rewrite(text) == text, "run `python -m trainledger.specs.run_docs --write docs/conventions.md`"


def test_every_field_has_a_row_and_a_changed_help_is_seen(monkeypatch):
    body = run_docs.render()
    for path in fields_by_path():
        assert f"| `{path}` |" in body, path
    text = PAGE.read_text(encoding="utf-8")
    from trainledger.specs import run as run_mod
    import dataclasses
    tp = next(f for f in dataclasses.fields(run_mod.Layout) if f.name == "tp")
    changed = dataclasses.replace(tp.metadata["setting"], help="a different help text")
    monkeypatch.setattr(tp, "metadata", {"setting": changed})
    assert run_docs.rewrite(text) != text                    # the check fails when the table changes
