"""A postgresql-vendor backend whose DB-API module is not psycopg 3 (as with psycopg2)."""

import types

from django.db.backends.postgresql.base import DatabaseWrapper as PostgresWrapper


class DatabaseWrapper(PostgresWrapper):
    Database = types.ModuleType("psycopg2")
