"""A runjobs flag's value worth a warning, as its setting's check words it: warned, not refused."""

import pytest

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_short_lease_flag_prints_w001_on_stderr_and_runs(start_worker):
    w = start_worker("--burst", "--lease", "0.5", "--concurrency", "1", "-v", "0")
    assert w.wait(timeout=60) == 0, w.output()[-3000:]
    assert (
        "WARNING: (pgjobs.W001) --lease 0.5 under 3 s: a busy worker may lose leases "
        "between heartbeats"
    ) in w.output()
