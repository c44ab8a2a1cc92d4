"""A burst worker names the due jobs of types no handler of it knows (it never claims them):
after its first claim pass, and once more at its end. A long-lived worker has its
maintenance service for that (maintenance.UnknownTypes)."""

from __future__ import annotations

import logging

from django.db import DatabaseError

from .. import registry

logger = logging.getLogger("django_pgjobs.worker")


class BurstReport:
    def __init__(self, using: str) -> None:
        self.using = using
        self.first_done = False

    def after_first_claim(self) -> None:
        """Per type, with its count (a database error is the loop's: it asks again)."""
        for job_type, due in self._found():
            logger.warning(
                "job.unknown_type %s: %s due jobs of a type no handler of this worker knows; "
                "this burst leaves them pending. %s",
                job_type,
                due,
                registry.REGISTER_HINT,
                extra={"action": "job.unknown_type", "job_type": job_type},
            )
        self.first_done = True

    def at_end(self) -> None:
        """One warning naming every unknown type still due; the run is over: no retry."""
        try:
            found = self._found()
        except DatabaseError as exc:
            logger.warning(
                "could not look for due jobs of unknown types (%s)",
                exc,
                extra={"action": "worker.unknown_types_error"},
            )
            return
        if found:
            logger.warning(
                "left pending: due jobs of types no handler of this worker knows: %s. %s",
                ", ".join(f"{t} ({n})" for t, n in found),
                registry.REGISTER_HINT,
                extra={"action": "worker.unknown_types_left"},
            )

    def _found(self) -> list[tuple[str, int]]:
        from ..health_checks import unknown_due_types

        return unknown_due_types(registry.registered_types(), using=self.using)
