"""runjobs' default log format: the standard Formatter's output, the seconds formatted once."""

import logging

from django_pgjobs.management.commands.runjobs import _Formatter

FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


def _record(created: float) -> logging.LogRecord:
    record = logging.LogRecord(
        "django_pgjobs.worker", logging.INFO, __file__, 1, "m %s", ("x",), None)
    record.created, record.msecs = created, (created - int(created)) * 1000
    return record


def test_same_text_as_the_standard_formatter_across_seconds():
    ours, standard = _Formatter(FORMAT), logging.Formatter(FORMAT)
    # within one second, across a second, back (a clock step), a minute and a day boundary
    for created in (1_800_000_000.001, 1_800_000_000.999, 1_800_000_001.5, 1_800_000_000.25,
                    1_800_000_059.999, 1_800_000_060.0, 1_800_057_599.5, 1_800_057_600.5):
        assert ours.format(_record(created)) == standard.format(_record(created))


def test_an_explicit_date_format_is_the_standard_one():
    record = _record(1_800_000_000.5)
    assert _Formatter(FORMAT, datefmt="%H:%M").format(record) == logging.Formatter(
        FORMAT, datefmt="%H:%M").format(record)
