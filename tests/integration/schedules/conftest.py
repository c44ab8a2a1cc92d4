from tests.support.schedules import clean_decorators, schedules  # noqa: F401
