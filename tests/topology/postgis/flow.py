"""The GeoDjango project's own run (test_postgis.py starts it with --ds tests.topology.postgis.settings
against a PostGIS server): not collected by the suite itself (no test_ prefix)."""

import os
import subprocess
import sys

import pytest
from django.contrib.gis.geos import Point
from django.db import connection, transaction

from django_pgjobs import enqueue
from django_pgjobs.models import Job
from tests.conftest import ROOT
from tests.topology.postgis.places.models import Place

pytestmark = pytest.mark.django_db(transaction=True)


def runjobs_burst() -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PGJOBS_TEST_DB_NAME": connection.settings_dict["NAME"],
    }
    return subprocess.run(  # noqa: S603
        [
            sys.executable,
            "-m",
            "django",
            "runjobs",
            "--burst",
            "--settings",
            "tests.topology.postgis.settings",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_job_and_a_spatial_row_commit_together_and_a_worker_runs_the_job(admin_client):
    with transaction.atomic():
        place = Place.objects.create(name="Lyon", location=Point(4.835, 45.764, srid=4326))
        job = enqueue("places.buffer", {"place": place.pk})
    done = runjobs_burst()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    job.refresh_from_db()
    place.refresh_from_db()
    assert job.status == "COMPLETED", (job.status, job.error)
    assert place.area is not None and place.area.contains(place.location)
    changelist = admin_client.get("/admin/django_pgjobs/job/")
    assert changelist.status_code == 200
    assert "places.buffer" in changelist.content.decode()
    assert admin_client.get("/admin/django_pgjobs/dashboard/").status_code == 200


def test_a_rolled_back_transaction_leaves_neither_the_row_nor_the_job():
    with pytest.raises(RuntimeError), transaction.atomic():
        place = Place.objects.create(name="Nowhere", location=Point(0, 0, srid=4326))
        enqueue("places.buffer", {"place": place.pk})
        raise RuntimeError("rollback")
    assert not Place.objects.exists() and not Job.objects.exists()
