"""Versioned schema migrations: ``NNNN_name.sql`` files, applied once each, in order."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from clickhouse_connect.driver.client import Client

from gpusched.store.cluster import for_cluster, insert_settings
from gpusched.store.errors import MigrationError

__all__ = ["Migration", "applied_migrations", "load_migrations", "migrate"]

_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_LEDGER = """
CREATE TABLE IF NOT EXISTS schema_migrations
(
    version    UInt32,
    name       String,
    checksum   String,
    applied_at DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = MergeTree ORDER BY version
"""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def label(self) -> str:
        return f"{self.version:04d}_{self.name}"

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()

    def statements(self, cluster: str = "") -> list[str]:
        """The SQL statements of the file (split on ';' at line ends; comments dropped),
        rewritten for ``cluster`` when one is named."""
        body = "\n".join(
            line for line in self.sql.splitlines() if not line.lstrip().startswith("--")
        )
        found = [s.strip() for s in re.split(r";\s*(?:\n|$)", body) if s.strip()]
        return [c for s in found for c in for_cluster(s, cluster)]


def load_migrations(folder: Path) -> list[Migration]:
    """Every migration in ``folder``, by version; a misnamed or repeated version is an error."""
    if not folder.is_dir():
        raise MigrationError(f"migrations folder {folder} does not exist")
    found: dict[int, Migration] = {}
    for path in sorted(folder.glob("*.sql")):
        match = _FILE.match(path.name)
        if match is None:
            raise MigrationError(f"migration file {path.name!r} is not named NNNN_name.sql")
        version = int(match.group(1))
        if version in found:
            raise MigrationError(f"two migrations share version {version}: {path.name}")
        found[version] = Migration(version, match.group(2), path.read_text())
    return [found[v] for v in sorted(found)]


def applied_migrations(client: Client, cluster: str = "") -> dict[int, str]:
    """version → checksum of the migrations recorded in ``schema_migrations``."""
    for statement in for_cluster(_LEDGER, cluster):
        client.command(statement)
    rows = client.query("SELECT version, checksum FROM schema_migrations ORDER BY version")
    return {int(v): str(c) for v, c in rows.result_rows}


def migrate(client: Client, folder: Path, cluster: str = "") -> list[int]:
    """Apply the migrations not yet recorded, in order; return the versions applied.
    With ``cluster``, each statement as rewritten for that ClickHouse cluster
    (``gpusched.store.cluster``); the checksums stay those of the files.

    An applied migration whose file has changed since is refused: schema history is
    append-only, so fix forward with a new file.
    """
    done = applied_migrations(client, cluster)
    applied: list[int] = []
    for migration in load_migrations(folder):
        if migration.version in done:
            if done[migration.version] != migration.checksum:
                raise MigrationError(
                    f"migration {migration.label} changed after it was "
                    "applied; add a new migration instead"
                )
            continue
        for statement in migration.statements(cluster):
            try:
                client.command(statement)
            except Exception as exc:
                raise MigrationError(f"migration {migration.label} failed: {exc}") from exc
        client.insert(
            "schema_migrations",
            [[migration.version, migration.name, migration.checksum]],
            column_names=["version", "name", "checksum"],
            settings=insert_settings(cluster),
        )
        applied.append(migration.version)
    return applied
