"""docs/architecture.md's module map lists every module of the package, and nothing else."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "django_pgjobs"
DOC = ROOT / "docs" / "architecture.md"


def documented() -> set[str]:
    text = DOC.read_text()
    block = text[text.index("## Module map") :]
    block = block[block.index("```") + 3 :]
    block = block[: block.index("```")]
    return set(re.findall(r"^\s+([\w/]+\.py)\s", block, re.MULTILINE))


def modules() -> set[str]:
    return {
        str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if "migrations" not in p.parts
    }


def test_the_module_map_lists_every_module():
    missing, stale = modules() - documented(), documented() - modules()
    assert not missing and not stale, (
        "docs/architecture.md's module map is out of date: add a line (path, its one job) for "
        f"{sorted(missing)} and remove {sorted(stale)}"
    )
