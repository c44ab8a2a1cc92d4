"""Regenerate the settings table of docs/settings.md from django_pgjobs.conf.SETTINGS.

    .venv/bin/python scripts/settings_doc.py           rewrite the table in docs/settings.md
    .venv/bin/python scripts/settings_doc.py --print   print the table only

tests/unit/test_settings_doc.py fails while the two differ.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "settings.md"
sys.path.insert(0, str(ROOT))

from django_pgjobs import conf  # noqa: E402 - after the repository is on the path


def main(argv: list[str]) -> int:
    if argv == ["--print"]:
        print(conf.markdown_table())
    elif not argv:
        DOC.write_text(conf.replace_table(DOC.read_text(encoding="utf-8")), encoding="utf-8")
        print(f"rewrote the settings table of {DOC.relative_to(ROOT)}", file=sys.stderr)
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
