"""pgjobs_schedule (a schedule's runtime state) and pgjobs_schedule_fire (one row per tick)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from .. import db
from ..tables import SCHEDULE_FIRE_TABLE, SCHEDULE_TABLE


@dataclass
class ScheduleState:
    enabled: bool
    next_fire_time: datetime | None  # the first tick not yet handled; None: count from now
    run_now_requested: bool


_STATES = (
    f"SELECT name, enabled, next_fire_time, run_now_requested FROM {SCHEDULE_TABLE} "
    "WHERE name = ANY(%s::text[])"
)


def states(names: list[str], using: str | None = None) -> dict[str, ScheduleState]:
    """The state row of each schedule, created (enabled, cursor NULL) where missing."""
    with db.cursor(using) as cur:
        cur.execute(_STATES, [names])
        rows = {r[0]: ScheduleState(r[1], r[2], r[3]) for r in cur.fetchall()}
        missing = [n for n in names if n not in rows]
        if missing:
            cur.execute(
                f"""INSERT INTO {SCHEDULE_TABLE} (name, enabled, run_now_requested, updated_at)
                    SELECT unnest(%s::text[]), true, false, now() ON CONFLICT (name) DO NOTHING""",
                [missing],
            )
            cur.execute(_STATES, [missing])
            rows.update({r[0]: ScheduleState(r[1], r[2], r[3]) for r in cur.fetchall()})
    return rows


def insert_fire(name: str, fire_time: datetime, using: str | None = None) -> int | None:
    """The fire row's id, or None when the tick was fired already (by another worker)."""
    with db.cursor(using) as cur:
        cur.execute(
            f"""INSERT INTO {SCHEDULE_FIRE_TABLE} (schedule, fire_time, created_at)
                VALUES (%s, %s, now())
                ON CONFLICT (schedule, fire_time) DO NOTHING RETURNING id""",
            [name, fire_time],
        )
        row = cur.fetchone()
    return None if row is None else row[0]


def record_fire(
    fire_id: int, name: str, fire_time: datetime, job_id: int, using: str | None = None
) -> None:
    """Link the fire row to its job; the schedule remembers its latest fire."""
    with db.cursor(using) as cur:
        cur.execute(
            f"UPDATE {SCHEDULE_FIRE_TABLE} SET job_id = %s WHERE id = %s", [job_id, fire_id]
        )
        cur.execute(
            f"""UPDATE {SCHEDULE_TABLE}
                SET last_job_id = CASE WHEN last_fire_time IS NULL OR last_fire_time <= %(t)s
                                       THEN %(job)s ELSE last_job_id END,
                    last_fire_time = GREATEST(last_fire_time, %(t)s), updated_at = now()
                WHERE name = %(name)s""",
            {"t": fire_time, "job": job_id, "name": name},
        )


def take_run_now(name: str, using: str | None = None) -> bool:
    """Clear the schedule's run-now flag; True when this call cleared it."""
    with db.cursor(using) as cur:
        cur.execute(
            f"""UPDATE {SCHEDULE_TABLE} SET run_now_requested = false, updated_at = now()
                WHERE name = %s AND run_now_requested RETURNING name""",
            [name],
        )
        return cur.fetchone() is not None


def advance(name: str, seen: datetime | None, cursor: datetime, using: str | None = None) -> None:
    """Move the cursor, unless another worker moved it since we read it."""
    with db.cursor(using) as cur:
        cur.execute(
            f"""UPDATE {SCHEDULE_TABLE} SET next_fire_time = %s, updated_at = now()
                WHERE name = %s AND enabled AND next_fire_time IS NOT DISTINCT FROM %s""",
            [cursor, name, seen],
        )


def set_enabled(names: list[str], enabled: bool, using: str | None = None) -> int:
    """Enable or disable schedules. Either way the cursor restarts from now: ticks that passed
    while a schedule was disabled never fire."""
    with db.cursor(using) as cur:
        cur.execute(
            f"""UPDATE {SCHEDULE_TABLE} SET enabled = %s, next_fire_time = NULL, updated_at = now()
                WHERE name = ANY(%s::text[]) AND enabled <> %s""",
            [enabled, names, enabled],
        )
        return cur.rowcount


def request_run_now(names: list[str], using: str | None = None) -> int:
    """Ask the next scheduler pass (of any worker) to fire these schedules once, now."""
    with db.cursor(using) as cur:
        cur.execute(
            f"""UPDATE {SCHEDULE_TABLE} SET run_now_requested = true, updated_at = now()
                WHERE name = ANY(%s::text[])""",
            [names],
        )
        return cur.rowcount
