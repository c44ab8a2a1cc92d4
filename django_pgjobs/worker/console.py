"""runjobs' console: the handler ``manage.py runjobs`` installs when the project has not
configured logging, and a direct path for the per-job success lines.

Through ``logging``, a success line costs a ``LogRecord``, the handler's lock, the format, one
``write`` and ``flush`` per line: much of a short job's cost. When those records would reach
this handler alone, unfiltered, the worker hands it a batch's messages instead; it writes them
in the same format, a few at a time. Anything else a project sets up (a handler, a filter, a
Logger class, a record factory) takes the usual path.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence

FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
_MSEC_FORMAT = "%s,%03d"  # logging.Formatter.default_msec_format, typed Optional


class ConsoleFormatter(logging.Formatter):
    """The standard format, with the date and time up to the second formatted once per second
    (``time.strftime`` was a tenth of the cost of a per-job line)."""

    _second: tuple[int, str] = (-1, "")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        if datefmt:
            return super().formatTime(record, datefmt)
        second = int(record.created)
        if self._second[0] != second:
            self._second = (
                second,
                time.strftime(self.default_time_format, self.converter(record.created)),
            )
        return _MSEC_FORMAT % (self._second[1], record.msecs)


class ConsoleHandler(logging.StreamHandler):  # type: ignore[type-arg]  # generic only in the stubs
    """A ``StreamHandler`` (stderr) with runjobs' format, able to write lines in batches."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(ConsoleFormatter(FORMAT))

    def write_messages(self, name: str, level: int, messages: Sequence[str]) -> None:
        """Write ``messages`` as records of logger ``name`` at ``level`` would be, whole lines
        of up to ATOMIC_WRITE bytes at a time.

        Only for the plain format (``direct_handler()`` checks it), where the message comes
        last: the text before it is formatted once, from one record, for the whole batch.
        """
        record = logging.LogRecord(name, level, __file__, 0, "", None, None)
        prefix = self.format(record)
        assert self.lock is not None  # made by Handler.__init__
        with self.lock:
            try:
                for chunk in _chunks([prefix + m + self.terminator for m in messages]):
                    self.stream.write(chunk)
                    self.flush()
            except RecursionError:  # as StreamHandler.emit
                raise
            except Exception:
                self.handleError(record)


# Writes of at most PIPE_BUF bytes (4096 on Linux) to a pipe are never split by other writers:
# several workers sharing one stderr pipe (a container, a process manager) keep whole lines, as
# they did with a write per line.
ATOMIC_WRITE = 4096


def _chunks(lines: list[str]) -> Iterator[str]:
    """The lines joined into runs of at most ATOMIC_WRITE bytes (a longer line goes alone)."""
    start, size = 0, 0
    for i, line in enumerate(lines):
        n = len(line) if line.isascii() else len(line.encode("utf-8", "surrogateescape"))
        if size + n > ATOMIC_WRITE and i > start:
            yield "".join(lines[start:i])
            start, size = i, 0
        size += n
    if start < len(lines):
        yield "".join(lines[start:])


def direct_handler(logger: logging.Logger) -> ConsoleHandler | None:
    """The ConsoleHandler that ``logger``'s INFO records reach, if they reach it and nothing
    else, with nothing on the way that could drop, change or add to them; otherwise None.

    The caller checks ``logger.isEnabledFor(INFO)``. Loggers of any other class than the
    standard one (``logging.setLoggerClass``) take the usual path. Cheap (a walk up the logger
    tree): call it per batch, so that logging configured after the worker started is obeyed.
    """
    if logging.getLogRecordFactory() is not logging.LogRecord:
        return None
    found: ConsoleHandler | None = None
    node: logging.Logger | None = logger
    while node is not None:
        if node.filters or type(node) not in (logging.Logger, logging.RootLogger):
            return None
        for h in node.handlers:
            if (
                found is not None
                or type(h) is not ConsoleHandler
                or h.filters
                or (h.level > logging.INFO)
                or not _plain(h.formatter)
            ):
                return None
            found = h
        if not node.propagate:
            break
        node = node.parent
    return found


def _plain(formatter: logging.Formatter | None) -> bool:
    return (
        type(formatter) is ConsoleFormatter
        and formatter._fmt == FORMAT
        and formatter.datefmt is None
        and type(formatter._style) is logging.PercentStyle
    )


def setup(verbosity: int) -> None:
    """Show the worker's log lines on stderr unless the project configured logging for them."""
    logger = logging.getLogger("django_pgjobs")
    if logger.handlers or logging.getLogger().handlers:
        return
    level = {0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG)
    logger.addHandler(ConsoleHandler())
    logger.setLevel(level)
