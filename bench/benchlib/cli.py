"""The arguments every soak script (bloat.py, scale.py) takes the same way."""

from __future__ import annotations

import argparse
import os

DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/"


def parser(doc: str | None) -> argparse.ArgumentParser:
    """A parser showing ``doc`` as written, with ``--pg-url`` (env BENCH_PG_URL): the server
    on which the script creates its own databases."""
    ap = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--pg-url", default=os.environ.get("BENCH_PG_URL", DEFAULT_PG_URL))
    return ap
