"""@task functions as workflow steps (``task.step(...)``), run by the real worker: in a chain the
previous step's return value is the next task's first argument, as in Celery."""

import json

import pytest

from django_pgjobs import Workflow, chain, job
from django_pgjobs.tasks_api import InvalidTask
from tests.conftest import eventually, run_worker, sql_one
from tests.integration.tasks import conformance_tasks as c
from tests.testapp import tasks as t

pytestmark = pytest.mark.django_db(transaction=True)


def result_of(job_id):
    return json.loads(sql_one("SELECT result::text FROM pgjobs_job WHERE id = %s", [job_id]))


def status_of(job_id):
    return sql_one("SELECT status FROM pgjobs_job WHERE id = %s", [job_id])


def drain(job_id):
    def ended():
        run_worker()
        return status_of(job_id) in ("COMPLETED", "FAILED", "CANCELLED")

    eventually(ended, timeout=20, message=f"job {job_id} ended")


def test_a_chain_of_tasks_passes_each_return_value_as_the_next_first_argument():
    run = chain(t.add.step(1, 2), t.async_double.step(), t.add.step(10)).enqueue()
    last = run["3"][0]
    drain(last)
    assert [result_of(run[s][0]) for s in ("1", "2", "3")] == [
        {"return_value": 3},
        {"return_value": 6},
        {"return_value": 16},
    ]


def test_a_handlers_result_is_piped_whole_and_a_workflow_step_is_not_piped():
    run = chain(job("test.echo", {"n": 4}), c.echo.step("tail")).enqueue()
    drain(run["2"][0])
    echoed = result_of(run["1"][0])
    assert result_of(run["2"][0]) == {"return_value": {"args": [echoed, "tail"], "kwargs": {}}}

    wf = Workflow("dag")
    a = wf.add_spec("a", t.add.step(1, 1))
    wf.add_spec("b", t.add.step(2, 3), after=a)  # not a chain: its arguments as given
    run = wf.enqueue()
    drain(run["b"][0])
    assert result_of(run["b"][0]) == {"return_value": 5}


def test_step_refuses_what_enqueue_refuses_and_unique_keys():
    with pytest.raises(InvalidTask, match="unique_key or a debounce"):
        t.sync_user.step(1)
    with pytest.raises(TypeError):
        t.add.step(object())
