"""Bad input at registration (issue 31): an ``async def`` where the worker needs a sync one."""

import pytest
from django.core.exceptions import ImproperlyConfigured

from django_pgjobs import handler, registry


def test_an_async_backoff_is_refused_before_anything_is_registered():
    async def backoff(attempt):
        return 1.0

    with pytest.raises(ImproperlyConfigured, match=r"backoff= must be a sync function.*async def"):

        @handler("test.bad_async_backoff", backoff=backoff)
        async def h(job):
            return None

    assert registry.get("test.bad_async_backoff") is None
