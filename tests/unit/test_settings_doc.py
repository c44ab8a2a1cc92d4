"""docs/settings.md's settings table is conf.SETTINGS rendered; its checks list names every id."""

import re

from django_pgjobs import conf
from tests.conftest import ROOT

DOC = ROOT / "docs" / "settings.md"
CODE = [ROOT / "django_pgjobs" / n for n in ("checks.py", "backend.py", "aging.py", "flow.py")]


def test_the_docs_table_is_the_generated_one():
    text = DOC.read_text(encoding="utf-8")
    start, end = text.index(conf.TABLE_START), text.index(conf.TABLE_END) + len(conf.TABLE_END)
    assert text[start:end] == conf.markdown_table(), (
        "docs/settings.md's settings table differs from django_pgjobs.conf.SETTINGS: regenerate "
        "it with `.venv/bin/python scripts/settings_doc.py` (and commit docs/settings.md)"
    )


def test_replace_table_keeps_the_rest_of_the_page():
    text = DOC.read_text(encoding="utf-8")
    stale = text.replace("| `DATABASE` |", "| `DATABASE_OLD` |")
    assert conf.replace_table(stale) == text


def test_the_checks_list_documents_every_id_and_no_other():
    listed = set(re.findall(r"^\| `(pgjobs\.[EW]\d{3})` \|", DOC.read_text(), re.MULTILINE))
    in_table = {s.check for s in conf.SETTINGS} | {s.warn.check for s in conf.SETTINGS if s.warn}
    in_code = {
        found for path in CODE for found in re.findall(r'"(pgjobs\.[EW]\d{3})"', path.read_text())
    }
    assert in_table <= listed
    assert listed == in_table | in_code
