"""The gpusched store: a migrated ClickHouse database that events are written into."""

from __future__ import annotations

import functools
import hashlib
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from clickhouse_connect.driver.client import Client
from pydantic import BaseModel, TypeAdapter

from gpusched.store.cluster import insert_settings
from gpusched.store.connection import connect
from gpusched.store.migrations import migrate
from gpusched.store.settings import StoreSettings
from gpusched.store.tables import TableSpec, table_for

__all__ = ["OffsetRange", "Store", "batch_token"]

# How the engine reads the JSON of events: the fields that are not columns (the schema
# version) are skipped, and timestamps are ISO 8601 with their offset, as pydantic writes.
_JSON_INPUT = {"input_format_skip_unknown_fields": 1, "date_time_input_format": "best_effort"}


@dataclass(frozen=True, slots=True, order=True)
class OffsetRange:
    """Offsets ``first``..``last`` (inclusive) of one topic partition."""

    topic: str
    partition: int
    first: int
    last: int


@functools.cache
def _json_list(model: type[BaseModel]) -> TypeAdapter[list[BaseModel]]:
    return TypeAdapter(list[model])  # type: ignore[valid-type]


def batch_token(group: str, ranges: Iterable[OffsetRange]) -> str:
    """A batch's deduplication token: the same offset ranges give the same token."""
    spec = ",".join(f"{r.topic}:{r.partition}:{r.first}-{r.last}" for r in sorted(ranges))
    return hashlib.sha256(f"{group}|{spec}".encode()).hexdigest()[:32]


class Store:
    """Writes events into their tables and runs SQL, on a migrated database."""

    def __init__(self, client: Client, cluster: str = "", applied: Sequence[int] = ()) -> None:
        self.client = client
        self.applied = list(applied)  # the migrations this open applied
        # every insert waits for the engine (no async insert), on a cluster for the shards
        self._insert: dict[str, Any] = {"async_insert": 0, **insert_settings(cluster)}

    @classmethod
    def open(cls, settings: StoreSettings | None = None) -> Store:
        """Connect as ``settings`` say and apply pending migrations."""
        settings = settings or StoreSettings()
        client = connect(settings.dsn, settings.database, settings.cluster)
        applied = migrate(client, settings.migrations_dir, settings.cluster)
        return cls(client, settings.cluster, applied)

    def insert_events(
        self, events: Iterable[BaseModel], token: str | None = None
    ) -> dict[str, int]:
        """Insert events, one block per table, synchronously (``async_insert=0``); return
        rows written per table. With ``token``, each table's block carries the
        deduplication token ``<token>:<table>``: inserting the same batch again with the
        same token is skipped by ClickHouse, in the tables and in the materialized views
        they feed (migration 0005)."""
        by_model: dict[type[BaseModel], list[BaseModel]] = defaultdict(list)
        for event in events:
            by_model[type(event)].append(event)
        written: dict[str, int] = {}
        for model, batch in by_model.items():
            spec = table_for(model)
            settings: dict[str, Any] = dict(self._insert)
            if token is not None:
                settings["insert_deduplication_token"] = f"{token}:{spec.name}"
                settings["deduplicate_blocks_in_dependent_materialized_views"] = 1
            if spec.rows is None:
                written[spec.name] = self._insert_json(spec, batch, settings)
                continue
            rows = [row for event in batch for row in spec.rows(event)]
            if rows:
                self.client.insert(
                    spec.name, rows, column_names=list(spec.columns), settings=settings
                )
            written[spec.name] = len(rows)
        return written

    def _insert_json(
        self, spec: TableSpec, batch: list[BaseModel], settings: dict[str, Any]
    ) -> int:
        """A table whose columns are its events' own fields: the events' JSON, parsed by
        the engine (``JSONEachRow``; fields that are not columns skipped). Telemetry goes
        this way: 7x faster than rows serialized by the client. The block is one JSON
        array, written by one serializer call (0.6x the time of one call per event)."""
        block = _json_list(type(batch[0])).dump_json(batch)
        settings = {**settings, **_JSON_INPUT}
        self.client.raw_insert(
            spec.name, list(spec.columns), insert_block=block, settings=settings, fmt="JSONEachRow"
        )
        return len(batch)

    def plan_batch(self, group: str, batch_id: str, ranges: Sequence[OffsetRange]) -> None:
        """Record, before inserting it, which offsets of which partitions a batch holds."""
        self.client.insert(
            "sink_batches",
            [[group, batch_id, r.topic, r.partition, r.first, r.last] for r in ranges],
            column_names=["consumer_group", "batch_id", "topic", "partition", "first_offset",
                          "last_offset"],
            settings=self._insert,
        )  # fmt: skip

    def planned(self, group: str) -> list[OffsetRange]:
        """The latest planned range of every partition the consumer group has planned."""
        rows = self.client.query(
            "SELECT topic, partition, argMax(first_offset, planned_at), "
            "argMax(last_offset, planned_at) FROM sink_batches "
            "WHERE consumer_group = {group:String} GROUP BY topic, partition",
            parameters={"group": group},
        ).result_rows
        return [OffsetRange(str(t), int(p), int(f), int(last)) for t, p, f, last in rows]

    def query(self, sql: str, parameters: dict[str, Any] | None = None) -> list[Sequence[Any]]:
        """Rows of a SELECT."""
        return list(self.client.query(sql, parameters=parameters).result_rows)
