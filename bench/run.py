#!/usr/bin/env python3
"""One command for the whole benchmark:

    python3 bench/run.py [--quick|--full] [--only system,...] [--reps N] [--profile] ...

Works with any python3 (the machine's default 3.11 included): it finds a Python >= 3.12
(BENCH_PYTHON, python3.12+ on PATH, or pyenv's versions), builds bench/.venvs/core with it
(psycopg, matplotlib) and the per-system environments, then runs bench/harness.py in the
core environment.  Results go to bench/results/latest.{json,md,png}.
"""

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from benchlib import envs  # noqa: E402


def main() -> None:
    envs.exec_in_core(str(BENCH / "harness.py"))


if __name__ == "__main__":
    main()
