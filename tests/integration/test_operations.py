"""Bug 9: the operator API takes one job id or many (queries.cancel(job.id) raised TypeError)."""

import pytest

import django_pgjobs
from django_pgjobs import JobStatus, enqueue
from django_pgjobs.models import Job
from tests.conftest import sql

pytestmark = pytest.mark.django_db


def _status(*jobs):
    return [Job.objects.get(pk=j.pk).status for j in jobs]


def test_cancel_one_id_a_job_or_many():
    a, b, c, d = (enqueue("test.noop") for _ in range(4))
    assert django_pgjobs.cancel(a.id) == ([a.id], [])
    assert django_pgjobs.cancel(b) == ([b.id], [])
    assert sorted(django_pgjobs.cancel([c.id, d]).cancelled) == sorted([c.id, d.id])
    assert _status(a, b, c, d) == [JobStatus.CANCELLED] * 4


def test_cancel_of_a_running_job_is_a_request():
    job = enqueue("test.noop")
    sql(
        "UPDATE pgjobs_job SET status = 'RUNNING', attempts = 1, lease_token = gen_random_uuid(), "
        "lease_expires_at = now() + interval '1 minute' WHERE id = %s",
        [job.id],
    )
    result = django_pgjobs.cancel(job.id)
    assert (result.cancelled, result.requested) == ([], [job.id])
    assert Job.objects.get(pk=job.id).cancel_requested


def test_retry_run_now_duplicate_delete_take_one_id():
    failed = enqueue("test.noop")
    later = enqueue("test.noop", run_after=3600)
    sql("UPDATE pgjobs_job SET status = 'FAILED', finished_at = now() WHERE id = %s", [failed.id])
    assert django_pgjobs.retry_now(failed.id) == [failed.id]
    assert django_pgjobs.run_now(later.id) == [later.id]
    [(src, copy)] = django_pgjobs.duplicate(failed.id)
    assert src == failed.id and Job.objects.get(pk=copy).type == "test.noop"
    assert django_pgjobs.delete_finished(later.id) == []  # pending: kept
    django_pgjobs.cancel(later.id)
    assert django_pgjobs.delete_finished(later.id) == [later.id]


def test_a_job_of_an_unknown_type_is_not_duplicated():
    job = enqueue("test.noop")
    sql("UPDATE pgjobs_job SET type = 'gone.type' WHERE id = %s", [job.id])
    assert django_pgjobs.duplicate([job.id]) == []


@pytest.mark.parametrize("bad", ["12", b"12", True, 1.5, None, [1, "2"], [None]])
def test_what_is_not_a_job_id_is_a_type_error(bad):
    with pytest.raises(TypeError, match="expected"):
        django_pgjobs.cancel(bad)
