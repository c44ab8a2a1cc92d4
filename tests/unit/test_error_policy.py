"""ErrorPolicy: the one database-error policy of the claim loop and of each maintenance service."""

from django_pgjobs.worker.policy import LOOP_BACKOFF, SERVICE_BACKOFF, ErrorPolicy


def test_the_delay_doubles_from_the_first_up_to_the_cap():
    policy = ErrorPolicy("default", LOOP_BACKOFF)
    delays = [policy.failed(now=100.0 + i) for i in range(8)]
    assert delays == [0.25, 0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0]
    services = ErrorPolicy("default", SERVICE_BACKOFF)
    assert [services.failed(now=0.0) for _ in range(8)] == [0.5, 1, 2, 4, 8, 16, 30, 30]


def test_the_outage_starts_at_the_first_failure_and_a_success_ends_it():
    policy = ErrorPolicy("default")
    assert not policy.down and policy.recovered(now=5.0) is None  # nothing to report
    policy.failed(now=10.0)
    policy.failed(now=12.0)
    assert policy.down and policy.down_since == 10.0
    assert policy.recovered(now=13.5) == 3.5
    assert not policy.down and policy.backoff == 0.0
    assert policy.failed(now=20.0) == 0.25  # a new outage starts over


def test_give_up_bound_cuts_the_last_delay_to_the_bound_then_says_give_up():
    policy = ErrorPolicy("default")
    policy.failed(now=0.0)
    for _ in range(4):
        policy.failed(now=0.0)  # 4.0 s
    assert policy.give_up_in(60.0, now=1.0) == 59.0 and policy.backoff == 4.0
    assert policy.give_up_in(5.0, now=2.0) == 3.0 and policy.backoff == 3.0  # last try at 5 s
    assert policy.give_up_in(5.0, now=5.0) <= 0


def test_closing_the_failed_connection_never_raises():
    ErrorPolicy("default").close_connection()
    ErrorPolicy("no-such-alias").close_connection()  # an unknown alias is not a second error
