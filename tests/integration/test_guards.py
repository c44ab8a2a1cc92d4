"""Guard tests: when one fails, its message says how to fix it."""

import io
import re

import pytest
from django.core.management import call_command

from django_pgjobs.status import JobStatus
from tests.conftest import sql, sql_one

pytestmark = pytest.mark.django_db


def test_status_choices_match_the_check_constraint():
    definition = sql_one(
        "SELECT pg_get_constraintdef(oid) FROM pg_constraint "
        "WHERE conname = 'pgjobs_job_status_valid'"
    )
    in_db = set(re.findall(r"'([A-Z_]+)'::", definition))
    assert in_db == set(JobStatus.values), (
        "JobStatus choices differ from the CHECK constraint: update both in models.py/status.py "
        "and add a migration (manage.py makemigrations django_pgjobs)"
    )


def test_no_missing_migrations():
    out = io.StringIO()
    try:
        call_command("makemigrations", "--check", "--dry-run", stdout=out, stderr=out)
    except SystemExit:
        pytest.fail("models changed without a migration: run manage.py makemigrations\n" + out.getvalue())


def test_claim_uses_the_partial_index():
    """The claim must not scan finished jobs: its plan uses the partial claim index."""
    sql("INSERT INTO pgjobs_job (type, status, finished_at) SELECT 'test.noop', 'COMPLETED', now() "
        "FROM generate_series(1, 20000)")
    sql("INSERT INTO pgjobs_job (type) SELECT 'test.noop' FROM generate_series(1, 50)")
    sql("ANALYZE pgjobs_job")
    plan = "\n".join(r[0] for r in sql(
        "EXPLAIN SELECT id FROM pgjobs_job WHERE status = 'PENDING' AND run_after <= now() "
        "AND type = ANY('{test.noop}'::text[]) ORDER BY priority DESC, run_after, id "
        "LIMIT 10 FOR UPDATE SKIP LOCKED"))
    assert "pgjobs_job_claim_idx" in plan, plan


def test_the_id_is_generated_always():
    assert sql_one("SELECT identity_generation FROM information_schema.columns "
                   "WHERE table_name='pgjobs_job' AND column_name='id'") == "ALWAYS"
