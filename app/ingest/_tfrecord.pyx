# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""TFRecord framing, both CRC32C checks and Event decoding into point arrays, in one pass.

A per-record Python loop tops out near a million records a second before it decodes
anything, so the hot loop lives here.  Only the Event fields a scalar reader needs are
decoded (wall_time, step, summary values with their plugin metadata and tensors, session_log);
everything else is skipped by wire type, the way any protobuf parser skips unknown fields.
The CRC itself is computed by the `crc32c` package, passed in as a callable.
"""

from cpython.buffer cimport PyBUF_READ
from cpython.memoryview cimport PyMemoryView_FromMemory
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy

import numpy as np

# Status of a decode call: where and why it stopped.
END = 0  # consumed the buffer exactly
TRUNCATED = 1  # the last record is incomplete: a writer mid-flush, read again later
CORRUPT = 2  # the framing itself is broken (length CRC, absurd length): nothing after is readable

# Half-precision values are converted by numpy afterwards (see `Columns.fixups`).
cdef enum:
    FIX_HALF_ = 1
    FIX_BFLOAT16_ = 2
FIX_HALF = FIX_HALF_
FIX_BFLOAT16 = FIX_BFLOAT16_

cdef enum:
    DT_FLOAT = 1
    DT_DOUBLE = 2
    DT_INT32 = 3
    DT_UINT8 = 4
    DT_INT16 = 5
    DT_INT8 = 6
    DT_INT64 = 9
    DT_BOOL = 10
    DT_BFLOAT16 = 14
    DT_UINT16 = 17
    DT_HALF = 19
    DT_UINT32 = 22
    DT_UINT64 = 23

cdef enum:
    PLUGIN_UNKNOWN = 0
    PLUGIN_SCALARS = 1
    PLUGIN_OTHER = 2

_PLUGIN_CODES = {"scalars": PLUGIN_SCALARS, "other": PLUGIN_OTHER}
_PLUGIN_NAMES = {PLUGIN_SCALARS: "scalars", PLUGIN_OTHER: "other"}

cdef enum:
    VALUE_NONE = 0
    VALUE_SIMPLE = 1
    VALUE_TENSOR = 2
    VALUE_OTHER = 3  # image, histogram, audio: never a scalar

cdef enum:
    MAX_SUMMARIES = 8  # summary fields merged into one Event; real writers use one

cdef struct Cursor:
    const uint8_t* p
    const uint8_t* end

cdef struct Tensor:
    int dtype
    int64_t elements  # product of the dims; 1 for rank 0
    bint unknown_rank
    const uint8_t* content
    Py_ssize_t content_len
    # first element of each typed field, and whether it was present
    bint has_float, has_double, has_int, has_int64, has_uint64, has_half
    float f
    double d
    int64_t i
    uint64_t u
    uint32_t half_bits

cdef struct Value:
    const uint8_t* tag
    Py_ssize_t tag_len
    int kind
    float simple
    int plugin  # from this value's own metadata, PLUGIN_UNKNOWN when it has none
    Tensor tensor


cdef inline uint32_t masked(uint32_t crc) noexcept nogil:
    return ((crc >> 15) | (crc << 17)) + <uint32_t>0xa282ead8


cdef inline uint64_t le64(const uint8_t* p) noexcept nogil:
    cdef uint64_t v = 0
    cdef int k
    for k in range(7, -1, -1):
        v = (v << 8) | p[k]
    return v


cdef inline uint32_t le32(const uint8_t* p) noexcept nogil:
    return p[0] | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16) | (<uint32_t>p[3] << 24)


cdef inline int varint(Cursor* c, uint64_t* out) noexcept nogil:
    cdef uint64_t result = 0
    cdef int shift = 0
    cdef uint8_t b
    while c.p < c.end and shift < 64:
        b = c.p[0]
        c.p += 1
        result |= (<uint64_t>(b & 0x7F)) << shift
        if b < 0x80:
            out[0] = result
            return 0
        shift += 7
    return -1


cdef inline int sub(Cursor* c, Cursor* inner) noexcept nogil:
    """Open the length-delimited field at the cursor as its own cursor."""
    cdef uint64_t n
    if varint(c, &n) or n > <uint64_t>(c.end - c.p):
        return -1
    inner.p = c.p
    inner.end = c.p + n
    c.p += n
    return 0


cdef inline int skip(Cursor* c, int wire) noexcept nogil:
    cdef uint64_t n
    cdef Cursor ignored
    if wire == 0:
        return varint(c, &n)
    if wire == 1:
        if c.end - c.p < 8:
            return -1
        c.p += 8
        return 0
    if wire == 2:
        return sub(c, &ignored)
    if wire == 5:
        if c.end - c.p < 4:
            return -1
        c.p += 4
        return 0
    return -1  # groups (3, 4) are not used by any Event field; 6 and 7 do not exist


cdef inline int key(Cursor* c, uint64_t* field, int* wire) noexcept nogil:
    cdef uint64_t k
    if varint(c, &k):
        return -1
    field[0] = k >> 3
    wire[0] = k & 7
    return 0 if field[0] != 0 else -1


cdef int decode_metadata(Cursor c, int* plugin) noexcept nogil:
    cdef uint64_t field, n
    cdef int wire
    cdef Cursor inner, name
    while c.p < c.end:
        if key(&c, &field, &wire):
            return -1
        if field == 1 and wire == 2:  # plugin_data
            if sub(&c, &inner):
                return -1
            while inner.p < inner.end:
                if key(&inner, &field, &wire):
                    return -1
                if field == 1 and wire == 2:
                    if sub(&inner, &name):
                        return -1
                    if name.end - name.p == 7 and memcmp(name.p, b"scalars", 7) == 0:
                        plugin[0] = PLUGIN_SCALARS
                    else:
                        plugin[0] = PLUGIN_OTHER
                elif skip(&inner, wire):
                    return -1
        elif field == 4 and wire == 0:  # data_class
            if varint(&c, &n):
                return -1
            if n == 1 and plugin[0] == PLUGIN_UNKNOWN:
                plugin[0] = PLUGIN_SCALARS
        elif skip(&c, wire):
            return -1
    return 0


cdef int decode_shape(Cursor c, Tensor* t) noexcept nogil:
    cdef uint64_t field, n, size
    cdef int wire
    cdef Cursor dim
    while c.p < c.end:
        if key(&c, &field, &wire):
            return -1
        if field == 2 and wire == 2:
            if sub(&c, &dim):
                return -1
            size = 0
            while dim.p < dim.end:
                if key(&dim, &field, &wire):
                    return -1
                if field == 1 and wire == 0:
                    if varint(&dim, &size):
                        return -1
                elif skip(&dim, wire):
                    return -1
            t.elements *= <int64_t>size
        elif field == 3 and wire == 0:
            if varint(&c, &n):
                return -1
            t.unknown_rank = n != 0
        elif skip(&c, wire):
            return -1
    return 0


cdef inline int first_varint(Cursor* c, int wire, uint64_t* out, bint* seen) noexcept nogil:
    """First element of a repeated varint field, packed (wire 2) or not (wire 0)."""
    cdef Cursor packed
    cdef uint64_t v
    if wire == 0:
        if varint(c, &v):
            return -1
    elif wire == 2:
        if sub(c, &packed):
            return -1
        if packed.p == packed.end:
            return 0
        if varint(&packed, &v):
            return -1
    else:
        return -1
    if not seen[0]:
        out[0] = v
        seen[0] = True
    return 0


cdef inline int first_fixed(Cursor* c, int wire, int width, uint64_t* out, bint* seen) noexcept nogil:
    """First element of a repeated fixed32/fixed64 field, packed (wire 2) or not."""
    cdef Cursor packed
    cdef const uint8_t* at
    if wire == (5 if width == 4 else 1):
        if c.end - c.p < width:
            return -1
        at = c.p
        c.p += width
    elif wire == 2:
        if sub(c, &packed):
            return -1
        if (packed.end - packed.p) % width:
            return -1
        if packed.p == packed.end:
            return 0
        at = packed.p
    else:
        return -1
    if not seen[0]:
        out[0] = le32(at) if width == 4 else le64(at)
        seen[0] = True
    return 0


cdef int decode_tensor(Cursor c, Tensor* t) noexcept nogil:
    cdef uint64_t field, n, bits
    cdef int wire
    cdef Cursor inner
    t.elements = 1
    while c.p < c.end:
        if key(&c, &field, &wire):
            return -1
        if field == 1 and wire == 0:
            if varint(&c, &n):
                return -1
            t.dtype = <int>n
        elif field == 2 and wire == 2:
            if sub(&c, &inner) or decode_shape(inner, t):
                return -1
        elif field == 4 and wire == 2:
            if sub(&c, &inner):
                return -1
            t.content = inner.p
            t.content_len = inner.end - inner.p
        elif field == 5:
            if first_fixed(&c, wire, 4, &bits, &t.has_float):
                return -1
            memcpy(&t.f, &bits, 4)  # little-endian host: the low 4 bytes of bits
        elif field == 6:
            if first_fixed(&c, wire, 8, &bits, &t.has_double):
                return -1
            memcpy(&t.d, &bits, 8)
        elif field == 13:
            if first_varint(&c, wire, &n, &t.has_half):
                return -1
            t.half_bits = <uint32_t>n
        elif field == 7 or field == 11:  # int_val, bool_val
            if first_varint(&c, wire, &n, &t.has_int):
                return -1
            t.i = <int32_t>n
        elif field == 10:
            if first_varint(&c, wire, &n, &t.has_int64):
                return -1
            t.i = <int64_t>n
        elif field == 16 or field == 17:
            if first_varint(&c, wire, &n, &t.has_uint64):
                return -1
            t.u = n
        elif skip(&c, wire):
            return -1
    return 0


cdef int decode_value(Cursor c, Value* v) noexcept nogil:
    cdef uint64_t field
    cdef int wire
    cdef Cursor inner
    cdef uint32_t bits
    while c.p < c.end:
        if key(&c, &field, &wire):
            return -1
        if field == 1 and wire == 2:
            if sub(&c, &inner):
                return -1
            v.tag = inner.p
            v.tag_len = inner.end - inner.p
        elif field == 2 and wire == 5:
            if c.end - c.p < 4:
                return -1
            bits = le32(c.p)
            memcpy(&v.simple, &bits, 4)
            c.p += 4
            v.kind = VALUE_SIMPLE
        elif field == 8 and wire == 2:
            if sub(&c, &inner):
                return -1
            v.tensor.dtype = 0
            v.tensor.unknown_rank = False
            v.tensor.content = NULL
            v.tensor.content_len = 0
            v.tensor.has_float = v.tensor.has_double = v.tensor.has_int = False
            v.tensor.has_int64 = v.tensor.has_uint64 = v.tensor.has_half = False
            if decode_tensor(inner, &v.tensor):
                return -1
            v.kind = VALUE_TENSOR
        elif field == 9 and wire == 2:
            if sub(&c, &inner) or decode_metadata(inner, &v.plugin):
                return -1
        elif 3 <= field <= 6:
            if skip(&c, wire):
                return -1
            v.kind = VALUE_OTHER
        elif skip(&c, wire):
            return -1
    return 0


cdef inline int tensor_scalar(Tensor* t, double* out, int* fixup) noexcept nogil:
    """The single number a rank-0 (one-element) tensor holds; -1 if it holds none."""
    cdef float f
    cdef double d
    cdef int64_t i64
    cdef int32_t i32
    cdef uint64_t u64
    fixup[0] = 0
    if t.unknown_rank or t.elements != 1:
        return -1
    if t.content != NULL:
        if t.dtype == DT_FLOAT and t.content_len == 4:
            memcpy(&f, t.content, 4)
            out[0] = f
        elif t.dtype == DT_DOUBLE and t.content_len == 8:
            memcpy(&d, t.content, 8)
            out[0] = d
        elif (t.dtype == DT_HALF or t.dtype == DT_BFLOAT16) and t.content_len == 2:
            out[0] = t.content[0] | (t.content[1] << 8)
            fixup[0] = FIX_HALF_ if t.dtype == DT_HALF else FIX_BFLOAT16_
        elif t.dtype == DT_INT32 and t.content_len == 4:
            memcpy(&i32, t.content, 4)
            out[0] = i32
        elif (t.dtype == DT_INT64) and t.content_len == 8:
            memcpy(&i64, t.content, 8)
            out[0] = <double>i64
        elif t.dtype == DT_UINT64 and t.content_len == 8:
            memcpy(&u64, t.content, 8)
            out[0] = <double>u64
        elif t.dtype == DT_UINT32 and t.content_len == 4:
            out[0] = le32(t.content)
        elif t.dtype == DT_INT16 and t.content_len == 2:
            out[0] = <short>(t.content[0] | (t.content[1] << 8))
        elif t.dtype == DT_UINT16 and t.content_len == 2:
            out[0] = t.content[0] | (t.content[1] << 8)
        elif t.dtype == DT_INT8 and t.content_len == 1:
            out[0] = <signed char>t.content[0]
        elif (t.dtype == DT_UINT8 or t.dtype == DT_BOOL) and t.content_len == 1:
            out[0] = t.content[0]
        else:
            return -1
        return 0
    if t.dtype == DT_FLOAT and t.has_float:
        out[0] = t.f
    elif t.dtype == DT_DOUBLE and t.has_double:
        out[0] = t.d
    elif (t.dtype == DT_HALF or t.dtype == DT_BFLOAT16) and t.has_half:
        out[0] = t.half_bits & 0xFFFF
        fixup[0] = FIX_HALF_ if t.dtype == DT_HALF else FIX_BFLOAT16_
    elif t.dtype in (DT_INT32, DT_INT16, DT_INT8, DT_UINT8, DT_UINT16, DT_BOOL) and t.has_int:
        out[0] = <double>t.i
    elif t.dtype == DT_INT64 and t.has_int64:
        out[0] = <double>t.i
    elif (t.dtype == DT_UINT32 or t.dtype == DT_UINT64) and t.has_uint64:
        out[0] = <double>t.u
    else:
        return -1
    return 0


cdef class TagTable:
    """Tag names of one run, interned to small ints, with each tag's plugin remembered.

    TF1-style writers put a tag's plugin metadata on its first event only, so whether a
    later tensor is a scalar depends on what an earlier file said: the table lives as long
    as the run.
    """

    cdef public list names
    cdef dict ids
    cdef list raw
    cdef bytearray plugins
    cdef Py_ssize_t last

    def __init__(self, dict plugins=None):
        """`plugins` is what `plugins()` returned for the run before: tag -> plugin seen."""
        self.names = []
        self.ids = {}
        self.raw = []
        self.plugins = bytearray()
        self.last = 0
        for name, plugin in (plugins or {}).items():
            self.plugins[self._add(name.encode("utf-8"), name)] = _PLUGIN_CODES[plugin]

    def known_plugins(self):
        """Tag -> "scalars" or "other", for the tags whose plugin metadata has been seen."""
        return {
            name: _PLUGIN_NAMES[code]
            for name, code in zip(self.names, self.plugins)
            if code != PLUGIN_UNKNOWN
        }

    cdef Py_ssize_t _add(self, bytes raw, str name):
        cdef Py_ssize_t i = len(self.names)
        self.names.append(name)
        self.raw.append(raw)
        self.ids[raw] = i
        self.plugins.append(PLUGIN_UNKNOWN)
        return i

    cdef Py_ssize_t lookup(self, const uint8_t* p, Py_ssize_t n) except -1:
        """Id of a tag, adding it if new; -2 never returned, UnicodeDecodeError propagates."""
        cdef Py_ssize_t count = len(self.raw), i, k
        cdef bytes candidate
        # Trainers log their tags round-robin: the next id after the last hit is usual.
        for k in range(2):
            i = (self.last + 1 - k) if count else 0
            if i < count and i >= 0:
                candidate = <bytes>self.raw[i]
                if len(candidate) == n and memcmp(<const char*>candidate, p, n) == 0:
                    self.last = i
                    return i
        raw = (<const char*>p)[:n]
        found = self.ids.get(raw)
        if found is None:
            found = self._add(raw, raw.decode("utf-8"))
        self.last = found
        return found

    cdef int plugin(self, Py_ssize_t i, int seen):
        if seen != PLUGIN_UNKNOWN:
            self.plugins[i] = seen
            return seen
        return self.plugins[i]


cdef class Columns:
    """Growable point arrays; `fixups` lists (index, kind) of values still in raw 16-bit form."""

    cdef public object tag, step, wall_time, value
    cdef int32_t[::1] _tag
    cdef int64_t[::1] _step
    cdef double[::1] _wall, _value
    cdef public Py_ssize_t size
    cdef public list fixups

    def __init__(self, Py_ssize_t capacity=1024):
        self.size = 0
        self.fixups = []
        self._allocate(max(capacity, 16))

    cdef _allocate(self, Py_ssize_t capacity):
        if self.size:
            self.tag = np.resize(self.tag, capacity)
            self.step = np.resize(self.step, capacity)
            self.wall_time = np.resize(self.wall_time, capacity)
            self.value = np.resize(self.value, capacity)
        else:
            self.tag = np.empty(capacity, np.int32)
            self.step = np.empty(capacity, np.int64)
            self.wall_time = np.empty(capacity, np.float64)
            self.value = np.empty(capacity, np.float64)
        self._tag = self.tag
        self._step = self.step
        self._wall = self.wall_time
        self._value = self.value

    cdef inline int push(self, int32_t tag, int64_t step, double wall, double value) except -1:
        if self.size == self._step.shape[0]:
            self._allocate(self.size * 2)
        self._tag[self.size] = tag
        self._step[self.size] = step
        self._wall[self.size] = wall
        self._value[self.size] = value
        self.size += 1
        return 0

    def arrays(self):
        """The filled part of each array (tag, step, wall_time, value)."""
        n = self.size
        return self.tag[:n], self.step[:n], self.wall_time[:n], self.value[:n]


ctypedef uint32_t (*crc_function)(uint32_t crc, const unsigned char* data, unsigned long length) noexcept nogil

cdef crc_function native_crc = NULL


def use_native_crc(size_t address):
    """Call the crc32c package's own CRC routine directly (see app/ingest/crc.py); 0 stops."""
    global native_crc
    native_crc = <crc_function>address


def native_crc32c(const uint8_t[::1] data):
    """The CRC32C of `data` through the native routine, to check it against the package's."""
    return native_crc(0xFFFFFFFF, &data[0] if data.shape[0] else NULL, data.shape[0]) ^ 0xFFFFFFFF


cdef inline uint32_t crc_of(object crc_fn, const uint8_t* p, Py_ssize_t n) except? 0xFFFFFFFF:
    if native_crc != NULL:
        return native_crc(0xFFFFFFFF, p, n) ^ 0xFFFFFFFF
    return <uint32_t>crc_fn(PyMemoryView_FromMemory(<char*>p, n, PyBUF_READ))


cdef int decode_event(
    const uint8_t* p, Py_ssize_t n, TagTable tags, Columns out, list starts, list fixups,
) except -1:
    """Append the scalars of one Event record; 1 if its payload is not a valid Event."""
    cdef Cursor c, inner, session
    cdef Cursor summaries[MAX_SUMMARIES]
    cdef Cursor values
    cdef uint64_t field, bits, status
    cdef int wire, nsum = 0, s, fix, plugin
    cdef double wall = 0.0, number
    cdef int64_t step = 0
    cdef bint has_session = False
    cdef Value v
    cdef Py_ssize_t tag_id
    c.p = p
    c.end = p + n
    while c.p < c.end:
        if key(&c, &field, &wire):
            return 1
        if field == 1 and wire == 1:
            if c.end - c.p < 8:
                return 1
            bits = le64(c.p)
            memcpy(&wall, &bits, 8)
            c.p += 8
        elif field == 2 and wire == 0:
            if varint(&c, &bits):
                return 1
            step = <int64_t>bits
        elif field == 5 and wire == 2:
            if nsum == MAX_SUMMARIES or sub(&c, &summaries[nsum]):
                return 1
            nsum += 1
        elif field == 7 and wire == 2:
            if sub(&c, &session):
                return 1
            has_session = True
        elif skip(&c, wire):
            return 1
    for s in range(nsum):
        values = summaries[s]
        while values.p < values.end:
            if key(&values, &field, &wire):
                return 1
            if field != 1 or wire != 2:
                if skip(&values, wire):
                    return 1
                continue
            if sub(&values, &inner):
                return 1
            v.tag = NULL
            v.tag_len = 0
            v.kind = VALUE_NONE
            v.plugin = PLUGIN_UNKNOWN
            if decode_value(inner, &v):
                return 1
            if v.kind == VALUE_NONE or v.kind == VALUE_OTHER:
                continue
            try:
                tag_id = tags.lookup(v.tag, v.tag_len)
            except UnicodeDecodeError:
                return 1
            plugin = tags.plugin(tag_id, v.plugin)
            if v.kind == VALUE_SIMPLE:
                out.push(<int32_t>tag_id, step, wall, v.simple)
            elif plugin == PLUGIN_SCALARS and tensor_scalar(&v.tensor, &number, &fix) == 0:
                if fix:
                    fixups.append((out.size, fix))
                out.push(<int32_t>tag_id, step, wall, number)
    if has_session:
        status = 0
        while session.p < session.end:
            if key(&session, &field, &wire):
                return 1
            if field == 1 and wire == 0:
                if varint(&session, &status):
                    return 1
            elif skip(&session, wire):
                return 1
        if status == 1:  # SessionLog.START
            starts.append((out.size, step, wall))
    return 0


def decode(
    const uint8_t[::1] buf,
    Py_ssize_t base,
    object crc_fn,
    TagTable tags,
    Columns out,
    list starts,
    list problems,
    Py_ssize_t max_length,
):
    """Decode every complete record of `buf` (file bytes starting at file offset `base`).

    Appends points to `out`, (point index, step, wall_time) of each SessionLog.START to
    `starts`, and (offset, reason) of each skipped record to `problems`.  Returns
    (consumed, status): bytes consumed up to the end of the last complete record, and
    END, TRUNCATED or CORRUPT.  A record is kept or dropped whole: a bad record's points
    are taken back out of `out`.
    """
    cdef Py_ssize_t pos = 0, total = buf.shape[0], size_before, fixups_before
    cdef uint64_t length
    cdef uint32_t stored, computed
    cdef const uint8_t* p = &buf[0] if total else NULL
    cdef list fixups = out.fixups
    while pos < total:
        if total - pos < 12:
            return pos, TRUNCATED
        length = le64(p + pos)
        stored = le32(p + pos + 8)
        computed = masked(crc_of(crc_fn, p + pos, 8))
        if stored != computed:
            problems.append((base + pos, f"record length CRC mismatch (stored 0x{stored:08x}, computed 0x{computed:08x}); the rest of the file cannot be framed"))
            return pos, CORRUPT
        if length > <uint64_t>max_length:
            problems.append((base + pos, f"declared record length {length} exceeds the {max_length}-byte limit; the rest of the file cannot be framed"))
            return pos, CORRUPT
        if total - pos < 16 or <uint64_t>(total - pos - 16) < length:
            return pos, TRUNCATED
        stored = le32(p + pos + 12 + length)
        computed = masked(crc_of(crc_fn, p + pos + 12, <Py_ssize_t>length))
        if stored != computed:
            problems.append((base + pos, f"payload CRC mismatch (stored 0x{stored:08x}, computed 0x{computed:08x}); record skipped"))
        else:
            size_before = out.size
            fixups_before = len(fixups)
            if decode_event(p + pos + 12, <Py_ssize_t>length, tags, out, starts, fixups):
                out.size = size_before
                del fixups[fixups_before:]
                problems.append((base + pos, "payload is not a valid Event protobuf; record skipped"))
        pos += 16 + <Py_ssize_t>length
    return pos, END
