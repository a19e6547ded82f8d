"""API tokens: who may do what, for which tenants.

A token reads ``gst_<id>_<secret>``: the id finds its record, the secret is checked
against the record's Argon2id hash (argon2-cffi); the secret itself is never stored and
is shown once, when the token is created. Records live in a JSON file (the embedded
default: ``<checkout>/var/tokens.json``, ``GPUSCHED_API_TOKENS_FILE``), written
atomically; every process that checks tokens rereads it when it changes (looked at no
more than once a second), so a revocation takes effect within seconds everywhere.

Roles are ordered, each holding the rights of those below it:
``viewer`` (read) < ``submitter`` (submit and cancel jobs of its tenants) <
``operator`` (parameters within bounds, drain and resume nodes) < ``admin`` (everything:
tokens, parameters marked dangerous, every tenant).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import tempfile
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from pydantic import BaseModel, Field, TypeAdapter

__all__ = [
    "ALL_TENANTS",
    "Role",
    "TokenError",
    "TokenFile",
    "TokenRecord",
    "describe",
]

ALL_TENANTS = "*"
_PREFIX = "gst"
_RECHECK_S = 1.0


class Role(StrEnum):
    VIEWER = "viewer"
    SUBMITTER = "submitter"
    OPERATOR = "operator"
    ADMIN = "admin"

    @property
    def rank(self) -> int:
        return list(Role).index(self)

    def holds(self, needed: Role) -> bool:
        return self.rank >= needed.rank


class TokenError(ValueError):
    """A token operation refused (unknown token, bad name or tenant)."""


class TokenRecord(BaseModel):
    """One token as stored: everything but its secret."""

    id: str
    name: str
    role: Role
    tenants: list[str] = Field(description=f"tenants it acts for; {ALL_TENANTS!r}: every one")
    secret_hash: str
    created_at: datetime
    revoked_at: datetime | None = None

    @property
    def active(self) -> bool:
        return self.revoked_at is None

    def acts_for(self, tenant: str) -> bool:
        return self.role is Role.ADMIN or ALL_TENANTS in self.tenants or tenant in self.tenants


_RECORDS = TypeAdapter(list[TokenRecord])


class TokenFile:
    """The token records of one file: create, list, revoke, and check a presented token."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._hasher = PasswordHasher()
        self._lock = threading.Lock()
        self._records: dict[str, TokenRecord] = {}
        self._stamp: tuple[int, int] | None = None  # (mtime_ns, size) of what was read
        self._looked_at = -1e9
        # tokens whose secret was verified: sha256 of the token -> its id (Argon2 is slow
        # on purpose; a token is verified once per process, its record checked every time)
        self._verified: dict[str, str] = {}

    # -- reading ------------------------------------------------------------------------
    def records(self) -> list[TokenRecord]:
        with self._lock:
            self._refresh(force=True)
            return sorted(self._records.values(), key=lambda r: r.created_at)

    def _refresh(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._looked_at < _RECHECK_S:
            return
        self._looked_at = now
        try:
            st = self.path.stat()
        except FileNotFoundError:
            self._records, self._stamp = {}, None
            return
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._stamp:
            return
        try:
            records = _RECORDS.validate_json(self.path.read_bytes())
        except ValueError as exc:
            raise TokenError(f"{self.path}: not a token file ({exc})") from exc
        self._records = {r.id: r for r in records}
        self._stamp = stamp

    def identify(self, token: str) -> TokenRecord | None:
        """The record of a presented token; None when it is unknown, malformed, wrong or
        revoked."""
        parts = token.split("_", 2)
        if len(parts) != 3 or parts[0] != _PREFIX:
            return None
        token_id, secret = parts[1], parts[2]
        digest = hashlib.sha256(token.encode()).hexdigest()
        with self._lock:
            self._refresh()
            record = self._records.get(token_id)
            if record is None or not record.active:
                return None
            if self._verified.get(digest) != token_id:
                try:
                    self._hasher.verify(record.secret_hash, secret)
                except (VerificationError, InvalidHashError):
                    return None
                self._verified[digest] = token_id
        return record

    # -- changing -------------------------------------------------------------------------
    def create(
        self, role: Role, tenants: Sequence[str] = (), name: str | None = None
    ) -> tuple[TokenRecord, str]:
        """A new token: its record and the token itself (shown once, never stored)."""
        token_id = secrets.token_hex(6)
        secret = secrets.token_urlsafe(32)
        name = name or f"{role.value}-{token_id}"
        tenants = sorted(set(tenants))
        if role is Role.SUBMITTER and not tenants:
            raise TokenError(f"a submitter needs --tenant (or --tenant '{ALL_TENANTS}')")
        with self._lock:
            self._refresh(force=True)
            if any(r.name == name and r.active for r in self._records.values()):
                raise TokenError(f"a token named {name!r} exists; revoke it or pick another name")
            record = TokenRecord(
                id=token_id,
                name=name,
                role=role,
                tenants=tenants,
                secret_hash=self._hasher.hash(secret),
                created_at=datetime.now(UTC),
            )
            self._write({**self._records, token_id: record})
        return record, f"{_PREFIX}_{token_id}_{secret}"

    def revoke(self, which: str) -> TokenRecord:
        """Revoke the active token with this id or name."""
        with self._lock:
            self._refresh(force=True)
            found = [r for r in self._records.values() if which in (r.id, r.name) and r.active]
            if not found:
                raise TokenError(f"no active token with id or name {which!r}")
            record = found[0].model_copy(update={"revoked_at": datetime.now(UTC)})
            self._write({**self._records, record.id: record})
        return record

    def _write(self, records: dict[str, TokenRecord]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        body = _RECORDS.dump_json(list(records.values()), indent=2)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".tokens.")
        try:
            os.fchmod(fd, 0o600)  # hashes only, but nobody else's business
            with os.fdopen(fd, "wb") as handle:
                handle.write(body)
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self._records = records
        self._stamp = None  # reread (and stamp) on next use


def describe(record: TokenRecord) -> dict[str, object]:
    """A record as shown to people (no hash)."""
    return record.model_dump(mode="json", exclude={"secret_hash"})
