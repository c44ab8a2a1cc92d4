"""Guard: nothing in the package keeps session state that a transaction pooler would lose or
leak (docs/topology.md, "Session state, item by item"). A failure names the file: make the
state transaction-level, or add it to that table with its decision behind PgBouncer."""

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "django_pgjobs"
# In SQL text (our SQL is upper case): session locks, a statement-level SET (not UPDATE's),
# a session set_config, LISTEN, a holdable cursor, an SQL-level PREPARE.
SESSION_STATE = re.compile(
    r"pg_(try_)?advisory_lock(_shared)?\(|[\"']SET\s+(SESSION\s+)?\w+\s*(=|TO)\s"
    r"|set_config\([^)]*,\s*(false|%s)\)|[\"']LISTEN\s+(\{|%|\")|WITH HOLD|[\"']PREPARE\s"
)
# The reviewed places, each in docs/topology.md's table.
ALLOWED = {
    "db.py": {"SET plan_cache_mode", "set_config('application_name', %s, false)"},
    "worker/listener.py": {"LISTEN"},
    # The producer's probes of S(*) and S(queue) (taken and released in one expression), the
    # sleeper's S(*) or S(queue)s and the gate's pass, on the listener's direct connection.
    "doorbell.py": {
        "pg_try_advisory_lock({cls}",
        "pg_try_advisory_lock_shared({_SLEEPERS}",
        "pg_try_advisory_lock_shared({}, hashtext(q))",
        "pg_try_advisory_lock({_GATE}",
    },
    "netsafety.py": {"set_config(v.name, v.value, false)"},
}


def test_no_session_state_outside_the_reviewed_places():
    found, reviewed = [], set()
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = str(path.relative_to(PACKAGE))
        if "migrations" in path.parts:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            m = SESSION_STATE.search(code)
            if not m:
                continue
            allowed = [a for a in ALLOWED.get(rel, ()) if a in code]
            reviewed.update((rel, a) for a in allowed)
            if not allowed:
                found.append(f"{rel}:{n}: {line.strip()}")
    assert not found, (
        "session state a transaction pooler would lose or leak to other "
        "clients; see docs/topology.md:\n" + "\n".join(found)
    )
    # The pattern still finds the reviewed places: it would find a new one.
    assert reviewed == {(f, a) for f, items in ALLOWED.items() for a in items}, reviewed
