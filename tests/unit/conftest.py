"""Fixtures of the unit tier (no database, no subprocess)."""

from tests.support.schedules import clean_decorators, schedules  # noqa: F401 - fixtures
