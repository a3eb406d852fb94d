"""CRC32C for the record loop: the `crc32c` package's own routine, called without Python.

Calling `crc32c.crc32c()` from the compiled loop costs two Python calls per record, which is
most of the loop's time (2.8 M records/s against 9 M without).  The package's extension
exports `get_state()`, whose state's first field is the routine the package chose at import
(SSE4.2 or ARMv8 hardware, else slicing-by-8).  We take that function pointer with ctypes,
check it against `crc32c.crc32c()` on test vectors and hand it to the decoder.  If anything
differs (another release of the package, another layout), the decoder keeps calling
`crc32c.crc32c()`: slower, equally correct.
"""

from __future__ import annotations

import ctypes

import crc32c
import crc32c._crc32c as extension

from app.ingest import _tfrecord

_VECTORS = [b"", b"a", b"123456789", bytes(range(256)) * 5, b"\x00" * 31 + b"\xff" * 33]


def enable_native_crc() -> bool:
    """Use the package's routine directly if it checks out; True if it does."""
    address = _routine_address()
    if address is None:
        return False
    _tfrecord.use_native_crc(address)
    if all(_tfrecord.native_crc32c(v) == crc32c.crc32c(v) for v in _VECTORS):
        return True
    _tfrecord.use_native_crc(0)
    return False


def disable_native_crc() -> None:
    """Back to calling `crc32c.crc32c()` (the tests run both ways)."""
    _tfrecord.use_native_crc(0)


def _routine_address() -> int | None:
    try:
        library = ctypes.CDLL(extension.__file__)
        library.get_state.restype = ctypes.POINTER(ctypes.c_void_p)
        library.get_state.argtypes = [ctypes.py_object]
        state = library.get_state(extension)
        return state[0] if state and state[0] else None
    except (OSError, AttributeError, ValueError):
        return None
