"""runjobs' console (worker/console.py): its format is the standard Formatter's output with the
seconds formatted once, and its direct path for a batch's success lines writes the same text."""

import io
import logging
import time

import pytest

from django_pgjobs.worker import console
from django_pgjobs.worker.console import ConsoleFormatter

FORMAT = console.FORMAT


def _record(created: float) -> logging.LogRecord:
    record = logging.LogRecord(
        "django_pgjobs.worker", logging.INFO, __file__, 1, "m %s", ("x",), None
    )
    record.created, record.msecs = created, (created - int(created)) * 1000
    return record


def test_same_text_as_the_standard_formatter_across_seconds():
    ours, standard = ConsoleFormatter(FORMAT), logging.Formatter(FORMAT)
    # within one second, across a second, back (a clock step), a minute and a day boundary
    for created in (
        1_800_000_000.001,
        1_800_000_000.999,
        1_800_000_001.5,
        1_800_000_000.25,
        1_800_000_059.999,
        1_800_000_060.0,
        1_800_057_599.5,
        1_800_057_600.5,
    ):
        assert ours.format(_record(created)) == standard.format(_record(created))


def test_an_explicit_date_format_is_the_standard_one():
    record = _record(1_800_000_000.5)
    assert ConsoleFormatter(FORMAT, datefmt="%H:%M").format(record) == logging.Formatter(
        FORMAT, datefmt="%H:%M"
    ).format(record)


# --- the direct path for the per-job success lines -------------------------------------------


@pytest.fixture
def tree():
    """runjobs' set-up on a logger tree of the test's own: parent with the console handler
    (not propagating: pytest's capture handlers sit on the root), child the worker's."""
    parent, child = (
        logging.getLogger("pgjobs_console_test"),
        logging.getLogger("pgjobs_console_test.worker"),
    )
    handler = console.ConsoleHandler()
    handler.setStream(io.StringIO())
    parent.addHandler(handler)
    parent.setLevel(logging.INFO)
    parent.propagate = False
    yield parent, child, handler
    parent.removeHandler(handler)
    for lg in (parent, child):
        lg.handlers, lg.filters, lg.propagate = [], [], True
        lg.setLevel(logging.NOTSET)


def alone(logger, handler):
    """pytest adds its capture handlers to non-propagating loggers as each test starts."""
    logger.handlers[:] = [handler]


def test_direct_only_when_the_console_alone_gets_the_records_unchanged(tree):
    parent, child, handler = tree
    alone(parent, handler)
    assert console.direct_handler(child) is handler

    def changed(undo, *steps):
        for step in steps:
            step()
        try:
            return console.direct_handler(child)
        finally:
            undo()

    drop = logging.Filter("nothing")
    assert changed(lambda: handler.removeFilter(drop), lambda: handler.addFilter(drop)) is None
    assert changed(lambda: child.removeFilter(drop), lambda: child.addFilter(drop)) is None
    assert changed(lambda: parent.removeFilter(drop), lambda: parent.addFilter(drop)) is None
    other = logging.StreamHandler(io.StringIO())
    assert changed(lambda: child.removeHandler(other), lambda: child.addHandler(other)) is None
    # the records go on to the root (pytest's handlers are there)
    assert (
        changed(
            lambda: setattr(parent, "propagate", False), lambda: setattr(parent, "propagate", True)
        )
        is None
    )
    assert (
        changed(lambda: handler.setLevel(logging.NOTSET), lambda: handler.setLevel(logging.WARNING))
        is None
    )
    ours = handler.formatter
    for formatter in (
        logging.Formatter(console.FORMAT),
        console.ConsoleFormatter(console.FORMAT, datefmt="%H:%M"),
        console.ConsoleFormatter("%(levelname)s %(message)s %(job_id)s"),
    ):
        assert (
            changed(lambda: handler.setFormatter(ours), lambda f=formatter: handler.setFormatter(f))
            is None
        )
    factory = logging.getLogRecordFactory()
    assert (
        changed(
            lambda: logging.setLogRecordFactory(factory),
            lambda: logging.setLogRecordFactory(lambda *a, **k: logging.LogRecord(*a, **k)),
        )
        is None
    )
    assert console.direct_handler(child) is handler  # everything undone


def test_a_batch_is_the_text_the_handler_writes_record_by_record(tree, monkeypatch):
    parent, child, handler = tree
    alone(parent, handler)
    for ns in (1_800_000_000_000_000_000, 1_800_000_000_999_999_999, 1_800_000_061_500_000_000):
        monkeypatch.setattr(time, "time_ns", lambda ns=ns: ns)
        monkeypatch.setattr(time, "time", lambda ns=ns: ns / 1e9)
        messages = [f"job.completed noop#{i} queue=default trace_id=None" for i in range(3)]
        handler.setStream(io.StringIO())
        for m in messages:
            child.info("%s", m)
        one_by_one = handler.stream.getvalue()
        handler.setStream(io.StringIO())
        handler.write_messages(child.name, logging.INFO, messages)
        assert handler.stream.getvalue() == one_by_one
        assert one_by_one.count("\n") == 3 and " INFO pgjobs_console_test.worker job." in one_by_one


def test_a_failing_stream_is_reported_as_logging_reports_it(tree, capsys):
    parent, child, handler = tree

    class Broken(io.StringIO):
        def write(self, s):
            raise OSError("disk full")

    handler.setStream(Broken())
    handler.write_messages(child.name, logging.INFO, ["job.completed noop#1"])  # no raise
    assert "OSError: disk full" in capsys.readouterr().err


def test_a_batch_goes_out_in_whole_lines_of_at_most_a_pipe_s_atomic_write(tree):
    """Writes of up to PIPE_BUF bytes to a pipe are not split by other processes' writes: the
    workers sharing a stderr pipe keep whole lines, as with one write per line."""
    parent, child, handler = tree

    writes = []

    class Recording(io.StringIO):
        def write(self, s):
            writes.append(s)
            return super().write(s)

    handler.setStream(Recording())
    messages = [
        f"job.completed noop#{i} queue=default trace_id=é{'x' * (i % 50)}" for i in range(300)
    ] + ["job.completed big#1 " + "y" * 5000, "job.completed last#1"]
    handler.write_messages(child.name, logging.INFO, messages)
    assert len(writes) > 10 and all(w.endswith("\n") for w in writes)
    (big,) = [w for w in writes if len(w.encode()) > console.ATOMIC_WRITE]  # a longer line: alone
    assert "big#1" in big and big.count("\n") == 1
    lines = "".join(writes).splitlines()
    assert [ln.split(" INFO pgjobs_console_test.worker ", 1)[1] for ln in lines] == messages
