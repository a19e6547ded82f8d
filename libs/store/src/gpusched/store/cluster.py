"""Cluster mode (``GPUSCHED_STORE_CLUSTER``): the same migrations, on a ClickHouse cluster.

The database is a ``Replicated`` database created ``ON CLUSTER``, so every DDL statement
run on one replica reaches all replicas of all shards through Keeper. Each table of a
migration becomes two:

- ``<table>_local``, the data of one shard: the migration's engine made replicated
  (``ReplacingMergeTree`` -> ``ReplicatedReplacingMergeTree``; the Replicated database
  fills in the Keeper path and replica name), with the migration's ORDER BY, TTL and
  settings;
- ``<table>``, a ``Distributed`` table over them, sharded on a hash of the first column of
  the ORDER BY key. Duplicates of an event share their whole sorting key, so they land on
  one shard, where ReplacingMergeTree (and ``FINAL``) collapses them as on one server.

Everything that reads and writes (the sink, the API, analysts) keeps using ``<table>``.
Materialized views are created on the local tables (each shard aggregates its own rows
into its own ``<target>_local``); plain views stay as they are (they read the Distributed
tables, so the whole cluster); ``ALTER ... ADD COLUMN`` is applied to both tables of
a pair, and ``non_replicated_deduplication_window`` becomes ``replicated_deduplication_window``
on the local table.

A statement of a form not listed here is refused (``MigrationError``), so a new migration
cannot silently skip cluster mode: the unit tests rewrite every migration shipped and have
the embedded engine parse each statement produced. Replication itself (Keeper, several
servers) cannot run on the development machines; it is not exercised by the tests.
"""

from __future__ import annotations

import re

from gpusched.store.errors import MigrationError

__all__ = ["database_ddl", "for_cluster", "insert_settings", "quoted"]

_CREATE = re.compile(
    r"^CREATE TABLE IF NOT EXISTS\s+(?P<name>\w+)\s*\((?P<columns>.*)\)\s*"
    r"ENGINE\s*=\s*(?P<engine>\w*MergeTree)(?P<args>\([^)]*\))?(?P<rest>.*)$",
    re.DOTALL,
)
_ORDER = re.compile(r"ORDER BY\s*\(?\s*(\w+)")
_VIEW = re.compile(
    r"^CREATE MATERIALIZED VIEW IF NOT EXISTS\s+(?P<name>\w+)\s+TO\s+(?P<target>\w+)\s+AS\s+"
    r"(?P<select>.*)$",
    re.DOTALL,
)
_PLAIN_VIEW = re.compile(r"^CREATE VIEW\b")
_FROM = re.compile(r"\bFROM\s+(\w+)")
_ALTER = re.compile(r"^ALTER TABLE\s+(?P<name>\w+)\s+(?P<change>.*)$", re.DOTALL)
_WINDOW = re.compile(r"^MODIFY SETTING non_replicated_deduplication_window\s*=\s*(\d+)$")


def quoted(text: str) -> str:
    """A ClickHouse string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def database_ddl(database: str, cluster: str) -> str:
    """The Replicated database, on every server of ``cluster``."""
    path = quoted(f"/clickhouse/databases/{database}")
    return (
        f"CREATE DATABASE IF NOT EXISTS {database} ON CLUSTER {quoted(cluster)} "
        f"ENGINE = Replicated({path}, '{{shard}}', '{{replica}}')"
    )


def insert_settings(cluster: str) -> dict[str, int]:
    """What an insert into a Distributed table needs: acknowledged once the shards have
    it, not when it is queued on the server that took it."""
    return {"distributed_foreground_insert": 1} if cluster else {}


def for_cluster(statement: str, cluster: str) -> list[str]:
    """The statements that do on ``cluster`` what ``statement`` does on one server; with no
    cluster, ``statement`` itself."""
    text = statement.strip()
    if not cluster:
        return [text]
    if match := _CREATE.match(text):
        return _table(match, cluster)
    if match := _VIEW.match(text):
        select = _FROM.sub(lambda m: f"FROM {m.group(1)}_local", match["select"])
        return [
            f"CREATE MATERIALIZED VIEW IF NOT EXISTS {match['name']} "
            f"TO {match['target']}_local AS {select}"
        ]
    if _PLAIN_VIEW.match(text):
        return [text]  # a view reads the Distributed tables: the whole cluster
    if match := _ALTER.match(text):
        name, change = match["name"], match["change"].strip()
        if window := _WINDOW.match(change):
            setting = f"replicated_deduplication_window = {window.group(1)}"
            return [f"ALTER TABLE {name}_local MODIFY SETTING {setting}"]
        if change.upper().startswith("ADD COLUMN"):
            return [f"ALTER TABLE {name}_local {change}", f"ALTER TABLE {name} {change}"]
    raise MigrationError(
        f"cluster mode cannot rewrite this statement (CREATE TABLE ... MergeTree, CREATE "
        f"MATERIALIZED VIEW ... TO, CREATE VIEW, ALTER TABLE ... ADD COLUMN or MODIFY "
        f"SETTING non_replicated_deduplication_window): {text[:120]!r}"
    )


def _table(match: re.Match[str], cluster: str) -> list[str]:
    name = match["name"]
    rest = match["rest"].replace(
        "non_replicated_deduplication_window", "replicated_deduplication_window"
    )
    order = _ORDER.search(rest)
    if order is None:
        raise MigrationError(f"table {name} has no ORDER BY to shard on")
    engine = f"Replicated{match['engine']}{match['args'] or ''}"
    local = (
        f"CREATE TABLE IF NOT EXISTS {name}_local\n({match['columns']})\nENGINE = {engine}{rest}"
    )
    distributed = (
        f"CREATE TABLE IF NOT EXISTS {name} AS {name}_local "
        f"ENGINE = Distributed({quoted(cluster)}, currentDatabase(), '{name}_local', "
        f"cityHash64({order.group(1)}))"
    )
    return [local, distributed]
