"""The finalize's JSON of a completion: the hand-formatted plain success says what
json.dumps would (its keys absent rather than null: jsonb_to_recordset reads both as NULL)."""

import json
import uuid

from django_pgjobs.queries import Completion, _completion_json, _finalize_params


def record(c):
    return {k: v for k, v in c.as_record().items() if v is not None}


def test_a_plain_success_decodes_as_its_record():
    c = Completion(id=2**40, token=uuid.uuid4(), attempt=3, status="COMPLETED", duration_ms=17)
    assert json.loads(_completion_json(c)) == record(c)


def test_anything_more_than_a_plain_success_goes_through_json_dumps():
    c = Completion(
        id=1,
        token=str(uuid.uuid4()),
        attempt=1,
        status="PENDING",
        error='boom "quoted"\n',
        delay=2.5,
        note="retry",
        result={"a": [1]},
    )
    assert json.loads(_completion_json(c)) == c.as_record()


def test_a_batch_is_one_json_array():
    cs = [Completion(id=i, token=uuid.uuid4(), attempt=1, status="COMPLETED") for i in range(3)]
    params = _finalize_params(cs)
    assert json.loads(params["completions"]) == [record(c) for c in cs]
    assert params["n_completions"] == 3
