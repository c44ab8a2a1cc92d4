"""Issue 29, part 8: a workflow's admin page (its steps, their states and the step graph drawn
as SVG on the server), the links between a job and its workflow, the dashboard's counts."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from django_pgjobs.models import Job
from tests.support.admin import make_job, make_workflow, staff_user

pytestmark = pytest.mark.django_db
DIAMOND = (
    ("fetch", 1, (), "COMPLETED"),
    ("parse", 3, ("fetch",), "COMPLETED"),
    ("report", 1, ("parse",), "WAITING"),
)


def url(wf: int) -> str:
    return reverse("admin:django_pgjobs_workflow", args=[wf])


def page(client, wf: int) -> str:
    response = client.get(url(wf))
    assert response.status_code == 200, response.status_code
    return response.content.decode()


def nodes(html: str, svg_class: str = "pgjobs-dag-wide") -> dict[str, tuple[float, float, str]]:
    """Each drawn step: (x, y, title) of its box in the drawing ``svg_class``."""
    svg = re.search(rf'<svg class="pgjobs-dag {svg_class}".*?</svg>', html, re.S).group(0)
    out = {}
    for title, x, y, name in re.findall(
        r'<a href="[^"]*" class="pgjobs-dag-node"><title>([^<]*)</title>'
        r'<rect x="([\d.]+)" y="([\d.]+)".*?class="pgjobs-dag-name">([^<]*)</text>',
        svg,
        re.S,
    ):
        out[name] = (float(x), float(y), title)
    return out


def test_the_page_shows_each_step_its_state_attempts_duration_and_result(admin_client):
    wf = make_workflow("import", DIAMOND)
    html = page(admin_client, wf)
    assert "Workflow import #" in html
    steps = re.search(r'<table[^>]*id="pgjobs-steps".*?</table>', html, re.S).group(0)
    for name in ("fetch", "parse", "report"):
        assert f"<b>{name}</b>" in steps
    assert "(3 jobs)" in steps and "3 done" in steps  # the group's counts by state
    assert "waiting" in steps  # report waits for parse
    assert "<code>{&quot;rows&quot;: 0}</code>" in steps  # a result, as JSON
    assert re.search(r'data-label="duration">1.5 s<', steps)  # each COMPLETED job's
    assert re.search(r'data-label="duration">2.0 s<', steps)  # the group's: first start to end
    assert re.search(r'data-label="attempts">1/3<', steps)
    assert re.search(r'data-label="attempts">3<', steps)  # the group's attempts, all its jobs
    assert re.search(
        r'pgjobs-wf-running"[^>]*>running<', html
    )  # a waiting step: the workflow is not over


def test_steps_are_drawn_in_columns_by_depth_with_edges_and_titles(admin_client):
    wf = make_workflow(
        "dag",
        (
            ("a", 1, (), "COMPLETED"),
            ("b", 1, ("a",), "COMPLETED"),
            ("c", 1, ("a", "b"), "PENDING"),  # longest path a -> b -> c: depth 2
            ("d", 1, (), "FAILED"),
        ),
    )
    html = page(admin_client, wf)
    drawn = nodes(html)
    xs = {name: x for name, (x, _, _) in drawn.items()}
    assert xs["a"] == xs["d"] < xs["b"] < xs["c"]
    assert drawn["d"][1] > drawn["a"][1]  # second in its column
    assert "step d: 1 job (1 failed)" == drawn["d"][2]
    svg = re.search(r'<svg class="pgjobs-dag pgjobs-dag-wide".*?</svg>', html, re.S).group(0)
    assert svg.count("<line ") == 3  # a->b, a->c, b->c
    assert "<title>c runs after b (on its success)</title>" in svg
    assert 'role="img"' in svg and "<script" not in html.split('id="content-main"')[1]
    assert re.search(r'pgjobs-wf-running"[^>]*>running<', html)  # c is still to run
    tall = nodes(html, "pgjobs-dag-tall")
    assert tall["a"][1] < tall["b"][1] < tall["c"][1]  # the narrow drawing: depths are rows


def test_a_wide_group_is_one_node_with_its_counts(admin_client):
    wf = make_workflow(
        "wide",
        (
            ("fetch", 1, (), "COMPLETED"),
            ("parse", 300, ("fetch",), "COMPLETED"),
            ("report", 1, ("parse",), "WAITING"),
        ),
    )
    Job.objects.filter(workflow_id=wf, step="parse", config__part__lt=7).update(status="PENDING")
    Job.objects.filter(workflow_id=wf, step="parse", config__part=250).update(status="FAILED")
    html = page(admin_client, wf)
    drawn = nodes(html)
    assert sorted(drawn) == ["fetch", "parse", "report"]
    assert drawn["parse"][2] == "step parse: 300 jobs (1 failed, 7 pending, 292 completed)"
    steps = re.search(r'<table[^>]*id="pgjobs-steps".*?</table>', html, re.S).group(0)
    listed = re.findall(
        r'class="pgjobs-step-job"><td><a href="[^"]+" title="shop.parse">#(\d+)', steps
    )
    failed = Job.objects.get(workflow_id=wf, step="parse", status="FAILED").pk
    assert int(listed[0]) == failed  # the failed member first, whatever its id
    assert html.count('class="pgjobs-step-job"') == 10  # of the group; fetch, report: one row
    assert html.count('class="pgjobs-step-head pgjobs-step-job"') == 2
    assert "… and 290 more" in html
    assert f'href="/admin/django_pgjobs/job/?workflow={wf}"' in html


def test_the_page_reads_the_same_few_statements_for_3_or_3000_jobs(admin_client):
    small = make_workflow("small", DIAMOND)
    wide = make_workflow(
        "wide", (("fetch", 1, (), "COMPLETED"), ("parse", 3000, ("fetch",), "PENDING"))
    )
    page(admin_client, small)  # warm: the session, the content types
    counts = []
    for wf in (small, wide):
        with CaptureQueriesContext(connection) as ctx:
            page(admin_client, wf)
        counts.append(len(ctx.captured_queries))
        job_reads = [q["sql"] for q in ctx.captured_queries if "pgjobs_job" in q["sql"]]
        assert len(job_reads) == 2, job_reads  # the steps, and the edges between steps
    assert counts[0] == counts[1] <= 8, counts


def test_a_job_links_to_its_workflow_and_the_list_back_to_it(admin_client):
    wf = make_workflow("import", DIAMOND)
    report = Job.objects.get(workflow_id=wf, step="report")
    html = admin_client.get(f"/admin/django_pgjobs/job/{report.pk}/change/").content.decode()
    link = re.search(r'<a href="([^"]+)" id="pgjobs-workflow-link">([^<]+)</a>([^<]*)', html)
    assert link.group(1) == url(wf) and link.group(2) == f"import #{wf}"
    assert "step report · waits for 3 dependencies" in html
    plain = make_job("PENDING")
    html = admin_client.get(f"/admin/django_pgjobs/job/{plain.pk}/change/").content.decode()
    assert "pgjobs-workflow-link" not in html
    listing = admin_client.get(f"/admin/django_pgjobs/job/?workflow={wf}").content.decode()
    assert f'href="{url(wf)}"' in listing
    assert listing.count('class="action-select"') == 5
    assert (
        admin_client.get("/admin/django_pgjobs/job/?state=WAITING").context["cl"].result_count == 1
    )


def test_the_job_list_has_a_waiting_tab(admin_client):
    make_workflow("import", DIAMOND)
    html = admin_client.get("/admin/django_pgjobs/job/").content.decode()
    assert re.search(r'href="\?state=WAITING"[^>]*>Waiting<span class="count">1<', html)


def test_the_workflow_page_is_for_staff_with_the_view_permission(client):
    wf = make_workflow("import", DIAMOND)
    response = client.get(url(wf))
    assert response.status_code == 302 and "/login/" in response.url  # anonymous
    client.force_login(staff_user("nobody"))
    assert client.get(url(wf)).status_code == 403
    client.force_login(staff_user("watcher", "view_job"))
    assert client.get(url(wf)).status_code == 200
    assert client.get(url(wf + 1000)).status_code == 404


def test_the_dashboard_counts_running_and_failed_workflows_and_waiting_jobs(admin_client):
    make_workflow("import", DIAMOND)
    failed = make_workflow("bad", (("a", 2, (), "FAILED"), ("b", 1, ("a",), "CANCELLED")))
    running = make_workflow("live", (("a", 1, (), "RUNNING"), ("b", 2, ("a",), "WAITING")))
    data = admin_client.get("/admin/django_pgjobs/dashboard/json/").json()
    assert data["workflows"] == {"running": 1, "failed": 1, "waiting_jobs": 3, "estimated": False}
    html = admin_client.get("/admin/django_pgjobs/dashboard/?refresh=0").content.decode()
    card = re.search(r'id="pgjobs-workflows".*?</div>', html, re.S).group(0)
    assert "?state=WAITING" in card and ">3<" in card
    assert running and failed
