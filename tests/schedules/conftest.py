from tests.schedules.helpers import clean_decorators, schedules  # noqa: F401
