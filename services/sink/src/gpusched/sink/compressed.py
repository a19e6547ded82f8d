"""ClickHouse's own compressed block stream, which its HTTP interface speaks with
``compress=1`` (the response) and ``decompress=1`` (the request body), and which the JDBC
driver asks for by default: blocks of a CityHash128 checksum (v1.0.2; its pair's two
uint64, little-endian), the method byte (0x82: LZ4), the compressed size including this
9-byte header and the uncompressed size (both little-endian uint32), then the LZ4 block."""

from __future__ import annotations

import struct

import lz4.block
from clickhouse_cityhash.cityhash import CityHash128

__all__ = ["compress", "decompress"]

_LZ4 = 0x82
_NONE = 0x02
_HEADER = struct.Struct("<BII")
_BLOCK = 1 << 20  # ClickHouse's max_compress_block_size
_MASK = (1 << 64) - 1


def _checksum(block: bytes) -> bytes:
    digest = CityHash128(block)  # (first << 64) | second of CityHash's pair
    return struct.pack("<QQ", digest >> 64, digest & _MASK)


def compress(data: bytes) -> bytes:
    """``data`` as LZ4 blocks of at most 1 MiB each, every one with its checksum."""
    out = bytearray()
    for start in range(0, len(data), _BLOCK):
        raw = data[start : start + _BLOCK]
        packed = lz4.block.compress(raw, store_size=False)
        block = _HEADER.pack(_LZ4, _HEADER.size + len(packed), len(raw)) + packed
        out += _checksum(block) + block
    return bytes(out)


def decompress(data: bytes) -> bytes:
    """The bytes of a compressed block stream; ``ValueError`` for a damaged one."""
    out = bytearray()
    at = 0
    while at < len(data):
        if len(data) - at < 16 + _HEADER.size:
            raise ValueError("truncated compressed block header")
        method, size, raw_size = _HEADER.unpack_from(data, at + 16)
        block = data[at + 16 : at + 16 + size]
        if len(block) != size or _checksum(block) != data[at : at + 16]:
            raise ValueError("compressed block: checksum mismatch or truncated")
        payload = block[_HEADER.size :]
        if method == _LZ4:
            out += lz4.block.decompress(payload, uncompressed_size=raw_size)
        elif method == _NONE:
            out += payload
        else:
            raise ValueError(f"unsupported compression method 0x{method:02x}")
        at += 16 + size
    return bytes(out)
