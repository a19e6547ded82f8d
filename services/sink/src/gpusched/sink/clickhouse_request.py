"""What a request to ClickHouse's HTTP interface carries, and how a query fails, as the
server would say it: the error (code, name, HTTP status), the body without its encoding,
and an insert's rows (after the statement in ``query``, or after its first line)."""

from __future__ import annotations

import gzip
import re
import zlib
from dataclasses import dataclass
from typing import Any

import lz4.frame

from gpusched.sink.compressed import decompress
from gpusched.store import quoted

__all__ = ["Query", "QueryFailed", "decoded_body", "insert_rows", "literal"]

# an insert whose rows are the request's body: INSERT INTO <table> [(columns)] FORMAT F
_INSERT = re.compile(r"^\s*INSERT\s+INTO\s+(.+?)\s+FORMAT\s+(\w+)\s*;?\s*$", re.I | re.S)
_LEADING_INSERT = re.compile(
    rb"^\s*INSERT\s+INTO\s+([^\n]+?)\s+FORMAT\s+(\w+)[ \t]*\r?\n", re.IGNORECASE
)
_DECODE = {
    "": lambda b: b, "identity": lambda b: b, "lz4": lz4.frame.decompress,
    "gzip": gzip.decompress, "x-gzip": gzip.decompress, "deflate": zlib.decompress,
}  # fmt: skip
_CODE = re.compile(r"Code: (\d+)\.")
_NAME = re.compile(r"\(([A-Z_]+)\)(?: \(version [^)]*\))?\.?\s*$")
# ClickHouse's server answers these error names with these statuses (exceptionCodeToHTTPStatus)
_STATUS = {
    **dict.fromkeys(("REQUIRED_PASSWORD",), 401),
    **dict.fromkeys(
        ("UNKNOWN_USER", "WRONG_PASSWORD", "AUTHENTICATION_FAILED", "ACCESS_DENIED"), 403
    ),
    **dict.fromkeys(
        (
            "BAD_ARGUMENTS", "CANNOT_PARSE_TEXT", "CANNOT_PARSE_QUOTED_STRING",
            "CANNOT_PARSE_DATE", "CANNOT_PARSE_DATETIME", "CANNOT_PARSE_NUMBER",
            "CANNOT_PARSE_INPUT_ASSERTION_FAILED", "DUPLICATE_COLUMN", "ILLEGAL_COLUMN",
            "THERE_IS_NO_COLUMN", "SYNTAX_ERROR", "INCORRECT_DATA", "TYPE_MISMATCH",
            "TOO_DEEP_AST", "TOO_BIG_AST",
        ),
        400,
    ),
    **dict.fromkeys(
        (
            "UNKNOWN_TABLE", "UNKNOWN_FUNCTION", "UNKNOWN_IDENTIFIER", "UNKNOWN_TYPE",
            "UNKNOWN_STORAGE", "UNKNOWN_DATABASE", "UNKNOWN_SETTING", "UNKNOWN_FORMAT",
            "UNKNOWN_AGGREGATE_FUNCTION", "UNKNOWN_TYPE_OF_QUERY",
        ),
        404,
    ),
    "QUERY_IS_TOO_LARGE": 413,
    "NOT_IMPLEMENTED": 501,
    "TIMEOUT_EXCEEDED": 408,
}  # fmt: skip


class QueryFailed(Exception):
    """A ClickHouse error: its code, name and text as the server would send them."""

    def __init__(self, message: str, code: int | None = None, name: str | None = None) -> None:
        text = message.strip()
        found = _CODE.findall(text)
        self.code = code if code is not None else int(found[0]) if found else 1001
        named = _NAME.search(text)
        self.name = name or (named.group(1) if named else "STD_EXCEPTION")
        # the embedded engine repeats "Code: N. DB::Exception: " when it rethrows
        prefix = f"Code: {self.code}. DB::Exception: "
        while text.startswith(prefix + prefix):
            text = text[len(prefix) :]
        self.text = text if text.startswith("Code:") else f"{prefix}{text} ({self.name})"
        super().__init__(self.text)

    @property
    def status(self) -> int:
        return _STATUS.get(self.name, 500)


@dataclass
class Query:
    """One request: its SQL, output format, ``{name:Type}`` parameters, database, and
    (writable only) settings and an insert's rows: (table and columns, format) with the
    body."""

    sql: str
    fmt: str
    params: dict[str, str]
    database: str | None
    settings: dict[str, str]
    rows: tuple[str, str] | None = None
    body: bytes = b""


def literal(value: Any) -> str:
    """A setting's value as ClickHouse reads it: a number as such, anything else quoted."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return repr(value)
    return quoted(str(value))


def decoded_body(body: bytes, encoding: str, args: Any) -> bytes:
    """The request body without its HTTP content encoding and ClickHouse's compression."""
    decode = _DECODE.get(encoding.strip().lower())
    if decode is None:
        raise QueryFailed(
            f"Unknown Content-Encoding {encoding!r}", 1001, "UNKNOWN_COMPRESSION_METHOD"
        )
    try:
        body = decode(body) if body else body
        if args.get("decompress") == "1" and body:
            body = decompress(body)
    except (ValueError, RuntimeError, OSError, zlib.error) as exc:
        raise QueryFailed(str(exc), 271, "CANNOT_DECOMPRESS") from exc
    return body


def insert_rows(query: str, body: bytes) -> tuple[str, tuple[str, str], bytes] | None:
    """An insert whose rows are in ``body``: (its statement, (table and columns, format),
    the rows), with the statement in ``query`` or, clickhouse-connect's Native inserts, as
    the body's first line; None for anything else."""
    inserts = _INSERT.match(query) if body else None
    if inserts:
        return query, (inserts.group(1), inserts.group(2)), body
    leading = _LEADING_INSERT.match(body)
    if leading:
        sql = leading.group(0).decode().strip()
        return sql, (leading.group(1).decode(), leading.group(2).decode()), body[leading.end() :]
    return None
