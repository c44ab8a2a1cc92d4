"""The job list's state tabs: how many jobs each state has, exact where counting is cheap and
the planner's statistics where it would not be.

A state is counted exactly up to EXACT_UP_TO rows (a LIMITed count: at most that many index or
heap entries read). Above that, or when the statistics say the state is large, the number is
estimated: reltuples of the table times the state's frequency in pg_stats; such numbers are
marked estimated (shown with '≈').
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import conf, db
from .status import JobStatus, sql_literal
from .tables import JOB_TABLE

EXACT_UP_TO = 10_000
# States a partial index serves (claim, lease, problem indexes): their LIMITed count reads that
# index. COMPLETED has none: on a big table a rare COMPLETED would mean scanning it all, so there
# its number is the estimate.
INDEXED = frozenset({"PENDING", "RUNNING", "FAILED", "COMPLETED_WITH_ERRORS", "CANCELLED"})
SCAN_UP_TO_ROWS = 1_000_000

TABS = (  # (state parameter, label, SQL condition)
    ("WAITING", "Waiting", f"status = {sql_literal(JobStatus.WAITING)}"),
    ("PENDING", "Pending", f"status = {sql_literal(JobStatus.PENDING)}"),
    ("RUNNING", "Running", f"status = {sql_literal(JobStatus.RUNNING)}"),
    ("FAILED", "Failed", f"status = {sql_literal(JobStatus.FAILED)}"),
    (
        "COMPLETED_WITH_ERRORS",
        "With errors",
        f"status = {sql_literal(JobStatus.COMPLETED_WITH_ERRORS)}",
    ),
    ("CANCELLED", "Cancelled", f"status = {sql_literal(JobStatus.CANCELLED)}"),
    ("COMPLETED", "Completed", f"status = {sql_literal(JobStatus.COMPLETED)}"),
)


@dataclass
class Tab:
    state: str
    label: str
    count: int
    estimated: bool

    @property
    def shown(self) -> str:
        return ("≈ " if self.estimated else "") + _short(self.count)


def _short(n: int) -> str:
    if n >= 1_000_000:
        return f"{n / 1_000_000:.1f}M"
    if n >= 10_000:
        return f"{n / 1000:.0f}k"
    return f"{n:,}"


def estimates(cur: Any) -> tuple[float, dict[str, float]]:
    """(rows in the table, {status: estimated rows}) from pg_class and pg_stats."""
    cur.execute(
        """SELECT GREATEST(c.reltuples, 0), s.most_common_vals::text::text[],
                  s.most_common_freqs
           FROM pg_class c
           LEFT JOIN pg_stats s ON s.tablename = c.relname AND s.attname = 'status'
                AND s.schemaname = ANY(current_schemas(false))
           WHERE c.oid = to_regclass(%s)""",
        [JOB_TABLE],
    )
    row = cur.fetchone()
    if not row:
        return 0.0, {}
    total, vals, freqs = row
    return float(total), {
        v: float(total) * f for v, f in zip(vals or [], freqs or [], strict=False)
    }


def state_tabs(using: str | None = None) -> list[Tab]:
    with db.cursor(using or conf.get("DATABASE")) as cur:
        total, by_status = estimates(cur)
        return [_tab(cur, total, by_status, *t) for t in TABS]


def state_count(state: str, using: str | None = None) -> Tab:
    """One state's count, as its tab shows it (the dashboard's waiting jobs)."""
    with db.cursor(using or conf.get("DATABASE")) as cur:
        total, by_status = estimates(cur)
        return _tab(cur, total, by_status, *next(t for t in TABS if t[0] == state))


def _tab(
    cur: Any, total: float, by_status: dict[str, float], state: str, label: str, cond: str
) -> Tab:
    guess = by_status.get(state)
    if (guess is not None and guess > 4 * EXACT_UP_TO) or (
        state not in INDEXED and total > SCAN_UP_TO_ROWS
    ):
        return Tab(state, label, int(guess or 0), True)
    cur.execute(
        f"SELECT count(*) FROM (SELECT 1 FROM {JOB_TABLE} WHERE {cond} LIMIT %s) c",
        [EXACT_UP_TO + 1],
    )
    n = cur.fetchone()[0]
    if n > EXACT_UP_TO:
        return Tab(state, label, max(int(guess or 0), n), True)
    return Tab(state, label, n, False)
