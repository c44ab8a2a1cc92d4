"""Every connection a worker opens notices a dead link: keepalives, a user timeout and a
connect timeout on the client, their twins on the server (a real worker, a real server)."""

import pytest
from django.db import connections

from django_pgjobs import JobStatus, enqueue, netsafety
from django_pgjobs.models import Job
from tests.conftest import run_worker

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_handler_threads_connection_carries_the_settings_on_both_ends(settings):
    settings.PGJOBS = {**settings.PGJOBS, "TCP_KEEPALIVES_IDLE": 7, "TCP_USER_TIMEOUT": 4.5}
    database = connections["default"].settings_dict
    saved = database["OPTIONS"]  # as a fresh process has it, plus a key of the user's
    database["OPTIONS"] = {
        **{k: v for k, v in saved.items() if k not in netsafety.client_options()},
        "keepalives_count": 4,
    }
    try:
        job = enqueue("test.connection_options", {})
        run_worker(concurrency=1)
    finally:  # the worker added ours to this process's OPTIONS
        database["OPTIONS"] = saved
        connections["default"].close()
    done = Job.objects.get(pk=job.id)
    assert done.status == JobStatus.COMPLETED, done.error
    assert done.result["client"] == {
        "connect_timeout": "10",
        "keepalives": "1",
        "keepalives_idle": "7",
        "keepalives_interval": "2",
        "keepalives_count": "4",
        "tcp_user_timeout": "4500",
    }
    assert done.result["server"] == {  # over TCP (./dev test's server listens on 127.0.0.1)
        "tcp_keepalives_idle": "7",
        "tcp_keepalives_interval": "2",
        "tcp_keepalives_count": "4",
        "tcp_user_timeout": "4500",
        "client_connection_check_interval": "2000",
    }
