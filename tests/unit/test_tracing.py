from django_pgjobs.tracing import trace_id_from_traceparent


def test_traceparent_gives_the_trace_id():
    header = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    assert trace_id_from_traceparent(header) == "4bf92f3577b34da6a3ce929d0e0e4736"


def test_invalid_traceparent_is_ignored():
    assert trace_id_from_traceparent("garbage") is None
    assert trace_id_from_traceparent("00-" + "0" * 32 + "-00f067aa0ba902b7-01") is None
    assert trace_id_from_traceparent(None) is None
