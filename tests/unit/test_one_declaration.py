"""Each default is stated once, in conf.SETTINGS (or the WorkerOptions field of a flag without a
setting): the docs and README tables are generated from it, and nothing restates a default."""

from __future__ import annotations

import ast
import re
import sys

from django_pgjobs import conf, retention
from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import settings_doc  # noqa: E402

README = ROOT / "README.md"
PROSE = [README, *sorted((ROOT / "docs").glob("*.md"))]


def _outside_generated_tables(text: str) -> str:
    for start, end in (
        (conf.TABLE_START, conf.TABLE_END),
        (settings_doc.FLAGS_START, settings_doc.FLAGS_END),
    ):
        if start in text:
            text = text[: text.index(start)] + text[text.index(end) + len(end) :]
    return text


def test_the_readme_flags_table_is_the_generated_one():
    text = README.read_text(encoding="utf-8")
    start = text.index(settings_doc.FLAGS_START)
    end = text.index(settings_doc.FLAGS_END) + len(settings_doc.FLAGS_END)
    assert text[start:end] == settings_doc.flags_table(), (
        "README.md's runjobs flags table differs from the runjobs parser: regenerate it with "
        "`.venv/bin/python scripts/settings_doc.py` (and commit README.md)"
    )


def test_no_doc_restates_a_setting_default():
    # "KEY": value pairs (a PGJOBS dict in a code block or in prose) whose value is the default.
    pair = re.compile(r"""["'](\w+)["']\s*:\s*(\{\}|\[[^\]]*\]|[^,}\n#]+)""")
    restated = []
    for path in PROSE:
        for name, value in pair.findall(_outside_generated_tables(path.read_text("utf-8"))):
            if name in conf.BY_NAME:
                try:
                    same = ast.literal_eval(value.strip()) == conf.BY_NAME[name].default
                except (ValueError, SyntaxError):
                    same = False
                if same:
                    restated.append(f"{path.name}: {name}: {value.strip()}")
    assert restated == [], (
        "these docs restate a default of conf.SETTINGS by hand; link docs/settings.md's "
        "generated table instead (or show a value that is not the default)"
    )


def test_no_flag_row_restates_a_default_outside_the_generated_table():
    flags = {a.option_strings[0] for a in settings_doc._runjobs_parser()._actions}
    rows = [
        (path.name, flag)
        for path in PROSE
        for flag in re.findall(
            r"^\| `(--[\w-]+)` \|", _outside_generated_tables(path.read_text("utf-8")), re.MULTILINE
        )
        if flag in flags
    ]
    rows = [r for r in rows if r[0] == "README.md"]  # docs' tables of measurements name flags
    assert rows == [], "README restates runjobs flags by hand: keep them in the generated table"


def test_runjobs_flags_carry_no_default_of_their_own():
    """None (or False for a switch): the worker's default applies, stated once in WorkerOptions
    or conf.SETTINGS, and --help / the README show that one."""
    own = {
        a.option_strings[0]: a.default
        for a in settings_doc._runjobs_parser()._actions
        if a.default not in (None, False)
    }
    assert own == {}


def test_no_module_indexes_the_defaults_by_a_setting_name():
    found = [
        f"{p.relative_to(ROOT)}: {m}"
        for p in sorted((ROOT / "django_pgjobs").rglob("*.py"))
        if p.name != "conf.py"
        for m in re.findall(r"""(?:DEFAULTS|_D)\[["'][A-Z_]+["']\]""", p.read_text("utf-8"))
    ]
    assert found == [], "use conf.get(NAME) or conf.option_default(field), not DEFAULTS[NAME]"


def test_the_retention_setting_documents_retentions_own_defaults():
    doc = conf.BY_NAME["RETENTION"].doc
    listed = dict(re.findall(r"`(\w+): (\d+)`", doc))
    assert {k: int(v) for k, v in listed.items()} == retention.DEFAULTS, (
        "conf.py's RETENTION line lists other defaults than retention.DEFAULTS: update it"
    )
