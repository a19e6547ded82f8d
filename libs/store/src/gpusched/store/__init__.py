"""gpusched.store: ClickHouse schema, migrations and event writer (clickhouse-connect only)."""

from gpusched.store.cluster import quoted
from gpusched.store.connection import connect
from gpusched.store.errors import MigrationError, StoreError, UnsupportedDsn
from gpusched.store.migrations import Migration, applied_migrations, load_migrations, migrate
from gpusched.store.pack import query_pack
from gpusched.store.reader import QueryAnswer, QueryRefused, StoreUnreachable, read_query
from gpusched.store.settings import StoreSettings, checkout_root
from gpusched.store.store import OffsetRange, Store, batch_token
from gpusched.store.tables import TABLES, TableSpec, table_for

__all__ = [
    "TABLES",
    "Migration",
    "MigrationError",
    "OffsetRange",
    "QueryAnswer",
    "QueryRefused",
    "Store",
    "StoreError",
    "StoreSettings",
    "StoreUnreachable",
    "TableSpec",
    "UnsupportedDsn",
    "applied_migrations",
    "batch_token",
    "checkout_root",
    "connect",
    "load_migrations",
    "migrate",
    "query_pack",
    "quoted",
    "read_query",
    "table_for",
]
