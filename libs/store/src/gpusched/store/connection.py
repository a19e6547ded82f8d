"""Opening ClickHouse through clickhouse-connect: the embedded chDB engine or a server."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import clickhouse_connect
from clickhouse_connect.driver.client import Client

from gpusched.store.cluster import database_ddl
from gpusched.store.errors import UnsupportedDsn

__all__ = ["connect"]

_DATABASE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def connect(dsn: str, database: str, cluster: str = "") -> Client:
    """A client on ``database`` (created if missing) at ``dsn``; with ``cluster``, the
    database is a Replicated one on every server of that cluster (a server DSN only).

    The embedded engine allows one data directory per process and one process per
    directory: the process that calls this with a ``chdb://`` DSN owns that directory.
    """
    scheme = urlsplit(dsn).scheme
    if scheme not in ("chdb", "http", "https", "clickhouse", "clickhouses"):
        raise UnsupportedDsn(
            f"unsupported store DSN scheme {scheme!r} in {dsn!r}; use chdb:///<dir> or http(s)://"
        )
    if not _DATABASE_NAME.match(database):
        raise UnsupportedDsn(f"invalid ClickHouse database name {database!r}")
    if cluster and scheme == "chdb":
        raise UnsupportedDsn("cluster mode (GPUSCHED_STORE_CLUSTER) needs a ClickHouse server DSN")
    admin = clickhouse_connect.get_client(dsn=dsn)
    if cluster:
        admin.command(database_ddl(database, cluster))
    else:
        admin.command(f"CREATE DATABASE IF NOT EXISTS {database}")
    if scheme == "chdb":
        # The embedded engine is shared within the process: point a second client at the db.
        return clickhouse_connect.get_client(dsn=dsn, database=database)
    admin.close()
    return clickhouse_connect.get_client(dsn=dsn, database=database)
