"""The worker's run state, with one owner: whether it is stopping, the exit code it will end
with, and the event that wakes the claim thread. Whatever stops the worker (a signal, a stuck
pool, a burst worker giving up on the database, shutdown) calls ``stop()``; the parts that
wait (waiter, shutdown's drain) wait on its events, and the executor threads and the progress
writer ``wake()`` the claim thread."""

from __future__ import annotations

import threading

EXIT_STUCK = 3  # every executor thread is stuck in a handler that timed out


class RunState:
    def __init__(self) -> None:
        self.stopping = threading.Event()  # set once: no claim after it (waited on, never set)
        self.woken = threading.Event()  # the claim thread's wake-up (waited on and cleared)
        self._exit_code = 0

    @property
    def exit_code(self) -> int:
        return self._exit_code

    @property
    def is_stopping(self) -> bool:
        return self.stopping.is_set()

    def stop(self, exit_code: int | None = None) -> None:
        """Begin the graceful stop; ``exit_code`` says why when it is not a plain stop."""
        if exit_code is not None:
            self._exit_code = exit_code
        self.stopping.set()
        self.woken.set()

    def wake(self) -> None:
        self.woken.set()
