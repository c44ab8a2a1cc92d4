"""Bug 3: a handler's timeout is enforced within about a second of its value; it was checked
only at the heartbeat (every third of the lease: 10 s by default)."""

import pytest

from django_pgjobs import JobStatus, enqueue
from django_pgjobs.models import Job

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_timeout_of_1_5_s_fires_within_a_second_of_it_under_a_30_s_lease(start_worker):
    job = enqueue("test.slow_timeout", {"seconds": 30})
    w = start_worker("--burst", "--lease", "30", "--concurrency", "2", "-v", "1")
    assert w.wait(timeout=60) == 0, w.output()[-3000:]
    job = Job.objects.get(pk=job.id)
    assert job.status == JobStatus.FAILED, job.error
    assert "JobTimeout" in job.error and "1.5s" in job.error
    assert 1500 <= job.duration_ms <= 2500, job.duration_ms
