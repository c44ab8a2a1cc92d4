"""LoopWatch.take_worst: the heartbeat's figure, the worst lag since the previous heartbeat."""

import asyncio

from django_pgjobs.worker.loopwatch import INTERVAL, LoopWatch


def test_the_worst_lag_between_two_takes_is_kept_then_reset_to_the_current_one():
    loop = asyncio.new_event_loop()
    try:
        watch = LoopWatch(loop, lambda: "test.abehave#1", warn_after=60)
        watch._beat = 100.0
        watch.check(100.0 + INTERVAL + 2.0)  # blocked for 2 s
        watch._beat = 103.0
        watch.check(103.0 + INTERVAL)  # turning again
        assert watch.lag == 0.0
        assert round(watch.take_worst(), 3) == 2.0
        assert watch.take_worst() == 0.0  # the next beat starts afresh
        watch._beat = 110.0
        watch.check(110.0 + INTERVAL + 0.7)  # blocked now: the current lag counts
        assert round(watch.take_worst(), 3) == 0.7
        assert round(watch.take_worst(), 3) == 0.7  # still blocked at the next beat
    finally:
        loop.close()
