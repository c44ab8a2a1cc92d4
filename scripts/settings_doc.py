"""Regenerate the tables derived from django_pgjobs.conf.SETTINGS: the settings table of
docs/settings.md and the runjobs flags table of README.md.

    .venv/bin/python scripts/settings_doc.py           rewrite both tables
    .venv/bin/python scripts/settings_doc.py --print   print the tables only

tests/unit/test_settings_doc.py fails while a table differs from what this writes.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "settings.md"
README = ROOT / "README.md"
sys.path.insert(0, str(ROOT))

from django_pgjobs import conf  # noqa: E402 - after the repository is on the path

FLAGS_START = "<!-- runjobs flags: generated from the runjobs parser by scripts/settings_doc.py -->"
FLAGS_END = "<!-- end of runjobs flags -->"


def _runjobs_parser() -> argparse.ArgumentParser:
    from django.core.management.base import BaseCommand

    from django_pgjobs.management.commands.runjobs import Command

    common = {a.dest for a in BaseCommand().create_parser("manage.py", "x")._actions}
    parser = Command().create_parser("manage.py", "runjobs")
    parser._actions = [a for a in parser._actions if a.dest not in common]  # noqa: SLF001
    return parser


def _default(action: argparse.Action) -> str:
    """The flag's default as the worker applies it: its setting's, else WorkerOptions'."""
    from django_pgjobs.worker import WorkerOptions

    if isinstance(action, argparse._StoreTrueAction):  # noqa: SLF001
        return "off"
    setting = conf.BY_OPTION.get(action.dest)
    option_defaults = {f.name: f.default for f in fields(WorkerOptions)}
    value: Any = setting.default if setting else option_defaults.get(action.dest, action.default)
    if value is None:
        return "—"
    seconds = action.metavar == "SECONDS" or (
        setting is not None and getattr(setting.rule, "unit", "") == "seconds"
    )
    return f"{value:g} s" if seconds else f"`{value}`" if isinstance(value, str) else str(value)


def flags_table() -> str:
    """README's table of `manage.py runjobs` flags: each flag, its default, its --help."""
    rows = [FLAGS_START, "| flag | default | meaning |", "|---|---|---|"]
    for action in _runjobs_parser()._actions:  # noqa: SLF001
        rows.append(f"| `{action.option_strings[0]}` | {_default(action)} | {action.help} |")
    return "\n".join([*rows, FLAGS_END])


def replace_flags_table(text: str) -> str:
    start, end = text.index(FLAGS_START), text.index(FLAGS_END) + len(FLAGS_END)
    return text[:start] + flags_table() + text[end:]


def _setup_django() -> None:
    import django
    from django.conf import settings

    if not settings.configured:
        settings.configure(INSTALLED_APPS=["django_pgjobs"])
    django.setup()


def main(argv: list[str]) -> int:
    _setup_django()
    if argv == ["--print"]:
        print(conf.markdown_table(), flags_table(), sep="\n\n")
    elif not argv:
        DOC.write_text(conf.replace_table(DOC.read_text(encoding="utf-8")), encoding="utf-8")
        README.write_text(replace_flags_table(README.read_text(encoding="utf-8")), encoding="utf-8")
        print(
            f"rewrote the settings table of {DOC.relative_to(ROOT)} and the runjobs flags "
            f"of {README.name}",
            file=sys.stderr,
        )
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
