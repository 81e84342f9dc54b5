"""`AppendLog`: the simplest useful `StateMachine` -- an ordered list of applied commands.

Used by the demo node, the benchmark and the tests that check "every acknowledged proposal is
applied on every replica exactly once, in the same order". Its snapshot is the whole list.
"""

from __future__ import annotations

import struct
import zlib

_ITEM = struct.Struct(">QI")


class AppendLog:
    """Applied commands in order, with the entry index each came from."""

    __slots__ = ("commands", "indexes")

    def __init__(self) -> None:
        self.commands: list[bytes] = []
        self.indexes: list[int] = []

    def apply(self, index: int, command: bytes) -> object:
        """Record ``command``; the result is its position (0-based) in the applied order."""
        self.commands.append(command)
        self.indexes.append(index)
        return len(self.commands) - 1

    def snapshot(self) -> bytes:
        parts = [struct.pack(">I", len(self.commands))]
        for i, c in zip(self.indexes, self.commands, strict=True):
            parts.append(_ITEM.pack(i, len(c)))
            parts.append(c)
        body = b"".join(parts)
        return struct.pack(">I", zlib.crc32(body)) + body

    def restore(self, index: int, data: bytes) -> None:
        self.commands = []
        self.indexes = []
        if not data:
            return
        (crc,) = struct.unpack_from(">I", data, 0)
        body = memoryview(data)[4:]
        if zlib.crc32(body) != crc:
            raise ValueError(f"snapshot at {index} fails its checksum")
        (n,) = struct.unpack_from(">I", body, 0)
        pos = 4
        for _ in range(n):
            i, size = _ITEM.unpack_from(body, pos)
            pos += _ITEM.size
            self.indexes.append(i)
            self.commands.append(bytes(body[pos : pos + size]))
            pos += size

    def digest(self) -> int:
        """A checksum of the applied sequence (cheap equality check across replicas)."""
        h = 0
        for c in self.commands:
            h = zlib.crc32(c, h)
        return h


class Checksum:
    """A constant-size `StateMachine`: how many commands were applied and a running CRC of them.

    For benchmarks and soak runs, where `AppendLog`'s snapshot (every command ever applied)
    would grow without bound and dominate the cost being measured.
    """

    __slots__ = ("count", "crc")

    def __init__(self) -> None:
        self.count = 0
        self.crc = 0

    def apply(self, index: int, command: bytes) -> object:
        self.count += 1
        self.crc = zlib.crc32(command, self.crc)
        return self.count - 1

    def snapshot(self) -> bytes:
        return struct.pack(">QI", self.count, self.crc)

    def restore(self, index: int, data: bytes) -> None:
        if not data:
            self.count, self.crc = 0, 0
            return
        if len(data) != 12:
            raise ValueError(f"snapshot at {index} is {len(data)} bytes, expected 12")
        self.count, self.crc = struct.unpack(">QI", data)
