from django_pgjobs.retry import attempts_left, exponential_backoff


def test_backoff_doubles_and_caps():
    delays = [exponential_backoff(a, base=5, cap=60, jitter=0) for a in range(1, 7)]
    assert delays == [5, 10, 20, 40, 60, 60]


def test_backoff_jitter_stays_within_the_fraction():
    low = exponential_backoff(3, base=5, cap=600, jitter=0.1, rand=lambda: 0.0)
    high = exponential_backoff(3, base=5, cap=600, jitter=0.1, rand=lambda: 1.0)
    assert (low, high) == (18.0, 22.0)


def test_huge_attempt_numbers_do_not_overflow():
    assert exponential_backoff(10_000, base=1, cap=3600, jitter=0) == 3600


def test_attempts_left_counts_claims():
    assert attempts_left(1, 3) and attempts_left(2, 3)
    assert not attempts_left(3, 3)
