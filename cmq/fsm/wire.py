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
    """Reads what `Writer` wrote; every shortfall is an `InvalidParameter`."""

    __slots__ = ("_data", "_pos")

    def __init__(self, data: bytes | bytearray | memoryview, pos: int = 0) -> None:
        self._data = memoryview(data)
        self._pos = pos

    @property
    def pos(self) -> int:
        return self._pos

    def _take(self, n: int) -> memoryview:
        end = self._pos + n
        if n < 0 or end > len(self._data):
            raise InvalidParameter(f"truncated data at byte {self._pos} (need {n})")
        view = self._data[self._pos : end]
        self._pos = end
        return view

    def u8(self) -> int:
        return int(_U8.unpack(self._take(1))[0])

    def u16(self) -> int:
        return int(_U16.unpack(self._take(2))[0])

    def u32(self) -> int:
        return int(_U32.unpack(self._take(4))[0])

    def i64(self) -> int:
        return int(_I64.unpack(self._take(8))[0])

    def boolean(self) -> bool:
        v = self.u8()
        if v > 1:
            raise InvalidParameter(f"bad boolean {v}")
        return v == 1

    def raw(self, n: int) -> bytes:
        return bytes(self._take(n))

    def blob(self) -> bytes:
        return self.raw(self.u32())

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

    def remaining(self) -> int:
        return len(self._data) - self._pos

    def end(self) -> None:
        """Raise if bytes are left over."""
        if self._pos != len(self._data):
            raise InvalidParameter(f"{len(self._data) - self._pos} trailing bytes")
