import json
from io import StringIO

import pytest
from django.core.management import call_command

from tests.support.admin import make_job

pytestmark = pytest.mark.django_db


def test_pgjobs_stats_text_and_json():
    make_job(queue="mail")
    make_job("COMPLETED", duration_ms=250)
    out = StringIO()
    call_command("pgjobs_stats", stdout=out)
    text = out.getvalue()
    assert "Queues" in text and "mail" in text and "test.behave" in text and "250" in text
    out = StringIO()
    call_command("pgjobs_stats", "--json", stdout=out)
    data = json.loads(out.getvalue())
    assert {q["queue"] for q in data["queues"]} == {"mail"}
    assert data["types_24h"][0] == {
        "type": "test.behave",
        "runs": 1,
        "p50_ms": 250.0,
        "p95_ms": 250.0,
        "failures": 0,
    }
