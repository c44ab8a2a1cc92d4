"""A wrapper of Django's postgresql backend, as instrumented backends are: still PostgreSQL."""

from django.db.backends.postgresql.base import DatabaseWrapper as PostgresWrapper


class DatabaseWrapper(PostgresWrapper):
    queries_seen = 0
