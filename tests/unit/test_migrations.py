"""Migration files: naming, order and statement splitting (no database needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpusched.store import MigrationError, StoreSettings, load_migrations


def test_repository_migrations_load_in_order() -> None:
    migrations = load_migrations(StoreSettings().migrations_dir)
    assert [m.version for m in migrations] == sorted(m.version for m in migrations)
    assert migrations[0].version == 1
    assert all(m.statements() for m in migrations)


def test_statements_split_and_comments_drop(tmp_path: Path) -> None:
    (tmp_path / "0001_two.sql").write_text(
        "-- a comment; with a semicolon\nCREATE TABLE a (x UInt8) ENGINE = Memory;\n"
        "CREATE TABLE b (s String DEFAULT 'a;b') ENGINE = Memory;\n"
    )
    (migration,) = load_migrations(tmp_path)
    assert migration.statements() == [
        "CREATE TABLE a (x UInt8) ENGINE = Memory",
        "CREATE TABLE b (s String DEFAULT 'a;b') ENGINE = Memory",
    ]


@pytest.mark.parametrize("names", [["1_bad.sql"], ["0001_a.sql", "0001_b.sql"]])
def test_bad_migration_folders_are_refused(tmp_path: Path, names: list[str]) -> None:
    for name in names:
        (tmp_path / name).write_text("SELECT 1;")
    with pytest.raises(MigrationError):
        load_migrations(tmp_path)
