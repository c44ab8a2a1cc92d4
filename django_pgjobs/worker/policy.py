"""The database-error policy: one object per retrying unit (the claim loop; each maintenance
service), the same class for all.

A connection error starts an outage (or continues it) and grows the delay before the next try,
doubling from ``first`` up to ``cap``; the failed connection is thrown away (the next query
opens a new one). A success ends the outage and says how long it lasted. ``give_up_in`` bounds
an outage (a burst worker's --give-up-after): the last retry is at that bound. Time is a
parameter (monotonic seconds); what to log stays with the caller.
"""

from __future__ import annotations

from django.db import connections

EXIT_DATABASE_UNREACHABLE = 4  # runjobs --burst gave up on the database (--give-up-after)
LOOP_BACKOFF = (0.25, 5.0)  # the claim loop: first delay, longest (seconds)
SERVICE_BACKOFF = (0.5, 30.0)  # a maintenance service: first delay, longest (seconds)


class ErrorPolicy:
    def __init__(self, using: str, backoff: tuple[float, float] = LOOP_BACKOFF) -> None:
        self.using = using
        self.first, self.cap = backoff
        self.backoff = 0.0  # the current delay; 0: the database answers
        self.down_since: float | None = None  # monotonic: the outage's first failure

    @property
    def down(self) -> bool:
        return self.down_since is not None

    def failed(self, now: float) -> float:
        """A connection error at ``now``: the delay before the next try (grown, capped)."""
        if self.down_since is None:
            self.down_since = now
        self.backoff = min(max(self.backoff * 2, self.first), self.cap)
        return self.backoff

    def give_up_in(self, bound: float, now: float) -> float:
        """Seconds left of an outage allowed to last ``bound``; the delay is cut to it, so
        that the last try is at the bound. 0 or less: give up."""
        if self.down_since is None:
            self.down_since = now
        left = self.down_since + bound - now
        if left > 0:
            self.backoff = min(self.backoff, left)
        return left

    def recovered(self, now: float) -> float | None:
        """A success at ``now``: how long the outage lasted (None: there was none); reset."""
        since, self.down_since, self.backoff = self.down_since, None, 0.0
        return None if since is None else now - since

    def close_connection(self) -> None:
        """Throw away the connection that failed."""
        try:
            connections[self.using].close()
        except Exception:  # noqa: BLE001,S110 - it is being thrown away
            pass
