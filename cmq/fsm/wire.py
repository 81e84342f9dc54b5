"""Little-endian binary writer/reader shared by commands, segment records and snapshot images.

Pure: no I/O. A `Reader` raises `InvalidParameter` on any malformed input (short data, bad UTF-8,
trailing bytes); callers that decode *committed* data turn that into `InvariantBroken`.
"""

from __future__ import annotations

import struct
import sys
from array import array

from cmq.errors import InvalidParameter

_U8 = struct.Struct("<B")
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")

_LITTLE = sys.byteorder == "little"


class Writer:
    """Appends fixed-width little-endian fields and length-prefixed strings to a buffer."""

    __slots__ = ("_parts",)

    def __init__(self) -> None:
        self._parts: list[bytes | bytearray | memoryview] = []

    def u8(self, v: int) -> None:
        self._parts.append(_U8.pack(v))

    def u16(self, v: int) -> None:
        self._parts.append(_U16.pack(v))

    def u32(self, v: int) -> None:
        self._parts.append(_U32.pack(v))

    def i64(self, v: int) -> None:
        self._parts.append(_I64.pack(v))

    def raw(self, data: bytes | bytearray | memoryview) -> None:
        self._parts.append(data)

    def blob(self, data: bytes | bytearray | memoryview) -> None:
        """``[u32 len][bytes]``."""
        self._parts.append(_U32.pack(len(data)))
        self._parts.append(data)

    def text(self, s: str) -> None:
        """``[u32 len][utf-8]``."""
        self.blob(s.encode())

    def opt_text(self, s: str | None) -> None:
        if s is None:
            self.u8(0)
        else:
            self.u8(1)
            self.text(s)

    def opt_i64(self, v: int | None) -> None:
        if v is None:
            self.u8(0)
        else:
            self.u8(1)
            self.i64(v)

    def int_array(self, a: array[int]) -> None:
        """``[u32 count][items]`` in little-endian order; a C-level copy (no per-item work)."""
        self.u32(len(a))
        if _LITTLE:
            self._parts.append(memoryview(a).cast("B"))
        else:  # pragma: no cover - big-endian hosts only
            b = array(a.typecode, a)
            b.byteswap()
            self._parts.append(b.tobytes())

    def getvalue(self) -> bytes:
        return b"".join(self._parts)


class Reader:
    """Reads what `Writer` wrote; every shortfall is an `InvalidParameter`.

    Fixed-width fields are unpacked in place (``unpack_from``): this sits on the apply path of
    every command and snapshot, so it avoids a slice per field."""

    __slots__ = ("_data", "_len", "_pos")

    def __init__(self, data: bytes | bytearray | memoryview, pos: int = 0) -> None:
        self._data = memoryview(data)
        self._len = len(self._data)
        self._pos = pos

    @property
    def pos(self) -> int:
        return self._pos

    def _advance(self, n: int) -> int:
        """The current position, after reserving ``n`` bytes from it."""
        pos = self._pos
        end = pos + n
        if n < 0 or end > self._len:
            raise InvalidParameter(f"truncated data at byte {pos} (need {n})")
        self._pos = end
        return pos

    def _take(self, n: int) -> memoryview:
        pos = self._advance(n)
        return self._data[pos : pos + n]

    def u8(self) -> int:
        return self._data[self._advance(1)]

    def u16(self) -> int:
        return int(_U16.unpack_from(self._data, self._advance(2))[0])

    def u32(self) -> int:
        return int(_U32.unpack_from(self._data, self._advance(4))[0])

    def i64(self) -> int:
        return int(_I64.unpack_from(self._data, self._advance(8))[0])

    def boolean(self) -> bool:
        v = self._data[self._advance(1)]
        if v > 1:
            raise InvalidParameter(f"bad boolean {v}")
        return v == 1

    def raw(self, n: int) -> bytes:
        return bytes(self._take(n))

    def blob(self) -> bytes:
        return bytes(self._take(self.u32()))

    def text(self) -> str:
        data = self._take(self.u32())
        try:
            return str(data, "utf-8")
        except UnicodeDecodeError as e:
            raise InvalidParameter(f"bad UTF-8 text: {e}") from None

    def opt_text(self) -> str | None:
        return self.text() if self.boolean() else None

    def opt_i64(self) -> int | None:
        return self.i64() if self.boolean() else None

    def int_array(self, typecode: str) -> array[int]:
        out: array[int] = array(typecode)
        n = self.u32()
        out.frombytes(self._take(n * out.itemsize))
        if not _LITTLE:  # pragma: no cover - big-endian hosts only
            out.byteswap()
        return out

    @property
    def data(self) -> memoryview:
        """The whole buffer (for a decoder that walks a run of fields itself, then `seek`s)."""
        return self._data

    def seek(self, pos: int) -> None:
        """Continue at ``pos`` (at most the end of the data)."""
        if not 0 <= pos <= self._len:
            raise InvalidParameter(f"position {pos} beyond the {self._len} bytes")
        self._pos = pos

    def remaining(self) -> int:
        return self._len - self._pos

    def count(self, item_size: int) -> int:
        """A u32 item count, rejected (`InvalidParameter`) when the remaining bytes cannot hold
        that many items of at least ``item_size`` bytes (so a forged count cannot make a
        decoder loop or allocate for nothing)."""
        n = self.u32()
        if n * item_size > self._len - self._pos:
            raise InvalidParameter(f"count {n} exceeds the remaining {self.remaining()} bytes")
        return n

    def end(self) -> None:
        """Raise if bytes are left over."""
        if self._pos != self._len:
            raise InvalidParameter(f"{self._len - self._pos} trailing bytes")
