"""One round trip of the claim thread: the runs that ended are written and as many jobs are
claimed as that frees. Controlled queues go first, their claim carrying the ended runs
(queries.finalize_and_claim_controlled); the unlimited claim carries what is left. It reads the
worker's public parts only."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .completer import Completer

if TYPE_CHECKING:
    from .loop import Worker


def cycle(w: Worker) -> int:
    """Write the runs that ended and claim as many jobs as that frees; how many were claimed."""
    o = w.options
    batch = w.completer.take()
    free, room = w.producer.room(len(batch))
    limit = 0 if w.state.is_stopping else min(room, o.batch_size)
    claimed = 0
    if limit > 0 and w.producer.limited:  # controlled queues: the ended runs ride along
        written, rows = w.producer.finalize_and_claim_limited(
            Completer.to_write(batch), min(free, limit)
        )
        w.completer.settle(batch, written)
        batch = []
        w.producer.dispatch(rows)
        claimed = len(rows)
    unlimited = limit - claimed
    if o.queues and set(o.queues) <= set(w.producer.limited):
        unlimited = 0  # every queue of ours is controlled: no unlimited claim to send
    written, rows = w.producer.finalize_and_claim(Completer.to_write(batch), unlimited)
    if batch:
        w.completer.settle(batch, written)
    w.producer.dispatch(rows)
    claimed += len(rows)
    # Claim again at once only if the batch size, not the room, capped this claim.
    w.producer.last_claim_full = 0 < limit < room and claimed == limit
    w.waiter.note_held(len(w.slots))
    if o.inline:
        for item in w.handoff.take_back():
            w.runner.run_item(item)
    return claimed
