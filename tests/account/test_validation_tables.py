"""The validation tables of docs/validation.md and docs/time.md are rendered from the model
(account/validation/tables.py): a page whose tables show other numbers than the model gives now fails here, so a
change to the model cannot leave the docs behind."""

from pathlib import Path

import pytest

from trainledger.account.validation import tables

PAGES = [Path(__file__).resolve().parents[2] / "docs" / name for name in ("validation.md", "time.md")]


def test_the_pages_show_what_the_model_gives_now():
    cache = {}
    for page in PAGES:
        text = page.read_text()
        assert "<!-- table: " in text, page
        assert tables.render(text, cache) == text, (
            f"{page.name}: stale validation tables; run python -m trainledger.account.validation.tables --write "
            "docs/validation.md docs/time.md")


def test_every_table_block_names_a_known_table_and_closes():
    for page in PAGES:
        text = page.read_text()
        opened = text.count("<!-- table: ")
        assert opened == text.count("<!-- /table -->") == len(tables.BLOCK.findall(text)), page
    with pytest.raises(KeyError, match="unknown table"):
        tables.render("<!-- table: nonesuch -->\nold\n<!-- /table -->")


def test_check_and_write(tmp_path, capsys):
    page = tmp_path / "page.md"
    page.write_text("before\n<!-- table: llama3 -->\nstale\n<!-- /table -->\nafter\n")
    assert tables.main(["--check", str(page)]) == 1
    assert "stale validation tables" in capsys.readouterr().err
    assert tables.main(["--write", str(page)]) == 0
    text = page.read_text()
    assert text.startswith("before\n<!-- table: llama3 -->\n| GPUs | TP |") and text.endswith("<!-- /table -->\nafter\n")
    assert tables.main(["--check", str(page)]) == 0
