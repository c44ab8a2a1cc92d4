"""The dashboard page (inside the admin), its JSON twin, and the indexes the admin relies on."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from django_pgjobs import rollup
from django_pgjobs.sql import rollups
from tests.conftest import sql
from tests.support.admin import make_job, staff_user

UTC = timezone.utc  # datetime.UTC is Python >= 3.11

pytestmark = pytest.mark.django_db
URL = "/admin/django_pgjobs/dashboard/"


@pytest.fixture
def activity():
    make_job(queue="mail", run_after=datetime.now(UTC) - timedelta(seconds=5))
    make_job("RUNNING", queue="mail")
    make_job("COMPLETED", duration_ms=100)
    make_job("COMPLETED", duration_ms=300)
    make_job("FAILED", duration_ms=900, type="test.echo")
    rec = rollup.Recorder()
    now = datetime.now(UTC).timestamp()
    for minute in range(5):
        rec.record("default", "test.behave", "completed", 120, at=now - 60 * minute)
    rec.record("mail", "test.echo", "failed", 900, at=now)
    rec.record("mail", "test.echo", "retried", 50, at=now)
    rec.flush()
    rollups.sample_depth()
    sql(
        "INSERT INTO pgjobs_worker (worker_id, hostname, pid, queues, concurrency) "
        "VALUES ('w-<b>1</b>', 'host', 1, '[\"*\"]', 4)"
    )


def test_dashboard_is_linked_from_the_admin_index(admin_client):
    html = admin_client.get("/admin/").content.decode()
    assert 'href="/admin/django_pgjobs/dashboard/"' in html


def test_dashboard_shows_queues_types_workers_and_charts(admin_client, activity):
    response = admin_client.get(URL)
    assert response.status_code == 200
    html = response.content.decode()
    assert html.count('<figure class="pgjobs-chart') == 3
    assert "<polyline" in html  # throughput and depth lines
    assert 'class="pgjobs-bar"' in html  # duration bars
    assert 'id="pgjobs-queues"' in html and "?queue=mail" in html
    assert "w-&lt;b&gt;1&lt;/b&gt;" in html  # escaped
    data = response.context["data"]
    by_queue = {q["queue"]: q for q in data["queues"]}
    assert (by_queue["mail"]["due"], by_queue["mail"]["running"]) == (1, 1)
    assert by_queue["default"]["completed_24h"] == 5 and by_queue["mail"]["failed_24h"] == 1
    assert by_queue["default"]["throughput_per_min"] == round(5 / 15, 2)
    types = {t["type"]: t for t in data["types"]}
    # from the rollup (5 runs recorded), not the jobs table: percentiles are estimates
    assert types["test.behave"]["runs"] == 5 and types["test.behave"]["estimated"] is True
    assert types["test.behave"]["p50_ms"] == round(rollup.bucket_middle(rollup.bucket_of(120)), 1)
    assert data["failures_by_type"][0]["type"] == "test.echo"
    assert sum(data["series"]["completed"]) == 5


def test_json_twin_has_the_same_numbers(admin_client, activity):
    page = admin_client.get(URL + "?hours=1").context["data"]
    data = admin_client.get(URL + "json/?hours=1").json()
    assert data["window_hours"] == 1
    assert data["queues"] == page["queues"]
    assert data["types"] == page["types"]
    assert len(data["series"]["minutes"]) in (60, 61)


def test_dashboard_needs_a_view_permission(client, activity):
    client.force_login(staff_user("nobody"))
    assert client.get(URL).status_code == 403
    assert client.get(URL + "json/").status_code == 403
    client.force_login(staff_user("watcher", "view_dashboard"))
    assert client.get(URL + "json/").status_code == 200


def test_empty_dashboard_says_so(admin_client):
    html = admin_client.get(URL).content.decode()
    assert "no data yet" in html and "No worker is running." in html


# --- the admin's queries use indexes on a big table ---------------------------------------------


def plan(query: str, *params) -> str:
    return "\n".join(r[0] for r in sql("EXPLAIN " + query, params or None))


@pytest.mark.django_db(transaction=True)  # committed, then TRUNCATEd: no dead tuples left
def test_admin_filters_use_indexes():
    sql(
        "INSERT INTO pgjobs_job (type, status, finished_at, trace_id) "
        "SELECT 'test.noop', 'COMPLETED', now() - g * interval '1 second', md5(g::text) "
        "FROM generate_series(1, 30000) g"
    )
    sql(
        "INSERT INTO pgjobs_job (type, status, finished_at, error) "
        "SELECT 'test.noop', 'FAILED', now(), 'boom' FROM generate_series(1, 20)"
    )
    sql("ANALYZE pgjobs_job")
    assert "pgjobs_job_trace_idx" in plan(
        "SELECT id FROM pgjobs_job WHERE trace_id LIKE 'c4ca42%%' ORDER BY id DESC LIMIT 50"
    )
    assert "pgjobs_job_problem_idx" in plan(
        "SELECT id FROM pgjobs_job WHERE status = 'FAILED' ORDER BY id DESC LIMIT 50"
    )
    assert "pgjobs_job_problem_idx" in plan(
        "SELECT id FROM pgjobs_job WHERE error IS NOT NULL ORDER BY id DESC LIMIT 50"
    )
    percentiles = plan(
        "SELECT type, percentile_cont(0.5) WITHIN GROUP (ORDER BY duration_ms) FROM pgjobs_job "
        "WHERE finished_at > now() - interval '1 hour' GROUP BY type"
    )
    assert "pgjobs_job_stats_idx" in percentiles, percentiles
    types = plan(
        "WITH RECURSIVE t(type) AS ((SELECT type FROM pgjobs_job ORDER BY type LIMIT 1) "
        "UNION ALL SELECT (SELECT j.type FROM pgjobs_job j WHERE j.type > t.type "
        "ORDER BY j.type LIMIT 1) FROM t WHERE t.type IS NOT NULL) SELECT * FROM t"
    )
    assert "pgjobs_job_type_tenant_idx" in types, types


def test_an_unhealthy_queue_is_named_on_the_dashboard(admin_client):
    assert 'id="pgjobs-health"' not in admin_client.get(URL).content.decode()
    sql(
        "INSERT INTO pgjobs_job (type, status, lease_token, lease_expires_at) "
        "VALUES ('test.noop', 'RUNNING', gen_random_uuid(), now() - interval '1 hour')"
    )
    html = admin_client.get(URL).content.decode()
    assert 'id="pgjobs-health"' in html and "1 RUNNING jobs have a lease expired" in html
    assert admin_client.get(URL + "json/").json()["health"]["healthy"] is False


def test_dashboard_page_carries_the_stale_banner_and_the_login_url(admin_client):
    html = admin_client.get(URL + "?refresh=15").content.decode()
    assert '<div id="pgjobs-stale" class="pgjobs-stale" role="alert" hidden></div>' in html
    assert 'data-login-url="/admin/login/"' in html and 'id="pgjobs-updated"' in html


def test_dashboard_counts_jobs_of_types_no_worker_knows_and_links_the_rule(admin_client):
    """Issue 26.3: a handler this process registered only after start-up (as a view's import
    does) is one no worker imports: its pending jobs are named, beside types nobody registers."""
    from django_pgjobs import registry
    from django_pgjobs.registry import HandlerSpec

    registry.register(HandlerSpec(type="views.only", func=lambda job: None))
    try:
        for t in ("views.only", "views.only", "nobody.has.this", "test.behave"):
            make_job(type=t)
        response = admin_client.get(URL)
    finally:
        registry.unregister("views.only")
    html = response.content.decode()
    assert ">3 jobs of a type no worker knows: nobody.has.this, views.only</h2>" in html
    assert "registered here only after start-up" in html and "no handler registered" in html
    assert (
        'href="https://github.com/django-pgjobs/django-pgjobs/blob/main/docs/tasks.md'
        '#registering-tasks"' in html
    )
    assert [u["type"] for u in response.context["data"]["unknown_types"]] == [
        "nobody.has.this",
        "views.only",
    ]
    assert "test.behave" in registry.setup_types()
