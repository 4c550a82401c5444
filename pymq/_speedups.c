/* pymq._speedups: optional C versions of the record module's per-record loops.
 *
 * Only pymq/protocol/record.py and record_batch.py call this module; each of their functions
 * keeps its pure-Python body as the fallback (PYMQ_NO_SPEEDUPS=1, or no compiler at install).
 * Results must be byte-identical to the Python code's, errors too: a function returns
 * NotImplemented for any argument outside the well-formed domain it handles (an odd buffer
 * type, a negative position, an int that does not fit), and the caller then runs the Python
 * body, which raises what it always raised. Every read of record bytes is bounds-checked:
 * batches come from the network.
 *
 * The layout constants below are pymq.protocol.record's; LAYOUT exports them and record.py
 * refuses to use a module whose LAYOUT differs from its own (a stale or drifted build).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

/* Bumped (here and in record.py's speedups_layout) when a function is added or changes its contract. */
#define ABI_VERSION 3

#define MAGIC 0x706D7131u
#define BLANK_MAGIC 0xCBD43194u
#define FIXED_FORMAT ">iIIiiq8siqiqqq8si"
#define FIXED_SIZE 88
#define BODY_POS 88
#define BODY_LEN_POS 84
#define MIN_RECORD_SIZE 92
#define BROKER_BLOCK_FORMAT ">iqqq8s"
#define BROKER_BLOCK_OFFSET 48
#define BROKER_BLOCK_SIZE 36
#define BLANK_SIZE 8
#define MAX_PROPERTIES_SIZE 32767

/* --- big-endian reads and writes ------------------------------------------------------------ */

static inline uint32_t rd_u32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}
static inline int32_t rd_i32(const unsigned char *p) { return (int32_t)rd_u32(p); }
static inline uint16_t rd_u16(const unsigned char *p) { return (uint16_t)(((unsigned)p[0] << 8) | p[1]); }
static inline int64_t rd_i64(const unsigned char *p) {
    return (int64_t)(((uint64_t)rd_u32(p) << 32) | (uint64_t)rd_u32(p + 4));
}
static inline void wr_u32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}
static inline void wr_u64(unsigned char *p, uint64_t v) {
    wr_u32(p, (uint32_t)(v >> 32));
    wr_u32(p + 4, (uint32_t)v);
}

/* --- zlib's crc32 ------------------------------------------------------------------------------ */
/* zlib's own when setup.py found it (HAVE_ZLIB: faster than the table loop below), else slice-by-8. */

#ifdef HAVE_ZLIB
#include <zlib.h>
#endif

static uint32_t crc_table[8][256];

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int k = 1; k < 8; k++)
            crc_table[k][i] = (crc_table[k - 1][i] >> 8) ^ crc_table[0][crc_table[k - 1][i] & 0xFF];
}

static uint32_t crc32_table_of(uint32_t crc, const unsigned char *p, Py_ssize_t n) {
    crc = ~crc;
    while (n >= 8) {
        uint32_t a = crc ^ ((uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24));
        uint32_t b = (uint32_t)p[4] | ((uint32_t)p[5] << 8) | ((uint32_t)p[6] << 16) | ((uint32_t)p[7] << 24);
        crc = crc_table[7][a & 0xFF] ^ crc_table[6][(a >> 8) & 0xFF] ^ crc_table[5][(a >> 16) & 0xFF] ^
              crc_table[4][a >> 24] ^ crc_table[3][b & 0xFF] ^ crc_table[2][(b >> 8) & 0xFF] ^
              crc_table[1][(b >> 16) & 0xFF] ^ crc_table[0][b >> 24];
        p += 8;
        n -= 8;
    }
    while (n-- > 0) crc = crc_table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

/* Carry-less multiplication folding (Intel's "Fast CRC Computation for Generic Polynomials Using
 * PCLMULQDQ", the bit-reflected constants of its CRC-32 example): four 16-byte lanes fold 64 bytes a
 * round, then into one lane, then down to 32 bits with a Barrett reduction. Several times zlib 1.2's
 * speed on the 1 KiB bodies of a batch. Only on x86-64 built with GCC or clang, and only where the
 * CPU has PCLMULQDQ and SSE4.1 (checked at import); the rest of the bytes go to zlib or the table. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_CLMUL_CODE 1
#include <immintrin.h>

static int use_clmul = 0;

__attribute__((target("pclmul,sse4.1"))) static inline __m128i fold16(__m128i x, __m128i k, __m128i next) {
    return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11)), next);
}

/* The CRC register (inverted, as inside zlib) after n bytes, n >= 64 and a multiple of 16. */
__attribute__((target("pclmul,sse4.1"))) static uint32_t crc32_clmul_blocks(uint32_t reg, const unsigned char *p,
                                                                           Py_ssize_t n) {
    const __m128i k1k2 = _mm_set_epi64x(0x1c6e41596LL, 0x154442bd4LL);
    const __m128i k3k4 = _mm_set_epi64x(0x0ccaa009eLL, 0x1751997d0LL);
    const __m128i k5 = _mm_set_epi64x(0, 0x163cd6124LL);
    const __m128i poly_mu = _mm_set_epi64x(0x1f7011641LL, 0x1db710641LL);
    const __m128i low32 = _mm_setr_epi32(-1, 0, -1, 0);
    __m128i x1 = _mm_loadu_si128((const __m128i *)p), x2 = _mm_loadu_si128((const __m128i *)(p + 16));
    __m128i x3 = _mm_loadu_si128((const __m128i *)(p + 32)), x4 = _mm_loadu_si128((const __m128i *)(p + 48));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)reg));
    p += 64;
    n -= 64;
    while (n >= 64) {
        x1 = fold16(x1, k1k2, _mm_loadu_si128((const __m128i *)p));
        x2 = fold16(x2, k1k2, _mm_loadu_si128((const __m128i *)(p + 16)));
        x3 = fold16(x3, k1k2, _mm_loadu_si128((const __m128i *)(p + 32)));
        x4 = fold16(x4, k1k2, _mm_loadu_si128((const __m128i *)(p + 48)));
        p += 64;
        n -= 64;
    }
    x1 = fold16(x1, k3k4, x2);
    x1 = fold16(x1, k3k4, x3);
    x1 = fold16(x1, k3k4, x4);
    while (n >= 16) {
        x1 = fold16(x1, k3k4, _mm_loadu_si128((const __m128i *)p));
        p += 16;
        n -= 16;
    }
    /* 128 -> 64 bits, then 64 -> 32 (Barrett) */
    x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), _mm_clmulepi64_si128(x1, k3k4, 0x10));
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, low32), k5, 0x00), x2);
    x2 = _mm_and_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, low32), poly_mu, 0x10), low32);
    x1 = _mm_xor_si128(x1, _mm_clmulepi64_si128(x2, poly_mu, 0x00));
    return (uint32_t)_mm_extract_epi32(x1, 1);
}
#endif

static uint32_t crc32_rest(uint32_t crc, const unsigned char *p, Py_ssize_t n);

static uint32_t crc32_of(uint32_t crc, const unsigned char *p, Py_ssize_t n) {
#ifdef HAVE_CLMUL_CODE
    if (use_clmul && n >= 64) {
        Py_ssize_t blocks = n & ~(Py_ssize_t)15;
        crc = ~crc32_clmul_blocks(~crc, p, blocks);
        p += blocks;
        n -= blocks;
    }
#endif
    return crc32_rest(crc, p, n);
}

static uint32_t crc32_rest(uint32_t crc, const unsigned char *p, Py_ssize_t n) {
    /* Short inputs (keys, tags, the tail after folding): the table loop, ~40 ns quicker than zlib 1.2's
     * setup for 32 bytes (the index hashes a unique key of 32 per record). */
    if (n < 64) return crc32_table_of(crc, p, n);
#ifdef HAVE_ZLIB
    while (n > 0) {
        uInt chunk = n > (Py_ssize_t)0x40000000 ? 0x40000000u : (uInt)n;
        crc = (uint32_t)crc32((uLong)crc, p, chunk);
        p += chunk;
        n -= chunk;
    }
    return crc;
#else
    return crc32_table_of(crc, p, n);
#endif
}

/* --- helpers ----------------------------------------------------------------------------------- */

/* The error class record.py registers (pymq.errors.MessageDecodeError). */
static PyObject *decode_error = NULL;

/* A read-only byte buffer of bytes, bytearray, a byte memoryview or an mmap; 0 (no error set)
 * for anything else, whose len() might not be its byte count. */
static int get_bytes_buffer(PyObject *obj, Py_buffer *view) {
    if (PyBytes_CheckExact(obj) || PyByteArray_CheckExact(obj)) {
        return PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) == 0 ? 1 : (PyErr_Clear(), 0);
    }
    if (PyMemoryView_Check(obj)) {
        Py_buffer *mv = PyMemoryView_GET_BUFFER(obj);
        if (mv->ndim != 1 || mv->itemsize != 1 || !PyBuffer_IsContiguous(mv, 'C')) return 0;
        return PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) == 0 ? 1 : (PyErr_Clear(), 0);
    }
    if (strcmp(Py_TYPE(obj)->tp_name, "mmap.mmap") == 0) {
        return PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) == 0 ? 1 : (PyErr_Clear(), 0);
    }
    return 0;
}

/* An exact int that fits a Py_ssize_t; 0 (no error set) otherwise. */
static int as_ssize(PyObject *obj, Py_ssize_t *out) {
    if (!PyLong_CheckExact(obj)) return 0;
    Py_ssize_t v = PyLong_AsSsize_t(obj);
    if (v == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    *out = v;
    return 1;
}

static int as_i64(PyObject *obj, int64_t *out) {
    if (!PyLong_CheckExact(obj)) return 0;
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (overflow || (v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    *out = (int64_t)v;
    return 1;
}

/* Append the (ordinal, kind, reason) rejection; steals reason. */
static int add_rejection(PyObject *rejected, Py_ssize_t ordinal, int kind, PyObject *reason) {
    if (reason == NULL) return -1;
    PyObject *t = Py_BuildValue("(niN)", ordinal, kind, reason);
    if (t == NULL) return -1;
    int rc = PyList_Append(rejected, t);
    Py_DECREF(t);
    return rc;
}

static int append_ssize(PyObject *list, Py_ssize_t v) {
    PyObject *o = PyLong_FromSsize_t(v);
    if (o == NULL) return -1;
    int rc = PyList_Append(list, o);
    Py_DECREF(o);
    return rc;
}

/* --- split_batch ------------------------------------------------------------------------------- */

PyDoc_STRVAR(split_batch_doc,
             "split_batch(data, topic_field, max_size, reject_reason) -> (positions, sizes, props_ats, rejected)\n"
             "record_batch.split_batch's loop; reject_reason(data, pos, end, body_end, topic_field, max_size)\n"
             "names the refusal of a record whose lengths or topic do not check out. NotImplemented for\n"
             "arguments it does not handle.");

static PyObject *split_batch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "split_batch takes 4 arguments");
        return NULL;
    }
    PyObject *data = args[0], *tf = args[1], *max_obj = args[2], *reject_reason = args[3];
    int64_t max_size;
    if (!PyBytes_CheckExact(data) || !PyBytes_CheckExact(tf) || !as_i64(max_obj, &max_size)) Py_RETURN_NOTIMPLEMENTED;
    const unsigned char *d = (const unsigned char *)PyBytes_AS_STRING(data);
    const Py_ssize_t n = PyBytes_GET_SIZE(data);
    const unsigned char *t = (const unsigned char *)PyBytes_AS_STRING(tf);
    const Py_ssize_t tlen2 = PyBytes_GET_SIZE(tf);

    PyObject *positions = PyList_New(0), *sizes = PyList_New(0), *props_ats = PyList_New(0);
    PyObject *rejected = PyList_New(0);
    if (!positions || !sizes || !props_ats || !rejected) goto fail;
    Py_ssize_t nvalid = 0, pos = 0;
    while (pos < n) {
        Py_ssize_t ordinal = nvalid + PyList_GET_SIZE(rejected);
        if (n - pos < FIXED_SIZE) {
            if (add_rejection(rejected, ordinal, 0,
                              PyUnicode_FromFormat("truncated record at byte %zd of the batch", pos)) < 0)
                goto fail;
            break;
        }
        const unsigned char *r = d + pos;
        int64_t size = rd_i32(r);
        uint32_t magic = rd_u32(r + 4);
        uint32_t crc = rd_u32(r + 8);
        int64_t body_len = rd_i32(r + BODY_LEN_POS);
        int64_t end = (int64_t)pos + size;
        if (magic != MAGIC || size < MIN_RECORD_SIZE || end > n) {
            if (add_rejection(rejected, ordinal, 0,
                              PyUnicode_FromFormat("bad record header at byte %zd of the batch", pos)) < 0)
                goto fail;
            break;
        }
        int64_t body_end = (int64_t)pos + BODY_POS + body_len;
        int64_t props_at = body_end + tlen2 + 2;
        /* Evaluated in the Python code's order: each read is in bounds once the tests before it passed
         * (body_end + tlen2 <= props_at - 2 < end <= n). */
        if (body_len < 0 || props_at > end || memcmp(d + body_end, t, (size_t)tlen2) != 0 ||
            props_at + rd_u16(d + props_at - 2) != end || size > max_size) {
            PyObject *reason = PyObject_CallFunction(reject_reason, "OnnnOO", data, pos, (Py_ssize_t)end,
                                                     (Py_ssize_t)body_end, tf, max_obj);
            if (add_rejection(rejected, ordinal, 0, reason) < 0) goto fail;
        } else if (crc32_of(0, r + BODY_POS, (Py_ssize_t)body_len) != crc) {
            if (add_rejection(rejected, ordinal, 0, PyUnicode_FromString("body crc mismatch")) < 0) goto fail;
        } else if (end - props_at > MAX_PROPERTIES_SIZE) {
            if (add_rejection(rejected, ordinal, 1,
                              PyUnicode_FromFormat("properties of %zd bytes exceed %d", (Py_ssize_t)(end - props_at),
                                                   MAX_PROPERTIES_SIZE)) < 0)
                goto fail;
        } else {
            if (append_ssize(positions, pos) < 0 || append_ssize(sizes, (Py_ssize_t)size) < 0 ||
                append_ssize(props_ats, (Py_ssize_t)props_at) < 0)
                goto fail;
            nvalid++;
        }
        pos = (Py_ssize_t)end;
    }
    return Py_BuildValue("(NNNN)", positions, sizes, props_ats, rejected);
fail:
    Py_XDECREF(positions);
    Py_XDECREF(sizes);
    Py_XDECREF(props_ats);
    Py_XDECREF(rejected);
    return NULL;
}

/* --- any_property_contains --------------------------------------------------------------------- */

/* bytes.find's index adjustment: negative counts from the end, then clamped to [0, n]. */
static inline Py_ssize_t adjust_index(Py_ssize_t i, Py_ssize_t n) {
    if (i > n) return n;
    if (i < 0) {
        i += n;
        if (i < 0) return 0;
    }
    return i;
}

static int contains(const unsigned char *d, Py_ssize_t start, Py_ssize_t end, const unsigned char *needle,
                    Py_ssize_t m) {
    if (end - start < m) return 0;
    if (m == 0) return 1;
    const unsigned char *p = d + start, *last = d + end - m;
    while (p <= last) {
        p = memchr(p, needle[0], (size_t)(last - p + 1));
        if (p == NULL) return 0;
        if (memcmp(p, needle, (size_t)m) == 0) return 1;
        p++;
    }
    return 0;
}

PyDoc_STRVAR(any_property_contains_doc,
             "any_property_contains(data, positions, sizes, props_ats, needle) -> bool\n"
             "record_batch.any_property_contains over a split's lists; NotImplemented for arguments it does not "
             "handle.");

static PyObject *any_property_contains(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "any_property_contains takes 5 arguments");
        return NULL;
    }
    PyObject *data = args[0], *positions = args[1], *sizes = args[2], *props_ats = args[3], *needle = args[4];
    if (!PyBytes_CheckExact(data) || !PyBytes_CheckExact(needle) || !PyList_CheckExact(positions) ||
        !PyList_CheckExact(sizes) || !PyList_CheckExact(props_ats))
        Py_RETURN_NOTIMPLEMENTED;
    Py_ssize_t count = PyList_GET_SIZE(positions);
    if (PyList_GET_SIZE(sizes) != count || PyList_GET_SIZE(props_ats) != count) Py_RETURN_NOTIMPLEMENTED;
    const unsigned char *d = (const unsigned char *)PyBytes_AS_STRING(data);
    Py_ssize_t n = PyBytes_GET_SIZE(data);
    const unsigned char *nd = (const unsigned char *)PyBytes_AS_STRING(needle);
    Py_ssize_t m = PyBytes_GET_SIZE(needle);
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t pos, size, props_at;
        if (!as_ssize(PyList_GET_ITEM(positions, i), &pos) || !as_ssize(PyList_GET_ITEM(sizes, i), &size) ||
            !as_ssize(PyList_GET_ITEM(props_ats, i), &props_at) || pos > PY_SSIZE_T_MAX / 2 ||
            pos < -PY_SSIZE_T_MAX / 2 || size > PY_SSIZE_T_MAX / 2 || size < -PY_SSIZE_T_MAX / 2)
            Py_RETURN_NOTIMPLEMENTED;
        Py_ssize_t start = adjust_index(props_at, n), stop = adjust_index(pos + size, n);
        if (contains(d, start, stop, nd, m)) Py_RETURN_TRUE;
    }
    Py_RETURN_FALSE;
}

/* --- patch_broker_blocks ----------------------------------------------------------------------- */

PyDoc_STRVAR(patch_broker_blocks_doc,
             "patch_broker_blocks(buf, positions, queue_id, first_queue_offset, base, store_timestamp, store_host)\n"
             "record_batch.patch_broker_blocks; checks every argument before writing and returns NotImplemented\n"
             "(nothing written) for anything it does not handle.");

static PyObject *patch_broker_blocks(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "patch_broker_blocks takes 7 arguments");
        return NULL;
    }
    PyObject *positions = args[1], *host = args[6];
    int64_t queue_id, first_qoff, base, store_ts;
    if (!PyList_CheckExact(positions) || !as_i64(args[2], &queue_id) || queue_id < INT32_MIN ||
        queue_id > INT32_MAX || !as_i64(args[3], &first_qoff) || !as_i64(args[4], &base) ||
        !as_i64(args[5], &store_ts) || !PyBytes_CheckExact(host) || PyBytes_GET_SIZE(host) != 8)
        Py_RETURN_NOTIMPLEMENTED;
    Py_ssize_t count = PyList_GET_SIZE(positions);
    if (count > 0 && first_qoff > INT64_MAX - (count - 1)) Py_RETURN_NOTIMPLEMENTED;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_WRITABLE) < 0) {
        PyErr_Clear();
        Py_RETURN_NOTIMPLEMENTED;
    }
    /* Check everything first: either all blocks are written here or none (the Python body then runs). */
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t w;
        if (!as_ssize(PyList_GET_ITEM(positions, i), &w) || w < 0 ||
            w > view.len - BROKER_BLOCK_OFFSET - BROKER_BLOCK_SIZE ||
            (base > 0 ? (int64_t)w > INT64_MAX - base : (int64_t)w < INT64_MIN - base)) {
            PyBuffer_Release(&view);
            Py_RETURN_NOTIMPLEMENTED;
        }
    }
    unsigned char *b = (unsigned char *)view.buf;
    const unsigned char *h = (const unsigned char *)PyBytes_AS_STRING(host);
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t w = PyLong_AsSsize_t(PyList_GET_ITEM(positions, i));
        unsigned char *p = b + w + BROKER_BLOCK_OFFSET;
        wr_u32(p, (uint32_t)queue_id);
        wr_u64(p + 4, (uint64_t)(first_qoff + i));
        wr_u64(p + 12, (uint64_t)(base + w));
        wr_u64(p + 20, (uint64_t)store_ts);
        memcpy(p + 28, h, 8);
    }
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

/* --- property_codes ---------------------------------------------------------------------------- */

/* Properties are "key\x01value\x02..."; an item is what lies between two \x02 separators. */
static inline int item_has_key(const unsigned char *item, Py_ssize_t len, const char *key, Py_ssize_t klen) {
    return len >= klen && memcmp(item, key, (size_t)klen) == 0;
}

/* Append (crc32(word, prefix_crc), phys) to entries. */
static int add_index_entry(PyObject *entries, uint32_t prefix_crc, const unsigned char *w, Py_ssize_t len,
                           PyObject *phys) {
    PyObject *h = PyLong_FromUnsignedLong((unsigned long)crc32_of(prefix_crc, w, len));
    if (h == NULL) return -1;
    PyObject *t = PyTuple_New(2);
    if (t == NULL) {
        Py_DECREF(h);
        return -1;
    }
    PyTuple_SET_ITEM(t, 0, h);
    PyTuple_SET_ITEM(t, 1, Py_NewRef(phys));
    int rc = PyList_Append(entries, t);
    Py_DECREF(t);
    return rc;
}

/* One record's properties d[0:n]: its tags code, and its index entries appended (unique keys
 * first, the last one first, then the KEYS words in order), as Dispatcher.codes orders them. */
static int record_codes(const unsigned char *d, Py_ssize_t n, uint32_t prefix_crc, PyObject *phys, PyObject *entries,
                        uint32_t *tags_code) {
    *tags_code = 0;
    /* forward: the tags code (the last TAGS item wins) */
    for (Py_ssize_t at = 0; at <= n;) {
        const unsigned char *sep = memchr(d + at, 0x02, (size_t)(n - at));
        Py_ssize_t end = sep ? sep - d : n;
        if (item_has_key(d + at, end - at, "TAGS\x01", 5)) *tags_code = crc32_of(0, d + at + 5, end - at - 5);
        at = end + 1;
    }
    /* backward: unique keys, the last first */
    for (Py_ssize_t end = n; end >= 0;) {
        Py_ssize_t at = end;
        while (at > 0 && d[at - 1] != 0x02) at--;
        if (end - at > 9 && item_has_key(d + at, end - at, "UNIQ_KEY\x01", 9)) {
            if (add_index_entry(entries, prefix_crc, d + at + 9, end - at - 9, phys) < 0) return -1;
        }
        end = at - 1;
    }
    /* forward: the KEYS words, empty ones skipped */
    for (Py_ssize_t at = 0; at <= n;) {
        const unsigned char *sep = memchr(d + at, 0x02, (size_t)(n - at));
        Py_ssize_t end = sep ? sep - d : n;
        if (item_has_key(d + at, end - at, "KEYS\x01", 5)) {
            for (Py_ssize_t w = at + 5; w < end;) {
                const unsigned char *sp = memchr(d + w, ' ', (size_t)(end - w));
                Py_ssize_t wend = sp ? sp - d : end;
                if (wend > w && add_index_entry(entries, prefix_crc, d + w, wend - w, phys) < 0) return -1;
                w = wend + 1;
            }
        }
        at = end + 1;
    }
    return 0;
}

PyDoc_STRVAR(property_codes_doc,
             "property_codes(data, positions, sizes, props_ats, phys, prefix_crc) -> (tags_codes, index_entries)\n"
             "Dispatcher.codes for each record of a split batch: its TAGS crc32 (0 without), and (crc32(key,\n"
             "prefix_crc), phys[i]) per unique key and KEYS word. NotImplemented for arguments it does not handle.");

static PyObject *property_codes(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "property_codes takes 6 arguments");
        return NULL;
    }
    PyObject *data = args[0], *positions = args[1], *sizes = args[2], *props_ats = args[3], *phys = args[4];
    int64_t prefix_crc;
    if (!PyBytes_CheckExact(data) || !PyList_CheckExact(positions) || !PyList_CheckExact(sizes) ||
        !PyList_CheckExact(props_ats) || !PyList_CheckExact(phys) || !as_i64(args[5], &prefix_crc) ||
        prefix_crc < 0 || prefix_crc > 0xFFFFFFFFLL)
        Py_RETURN_NOTIMPLEMENTED;
    Py_ssize_t count = PyList_GET_SIZE(positions);
    if (PyList_GET_SIZE(sizes) != count || PyList_GET_SIZE(props_ats) != count || PyList_GET_SIZE(phys) != count)
        Py_RETURN_NOTIMPLEMENTED;
    const unsigned char *d = (const unsigned char *)PyBytes_AS_STRING(data);
    Py_ssize_t n = PyBytes_GET_SIZE(data);
    /* The spans, checked to lie within data, copied before anything is allocated (an allocation may
     * run a collection, and a finalizer could change the lists); phys likewise, as a tuple. */
    Py_ssize_t *spans = PyMem_New(Py_ssize_t, 2 * (size_t)(count ? count : 1));
    if (spans == NULL) return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t pos, size, props_at;
        if (!as_ssize(PyList_GET_ITEM(positions, i), &pos) || !as_ssize(PyList_GET_ITEM(sizes, i), &size) ||
            !as_ssize(PyList_GET_ITEM(props_ats, i), &props_at) || pos < 0 || size < 0 || pos > n ||
            size > n - pos || props_at < 0 || props_at > pos + size) {
            PyMem_Free(spans);
            Py_RETURN_NOTIMPLEMENTED;
        }
        spans[2 * i] = props_at;
        spans[2 * i + 1] = pos + size;
    }
    PyObject *phys_items = PyList_AsTuple(phys), *codes = NULL, *entries = NULL;
    if (phys_items == NULL || PyTuple_GET_SIZE(phys_items) != count) goto fail;
    codes = PyList_New(count);
    entries = PyList_New(0);
    if (codes == NULL || entries == NULL) goto fail;
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t props_at = spans[2 * i], end = spans[2 * i + 1];
        uint32_t tags_code = 0;
        if (props_at < end && record_codes(d + props_at, end - props_at, (uint32_t)prefix_crc,
                                           PyTuple_GET_ITEM(phys_items, i), entries, &tags_code) < 0)
            goto fail;
        PyObject *c = PyLong_FromUnsignedLong((unsigned long)tags_code);
        if (c == NULL) goto fail;
        PyList_SET_ITEM(codes, i, c);
    }
    PyMem_Free(spans);
    Py_DECREF(phys_items);
    return Py_BuildValue("(NN)", codes, entries);
fail:
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "property_codes: phys changed size");
    PyMem_Free(spans);
    Py_XDECREF(phys_items);
    Py_XDECREF(codes);
    Py_XDECREF(entries);
    return NULL;
}

/* --- unpack_record / unpack_records ------------------------------------------------------------ */

/* The record at pos as record.unpack_record's tuple; NULL with decode_error set if it is not one. */
static PyObject *unpack_at(const unsigned char *d, Py_ssize_t n, Py_ssize_t pos) {
    if (n - pos < MIN_RECORD_SIZE) {
        PyErr_Format(decode_error, "truncated record at %zd: %zd bytes left", pos, n - pos);
        return NULL;
    }
    const unsigned char *r = d + pos;
    int64_t total = rd_i32(r);
    int64_t body_len = rd_i32(r + BODY_LEN_POS);
    int64_t end = (int64_t)pos + total;
    int64_t body_at = (int64_t)pos + BODY_POS;
    int64_t topic_at = body_at + body_len + 2;
    if (rd_u32(r + 4) != MAGIC || total < MIN_RECORD_SIZE || end > n || body_len < 0 || topic_at + 2 > end) {
        PyErr_Format(decode_error, "bad record at %zd", pos);
        return NULL;
    }
    int64_t props_at = topic_at + rd_u16(d + topic_at - 2) + 2;
    if (props_at > end) {
        PyErr_Format(decode_error, "bad topic length at %zd", pos);
        return NULL;
    }
    if (props_at + rd_u16(d + props_at - 2) != end) {
        PyErr_Format(decode_error, "record lengths do not add up at %zd", pos);
        return NULL;
    }
    return Py_BuildValue("(LkiiLy#iLiLLLy#LLLL)", (long long)total, (unsigned long)rd_u32(r + 8), (int)rd_i32(r + 12),
                         (int)rd_i32(r + 16), (long long)rd_i64(r + 20), (const char *)r + 28, (Py_ssize_t)8,
                         (int)rd_i32(r + 36), (long long)rd_i64(r + 40), (int)rd_i32(r + 48),
                         (long long)rd_i64(r + 52), (long long)rd_i64(r + 60), (long long)rd_i64(r + 68),
                         (const char *)r + 76, (Py_ssize_t)8, (long long)body_at, (long long)topic_at,
                         (long long)props_at, (long long)end);
}

PyDoc_STRVAR(unpack_record_doc,
             "unpack_record(buf, pos) -> tuple\n"
             "record.unpack_record; NotImplemented for a buffer type or position it does not handle.");

static PyObject *unpack_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "unpack_record takes 2 arguments");
        return NULL;
    }
    Py_ssize_t pos;
    Py_buffer view;
    if (decode_error == NULL || !as_ssize(args[1], &pos) || pos < 0) Py_RETURN_NOTIMPLEMENTED;
    if (!get_bytes_buffer(args[0], &view)) Py_RETURN_NOTIMPLEMENTED;
    PyObject *out = pos > view.len ? Py_NewRef(Py_NotImplemented) : unpack_at(view.buf, view.len, pos);
    PyBuffer_Release(&view);
    return out;
}

PyDoc_STRVAR(unpack_records_doc,
             "unpack_records(buf) -> (records, error)\n"
             "record.iter_records's records as a list, up to a blank marker or the end; error is the\n"
             "MessageDecodeError that ended it early, else None. NotImplemented for a buffer type it does not handle.");

static PyObject *unpack_records(PyObject *self, PyObject *buf) {
    Py_buffer view;
    if (decode_error == NULL || !get_bytes_buffer(buf, &view)) Py_RETURN_NOTIMPLEMENTED;
    const unsigned char *d = view.buf;
    Py_ssize_t n = view.len, pos = 0;
    PyObject *records = PyList_New(0), *error = NULL;
    if (records == NULL) goto fail;
    while (n - pos >= BLANK_SIZE) {
        if (rd_u32(d + pos + 4) == BLANK_MAGIC) break;
        PyObject *t = unpack_at(d, n, pos);
        if (t == NULL) {
            if (!PyErr_ExceptionMatches(decode_error)) goto fail;
            PyObject *type, *traceback;
            PyErr_Fetch(&type, &error, &traceback);
            PyErr_NormalizeException(&type, &error, &traceback);
            Py_XDECREF(type);
            Py_XDECREF(traceback);
            break;
        }
        pos = (Py_ssize_t)PyLong_AsSsize_t(PyTuple_GET_ITEM(t, 16));
        int rc = PyList_Append(records, t);
        Py_DECREF(t);
        if (rc < 0) goto fail;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(NN)", records, error ? error : Py_NewRef(Py_None));
fail:
    PyBuffer_Release(&view);
    Py_XDECREF(records);
    Py_XDECREF(error);
    return NULL;
}

/* --- index_put (the store's index file; its layout is pymq/broker/store/index.py's) ------------ */

#define INDEX_ENTRY_FORMAT "<Iqii"
#define INDEX_ENTRY_SIZE 20
#define INDEX_SLOT_FORMAT "<i"

static inline void wr_le32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}
static inline uint32_t rd_le32(const unsigned char *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

#if defined(__GNUC__) || defined(__clang__)
#define STORE_ORDER() __asm__ __volatile__("" ::: "memory")
#else
#define STORE_ORDER() ((void)0)
#endif

PyDoc_STRVAR(index_put_doc,
             "index_put(buf, entries_base, slots_base, slots, count, entries, tdiff) -> new count\n"
             "IndexFile.put_many's loop: entry n = count, count + 1 ... for each (hash, phys) of entries, chained\n"
             "to its slot's previous entry, written before the slot points at it. Checks every argument first and\n"
             "returns NotImplemented (nothing written) for anything it does not handle.");

static PyObject *index_put(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "index_put takes 7 arguments");
        return NULL;
    }
    PyObject *entries = args[5];
    int64_t entries_base, slots_base, slots, count, tdiff;
    if (!as_i64(args[1], &entries_base) || !as_i64(args[2], &slots_base) || !as_i64(args[3], &slots) ||
        !as_i64(args[4], &count) || !as_i64(args[6], &tdiff) || !PyList_CheckExact(entries) || entries_base < 0 ||
        slots_base < 0 || slots <= 0 || slots > INT32_MAX || count < 0 || tdiff < INT32_MIN || tdiff > INT32_MAX)
        Py_RETURN_NOTIMPLEMENTED;
    Py_ssize_t todo = PyList_GET_SIZE(entries);
    if (count > INT32_MAX - todo) Py_RETURN_NOTIMPLEMENTED;
    for (Py_ssize_t i = 0; i < todo; i++) {
        PyObject *e = PyList_GET_ITEM(entries, i);
        int64_t h, phys;
        if (!PyTuple_CheckExact(e) || PyTuple_GET_SIZE(e) != 2 || !as_i64(PyTuple_GET_ITEM(e, 0), &h) || h < 0 ||
            h > 0xFFFFFFFFLL || !as_i64(PyTuple_GET_ITEM(e, 1), &phys))
            Py_RETURN_NOTIMPLEMENTED;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_WRITABLE) < 0) {
        PyErr_Clear();
        Py_RETURN_NOTIMPLEMENTED;
    }
    if (slots_base > view.len || slots > (view.len - slots_base) / 4 || entries_base > view.len ||
        count + todo > (view.len - entries_base) / INDEX_ENTRY_SIZE) {
        PyBuffer_Release(&view);
        Py_RETURN_NOTIMPLEMENTED;
    }
    unsigned char *b = (unsigned char *)view.buf;
    unsigned char *slot_table = b + slots_base;
    unsigned char *at = b + entries_base + count * INDEX_ENTRY_SIZE;
    for (Py_ssize_t i = 0; i < todo; i++) {
        PyObject *e = PyList_GET_ITEM(entries, i);
        uint32_t h = (uint32_t)PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(e, 0));
        uint64_t phys = (uint64_t)PyLong_AsLongLong(PyTuple_GET_ITEM(e, 1));
        unsigned char *slot = slot_table + 4 * (h % (uint32_t)slots);
        wr_le32(at, h);
        wr_le32(at + 4, (uint32_t)phys);
        wr_le32(at + 8, (uint32_t)(phys >> 32));
        wr_le32(at + 12, (uint32_t)tdiff);
        wr_le32(at + 16, rd_le32(slot)); /* prev: the slot's newest entry so far */
        STORE_ORDER();                   /* the entry lands before its slot points at it (crash safety) */
        wr_le32(slot, (uint32_t)count);
        count++;
        at += INDEX_ENTRY_SIZE;
    }
    PyBuffer_Release(&view);
    return PyLong_FromLongLong(count);
}

/* --- cq_entries (the store's consume-queue entries; their layout is pymq/broker/store/consume_queue.py's) */

#define CQ_ENTRY_FORMAT ">qiq"
#define CQ_ENTRY_SIZE 20

PyDoc_STRVAR(cq_entries_doc,
             "cq_entries(phys, sizes, tags_codes) -> bytes\n"
             "The consume-queue entries (commitlog offset, size, tags code) of a batch, packed back to back.\n"
             "NotImplemented for anything it does not handle (not three lists of one length, an item not an int\n"
             "that fits its field).");

static PyObject *cq_entries(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "cq_entries takes 3 arguments");
        return NULL;
    }
    PyObject *phys = args[0], *sizes = args[1], *codes = args[2];
    if (!PyList_CheckExact(phys) || !PyList_CheckExact(sizes) || !PyList_CheckExact(codes)) Py_RETURN_NOTIMPLEMENTED;
    Py_ssize_t count = PyList_GET_SIZE(phys);
    if (PyList_GET_SIZE(sizes) != count || PyList_GET_SIZE(codes) != count ||
        count > PY_SSIZE_T_MAX / CQ_ENTRY_SIZE)
        Py_RETURN_NOTIMPLEMENTED;
    /* checked before the bytes are allocated (an allocation may run code that changes the lists) */
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t a, b, c;
        if (!as_i64(PyList_GET_ITEM(phys, i), &a) || !as_i64(PyList_GET_ITEM(sizes, i), &b) ||
            !as_i64(PyList_GET_ITEM(codes, i), &c) || b < INT32_MIN || b > INT32_MAX)
            Py_RETURN_NOTIMPLEMENTED;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, count * CQ_ENTRY_SIZE);
    if (out == NULL) return NULL;
    if (PyList_GET_SIZE(phys) != count || PyList_GET_SIZE(sizes) != count || PyList_GET_SIZE(codes) != count) {
        Py_DECREF(out);
        Py_RETURN_NOTIMPLEMENTED;
    }
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < count; i++, p += CQ_ENTRY_SIZE) {
        int64_t a, b, c;
        if (!as_i64(PyList_GET_ITEM(phys, i), &a) || !as_i64(PyList_GET_ITEM(sizes, i), &b) ||
            !as_i64(PyList_GET_ITEM(codes, i), &c) || b < INT32_MIN || b > INT32_MAX) {
            Py_DECREF(out);
            Py_RETURN_NOTIMPLEMENTED;
        }
        wr_u64(p, (uint64_t)a);
        wr_u32(p + 8, (uint32_t)b);
        wr_u64(p + 12, (uint64_t)c);
    }
    return out;
}

/* --- encode_record ----------------------------------------------------------------------------- */

PyDoc_STRVAR(encode_record_doc,
             "encode_record(topic, body, properties, flag, sys_flag, born_timestamp, born_host, reconsume_times,\n"
             "              prepared_tx_offset, queue_id, queue_offset, physical_offset, store_timestamp, store_host)\n"
             "record.encode_record with every argument positional; NotImplemented for anything it does not handle\n"
             "(non-bytes, ints out of their field's range, hosts not of 8 bytes, lengths the Python code refuses).");

static PyObject *encode_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 14) {
        PyErr_SetString(PyExc_TypeError, "encode_record takes 14 arguments");
        return NULL;
    }
    PyObject *topic = args[0], *body = args[1], *props = args[2], *born_host = args[6], *store_host = args[13];
    /* the int fields in argument order, each with the index of the argument and its width in bytes */
    static const int int_args[] = {3, 4, 5, 7, 8, 9, 10, 11, 12};
    static const int int_widths[] = {4, 4, 8, 4, 8, 4, 8, 8, 8};
    int64_t v[9];
    if (!PyBytes_CheckExact(topic) || !PyBytes_CheckExact(body) || !PyBytes_CheckExact(props) ||
        !PyBytes_CheckExact(born_host) || PyBytes_GET_SIZE(born_host) != 8 || !PyBytes_CheckExact(store_host) ||
        PyBytes_GET_SIZE(store_host) != 8)
        Py_RETURN_NOTIMPLEMENTED;
    for (int i = 0; i < 9; i++) {
        if (!as_i64(args[int_args[i]], &v[i]) || (int_widths[i] == 4 && (v[i] < INT32_MIN || v[i] > INT32_MAX)))
            Py_RETURN_NOTIMPLEMENTED;
    }
    Py_ssize_t tlen = PyBytes_GET_SIZE(topic), blen = PyBytes_GET_SIZE(body), plen = PyBytes_GET_SIZE(props);
    if (tlen > 0xFFFF || plen > MAX_PROPERTIES_SIZE || blen > INT32_MAX - FIXED_SIZE - 4 - tlen - plen)
        Py_RETURN_NOTIMPLEMENTED;
    Py_ssize_t total = FIXED_SIZE + blen + 2 + tlen + 2 + plen;
    PyObject *out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL) return NULL;
    unsigned char *r = (unsigned char *)PyBytes_AS_STRING(out);
    const unsigned char *b = (const unsigned char *)PyBytes_AS_STRING(body);
    wr_u32(r, (uint32_t)total);
    wr_u32(r + 4, MAGIC);
    wr_u32(r + 8, crc32_of(0, b, blen));
    wr_u32(r + 12, (uint32_t)v[0]);      /* flag */
    wr_u32(r + 16, (uint32_t)v[1]);      /* sys_flag */
    wr_u64(r + 20, (uint64_t)v[2]);      /* born_timestamp */
    memcpy(r + 28, PyBytes_AS_STRING(born_host), 8);
    wr_u32(r + 36, (uint32_t)v[3]);      /* reconsume_times */
    wr_u64(r + 40, (uint64_t)v[4]);      /* prepared_tx_offset */
    wr_u32(r + 48, (uint32_t)v[5]);      /* queue_id */
    wr_u64(r + 52, (uint64_t)v[6]);      /* queue_offset */
    wr_u64(r + 60, (uint64_t)v[7]);      /* physical_offset */
    wr_u64(r + 68, (uint64_t)v[8]);      /* store_timestamp */
    memcpy(r + 76, PyBytes_AS_STRING(store_host), 8);
    wr_u32(r + BODY_LEN_POS, (uint32_t)blen);
    unsigned char *p = r + BODY_POS;
    memcpy(p, b, (size_t)blen);
    p += blen;
    p[0] = (unsigned char)(tlen >> 8);
    p[1] = (unsigned char)tlen;
    memcpy(p + 2, PyBytes_AS_STRING(topic), (size_t)tlen);
    p += 2 + tlen;
    p[0] = (unsigned char)(plen >> 8);
    p[1] = (unsigned char)plen;
    memcpy(p + 2, PyBytes_AS_STRING(props), (size_t)plen);
    return out;
}

/* --- encode_batch (the producer's batch of plain messages) -------------------------------------- */

/* Interned attribute names of the messages encode_batch reads (made once, at import). */
static PyObject *s_topic, *s_body, *s_tags, *s_keys, *s_properties, *s_flag, *s_delay_level;

#define UNIQ_PREFIX "UNIQ_KEY\x01"
#define UNIQ_PREFIX_LEN 9
#define TAGS_PREFIX "TAGS\x01"
#define TAGS_PREFIX_LEN 5
#define ID_COUNTER_DIGITS 4

/* One message of a batch between the checking pass and the writing pass (references owned). */
typedef struct {
    PyObject *body;
    PyObject *tags; /* NULL: no TAGS property */
    const char *tag;
    Py_ssize_t tag_len;
    int32_t flag;
} batch_item;

/* Whether a message attribute is "empty" the way the producer's truthiness tests see it, for the
 * types handled here: None, or an exact str, list or dict of length 0. -1: not handled. */
static int empty_container(PyObject *o) {
    if (o == Py_None) return 1;
    if (PyUnicode_CheckExact(o)) return PyUnicode_GET_LENGTH(o) == 0 ? 1 : -1;
    if (PyList_CheckExact(o)) return PyList_GET_SIZE(o) == 0 ? 1 : -1;
    if (PyDict_CheckExact(o)) return PyDict_GET_SIZE(o) == 0 ? 1 : -1;
    return -1;
}

/* The message class (pymq.protocol.message.Message, registered by batch_encode.py) and where its slots
 * are: for an instance of exactly that class the fields are read from their slots (what its member
 * descriptors would return) instead of through getattr, 7 lookups a message. */
static PyTypeObject *message_type = NULL;
enum { F_TOPIC, F_BODY, F_TAGS, F_KEYS, F_PROPERTIES, F_FLAG, F_DELAY_LEVEL, N_FIELDS };
static Py_ssize_t field_offsets[N_FIELDS];
static PyObject **field_names[N_FIELDS] = {&s_topic, &s_body, &s_tags, &s_keys, &s_properties, &s_flag, &s_delay_level};

/* A new reference to field f of m; NULL (an error set or, for an empty slot, not) if it cannot be read. */
static inline PyObject *message_field(PyObject *m, int fast, int f) {
    if (fast) {
        PyObject *v = *(PyObject **)((char *)m + field_offsets[f]);
        return v == NULL ? NULL : Py_NewRef(v);
    }
    return PyObject_GetAttr(m, *field_names[f]);
}

PyDoc_STRVAR(set_message_class_doc,
             "set_message_class(cls) -> bool\n"
             "encode_batch reads the fields of exact instances of cls from their slots; True if cls has an object slot\n"
             "(a member descriptor) for each field encode_batch reads, else False (getattr is used).");

static PyObject *set_message_class(PyObject *self, PyObject *cls) {
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "a class is required");
        return NULL;
    }
    Py_ssize_t offsets[N_FIELDS];
    for (int f = 0; f < N_FIELDS; f++) {
        PyObject *d = PyDict_GetItemWithError(((PyTypeObject *)cls)->tp_dict, *field_names[f]);
        if (d == NULL && PyErr_Occurred()) return NULL;
        if (d == NULL || !Py_IS_TYPE(d, &PyMemberDescr_Type) ||
            ((PyMemberDescrObject *)d)->d_member->type != T_OBJECT_EX ||
            ((PyMemberDescrObject *)d)->d_common.d_type != (PyTypeObject *)cls) {
            Py_CLEAR(message_type);
            Py_RETURN_FALSE;
        }
        offsets[f] = ((PyMemberDescrObject *)d)->d_member->offset;
    }
    memcpy(field_offsets, offsets, sizeof(offsets));
    Py_XSETREF(message_type, (PyTypeObject *)Py_NewRef(cls));
    Py_RETURN_TRUE;
}

/* Check one message and take what the writing pass needs; 0 if it is outside the handled case. */
static int take_batch_item(PyObject *m, PyObject *topic, int64_t max_size, int64_t compress_threshold,
                           batch_item *it) {
    PyObject *o;
    int ok;
    const int fast = message_type != NULL && Py_TYPE(m) == message_type;
    /* topic: the batch's (an exact str, equal) */
    if ((o = message_field(m, fast, F_TOPIC)) == NULL) return 0;
    ok = o == topic || (PyUnicode_CheckExact(o) && PyUnicode_Compare(o, topic) == 0);
    Py_DECREF(o);
    if (!ok) return 0;
    /* delay_level: an exact int, not above 0 (a delayed message cannot be batched) */
    int64_t v;
    if ((o = message_field(m, fast, F_DELAY_LEVEL)) == NULL) return 0;
    ok = as_i64(o, &v) && v <= 0;
    Py_DECREF(o);
    if (!ok) return 0;
    /* keys and properties: empty */
    if ((o = message_field(m, fast, F_KEYS)) == NULL) return 0;
    ok = empty_container(o) == 1;
    Py_DECREF(o);
    if (!ok) return 0;
    if ((o = message_field(m, fast, F_PROPERTIES)) == NULL) return 0;
    ok = empty_container(o) == 1;
    Py_DECREF(o);
    if (!ok) return 0;
    /* flag: an exact int of 32 bits */
    if ((o = message_field(m, fast, F_FLAG)) == NULL) return 0;
    ok = as_i64(o, &v) && v >= INT32_MIN && v <= INT32_MAX;
    Py_DECREF(o);
    if (!ok) return 0;
    it->flag = (int32_t)v;
    /* tags: None, or an exact str whose UTF-8 has no separator byte */
    if ((o = message_field(m, fast, F_TAGS)) == NULL) return 0;
    if (o == Py_None || (PyUnicode_CheckExact(o) && PyUnicode_GET_LENGTH(o) == 0)) {
        Py_DECREF(o);
        it->tags = NULL;
        it->tag = NULL;
        it->tag_len = 0;
    } else {
        const char *t = PyUnicode_CheckExact(o) ? PyUnicode_AsUTF8AndSize(o, &it->tag_len) : NULL;
        if (t == NULL || memchr(t, 1, (size_t)it->tag_len) != NULL || memchr(t, 2, (size_t)it->tag_len) != NULL) {
            Py_DECREF(o);
            return 0;
        }
        it->tags = o;
        it->tag = t;
    }
    /* body: exact bytes, not empty, within the size limit and the compression threshold */
    if ((o = message_field(m, fast, F_BODY)) == NULL) {
        Py_CLEAR(it->tags);
        return 0;
    }
    Py_ssize_t blen = PyBytes_CheckExact(o) ? PyBytes_GET_SIZE(o) : 0;
    if (blen == 0 || blen > max_size || blen > compress_threshold) {
        Py_DECREF(o);
        Py_CLEAR(it->tags);
        return 0;
    }
    it->body = o;
    return 1;
}

static void release_batch_items(batch_item *items, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_XDECREF(items[i].body);
        Py_XDECREF(items[i].tags);
    }
    PyMem_Free(items);
}

static const char HEX_UPPER[] = "0123456789ABCDEF";

PyDoc_STRVAR(encode_batch_doc,
             "encode_batch(messages, topic, topic_bytes, born_timestamp, born_host, max_size, compress_threshold,\n"
             "             id_head, counter) -> (records, ids)\n"
             "batch_encode.encode_batch: the records of plain messages (no keys, no properties, no delay, bodies\n"
             "not above compress_threshold) concatenated, each with a UNIQ_KEY of id_head + next(counter) & 0xFFFF\n"
             "in 4 hex digits. Everything is checked before the counter is touched; NotImplemented (nothing\n"
             "consumed) for anything it does not handle.");

static PyObject *encode_batch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "encode_batch takes 9 arguments");
        return NULL;
    }
    PyObject *messages = args[0], *topic = args[1], *topic_b = args[2], *born_host = args[4], *head = args[7];
    PyObject *counter = args[8];
    int64_t born_ts, max_size, threshold;
    if (!PyList_CheckExact(messages) || !PyUnicode_CheckExact(topic) || PyUnicode_GET_LENGTH(topic) == 0 ||
        !PyBytes_CheckExact(topic_b) || PyBytes_GET_SIZE(topic_b) > 0xFFFF || !as_i64(args[3], &born_ts) ||
        !PyBytes_CheckExact(born_host) || PyBytes_GET_SIZE(born_host) != 8 || !as_i64(args[5], &max_size) ||
        !as_i64(args[6], &threshold) || !PyUnicode_CheckExact(head) || !PyUnicode_IS_ASCII(head) ||
        !PyIter_Check(counter))
        Py_RETURN_NOTIMPLEMENTED;
    const Py_ssize_t n = PyList_GET_SIZE(messages);
    const Py_ssize_t head_len = PyUnicode_GET_LENGTH(head), id_len = head_len + ID_COUNTER_DIGITS;
    const Py_ssize_t tlen = PyBytes_GET_SIZE(topic_b);
    if (n == 0 || id_len > 1024) Py_RETURN_NOTIMPLEMENTED;
    batch_item *items = PyMem_Calloc((size_t)n, sizeof(batch_item));
    if (items == NULL) return PyErr_NoMemory();
    PyObject *out = NULL, *ids = NULL;
    /* pass 1: check every message and size the records (nothing consumed yet) */
    int64_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!take_batch_item(PyList_GET_ITEM(messages, i), topic, max_size, threshold, &items[i])) {
            PyErr_Clear();
            goto not_handled;
        }
        int64_t plen = UNIQ_PREFIX_LEN + id_len + 1 + (items[i].tags ? TAGS_PREFIX_LEN + items[i].tag_len + 1 : 0);
        int64_t size = FIXED_SIZE + PyBytes_GET_SIZE(items[i].body) + 2 + tlen + 2 + plen;
        if (plen > MAX_PROPERTIES_SIZE || size > max_size || size > INT32_MAX) goto not_handled;
        total += size;
        if (total > max_size) goto not_handled;
    }
    /* pass 2: write the records and their ids */
    out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    ids = PyList_New(n);
    if (out == NULL || ids == NULL) goto fail;
    unsigned char *r = (unsigned char *)PyBytes_AS_STRING(out);
    const unsigned char *host = (const unsigned char *)PyBytes_AS_STRING(born_host);
    const unsigned char *head_chars = PyUnicode_1BYTE_DATA(head);
    const unsigned char *tp = (const unsigned char *)PyBytes_AS_STRING(topic_b);
    for (Py_ssize_t i = 0; i < n; i++) {
        batch_item *it = &items[i];
        PyObject *c = PyIter_Next(counter);
        if (c == NULL) {
            if (!PyErr_Occurred()) PyErr_SetNone(PyExc_StopIteration);
            goto fail;
        }
        unsigned long long cv = PyLong_Check(c) ? PyLong_AsUnsignedLongLongMask(c) : (unsigned long long)-1;
        int bad = !PyLong_Check(c) || PyErr_Occurred();
        Py_DECREF(c);
        if (bad) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "the id counter must yield ints");
            goto fail;
        }
        unsigned cnt = (unsigned)(cv & 0xFFFF);
        PyObject *id = PyUnicode_New(id_len, 127);
        if (id == NULL) goto fail;
        unsigned char *idc = PyUnicode_1BYTE_DATA(id);
        memcpy(idc, head_chars, (size_t)head_len);
        idc[head_len] = (unsigned char)HEX_UPPER[(cnt >> 12) & 0xF];
        idc[head_len + 1] = (unsigned char)HEX_UPPER[(cnt >> 8) & 0xF];
        idc[head_len + 2] = (unsigned char)HEX_UPPER[(cnt >> 4) & 0xF];
        idc[head_len + 3] = (unsigned char)HEX_UPPER[cnt & 0xF];
        PyList_SET_ITEM(ids, i, id);

        const unsigned char *b = (const unsigned char *)PyBytes_AS_STRING(it->body);
        Py_ssize_t blen = PyBytes_GET_SIZE(it->body);
        Py_ssize_t plen = UNIQ_PREFIX_LEN + id_len + 1 + (it->tags ? TAGS_PREFIX_LEN + it->tag_len + 1 : 0);
        Py_ssize_t size = FIXED_SIZE + blen + 2 + tlen + 2 + plen;
        memset(r + 12, 0, FIXED_SIZE - 12);
        wr_u32(r, (uint32_t)size);
        wr_u32(r + 4, MAGIC);
        wr_u32(r + 8, crc32_of(0, b, blen));
        wr_u32(r + 12, (uint32_t)it->flag);
        wr_u64(r + 20, (uint64_t)born_ts);
        memcpy(r + 28, host, 8);
        wr_u32(r + BODY_LEN_POS, (uint32_t)blen);
        unsigned char *p = r + BODY_POS;
        memcpy(p, b, (size_t)blen);
        p += blen;
        p[0] = (unsigned char)(tlen >> 8);
        p[1] = (unsigned char)tlen;
        memcpy(p + 2, tp, (size_t)tlen);
        p += 2 + tlen;
        p[0] = (unsigned char)(plen >> 8);
        p[1] = (unsigned char)plen;
        p += 2;
        memcpy(p, UNIQ_PREFIX, UNIQ_PREFIX_LEN);
        p += UNIQ_PREFIX_LEN;
        memcpy(p, idc, (size_t)id_len);
        p += id_len;
        *p++ = 2;
        if (it->tags) {
            memcpy(p, TAGS_PREFIX, TAGS_PREFIX_LEN);
            p += TAGS_PREFIX_LEN;
            memcpy(p, it->tag, (size_t)it->tag_len);
            p += it->tag_len;
            *p++ = 2;
        }
        r = p;
    }
    release_batch_items(items, n);
    return Py_BuildValue("(NN)", out, ids);
not_handled:
    release_batch_items(items, n);
    Py_RETURN_NOTIMPLEMENTED;
fail:
    release_batch_items(items, n);
    Py_XDECREF(out);
    Py_XDECREF(ids);
    return NULL;
}

/* --- crc32 and the error class ----------------------------------------------------------------- */

PyDoc_STRVAR(crc32_doc, "crc32(data, value=0) -> int\nThe CRC split_batch checks bodies with (zlib's if it was found at build).");

static PyObject *crc32_py(PyObject *self, PyObject *args) {
    Py_buffer view;
    unsigned int value = 0;
    if (!PyArg_ParseTuple(args, "y*|I", &view, &value)) return NULL;
    uint32_t crc = crc32_of(value, view.buf, view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}

PyDoc_STRVAR(crc32_table_doc, "crc32_table(data, value=0) -> int\nThe CRC without zlib (tested against zlib.crc32).");

static PyObject *crc32_table_py(PyObject *self, PyObject *args) {
    Py_buffer view;
    unsigned int value = 0;
    if (!PyArg_ParseTuple(args, "y*|I", &view, &value)) return NULL;
    uint32_t crc = crc32_table_of(value, view.buf, view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}

PyDoc_STRVAR(set_decode_error_doc, "set_decode_error(cls)\nThe exception class decode failures raise (record.py passes "
                                   "MessageDecodeError).");

static PyObject *set_decode_error(PyObject *self, PyObject *cls) {
    if (!PyExceptionClass_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "an exception class is required");
        return NULL;
    }
    Py_XSETREF(decode_error, Py_NewRef(cls));
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"split_batch", (PyCFunction)(void (*)(void))split_batch, METH_FASTCALL, split_batch_doc},
    {"any_property_contains", (PyCFunction)(void (*)(void))any_property_contains, METH_FASTCALL,
     any_property_contains_doc},
    {"patch_broker_blocks", (PyCFunction)(void (*)(void))patch_broker_blocks, METH_FASTCALL,
     patch_broker_blocks_doc},
    {"index_put", (PyCFunction)(void (*)(void))index_put, METH_FASTCALL, index_put_doc},
    {"cq_entries", (PyCFunction)(void (*)(void))cq_entries, METH_FASTCALL, cq_entries_doc},
    {"encode_record", (PyCFunction)(void (*)(void))encode_record, METH_FASTCALL, encode_record_doc},
    {"encode_batch", (PyCFunction)(void (*)(void))encode_batch, METH_FASTCALL, encode_batch_doc},
    {"set_message_class", set_message_class, METH_O, set_message_class_doc},
    {"property_codes", (PyCFunction)(void (*)(void))property_codes, METH_FASTCALL, property_codes_doc},
    {"unpack_record", (PyCFunction)(void (*)(void))unpack_record, METH_FASTCALL, unpack_record_doc},
    {"unpack_records", unpack_records, METH_O, unpack_records_doc},
    {"crc32", crc32_py, METH_VARARGS, crc32_doc},
    {"crc32_table", crc32_table_py, METH_VARARGS, crc32_table_doc},
    {"set_decode_error", set_decode_error, METH_O, set_decode_error_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "pymq._speedups", "Optional C versions of pymq.protocol's per-record loops.", -1, methods,
};

PyMODINIT_FUNC PyInit__speedups(void) {
    crc_init();
#ifdef HAVE_CLMUL_CODE
    __builtin_cpu_init();
    use_clmul = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
#endif
    if (!(s_topic = PyUnicode_InternFromString("topic")) || !(s_body = PyUnicode_InternFromString("body")) ||
        !(s_tags = PyUnicode_InternFromString("tags")) || !(s_keys = PyUnicode_InternFromString("keys")) ||
        !(s_properties = PyUnicode_InternFromString("properties")) ||
        !(s_flag = PyUnicode_InternFromString("flag")) || !(s_delay_level = PyUnicode_InternFromString("delay_level")))
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    PyObject *layout = Py_BuildValue(
        "{s:k,s:k,s:s,s:i,s:i,s:i,s:s,s:i,s:i,s:i,s:i}", "MAGIC", (unsigned long)MAGIC, "BLANK_MAGIC",
        (unsigned long)BLANK_MAGIC, "FIXED", FIXED_FORMAT, "BODY_POS", BODY_POS, "BODY_LEN_POS", BODY_LEN_POS,
        "MIN_RECORD_SIZE", MIN_RECORD_SIZE, "BROKER_BLOCK", BROKER_BLOCK_FORMAT, "BROKER_BLOCK_OFFSET",
        BROKER_BLOCK_OFFSET, "BLANK_SIZE", BLANK_SIZE, "MAX_PROPERTIES_SIZE", MAX_PROPERTIES_SIZE, "ABI_VERSION",
        ABI_VERSION);
    PyObject *index_layout = Py_BuildValue("{s:s,s:i,s:s}", "ENTRY", INDEX_ENTRY_FORMAT, "ENTRY_SIZE",
                                           INDEX_ENTRY_SIZE, "SLOT", INDEX_SLOT_FORMAT);
    if (index_layout == NULL || PyModule_AddObject(m, "INDEX_LAYOUT", index_layout) < 0) {
        Py_XDECREF(index_layout);
        Py_XDECREF(layout);
        Py_DECREF(m);
        return NULL;
    }
    PyObject *cq_layout = Py_BuildValue("{s:s,s:i}", "ENTRY", CQ_ENTRY_FORMAT, "ENTRY_SIZE", CQ_ENTRY_SIZE);
    if (cq_layout == NULL || PyModule_AddObject(m, "CQ_LAYOUT", cq_layout) < 0) {
        Py_XDECREF(cq_layout);
        Py_XDECREF(layout);
        Py_DECREF(m);
        return NULL;
    }
#ifdef HAVE_CLMUL_CODE
    if (PyModule_AddIntConstant(m, "HAVE_CLMUL", use_clmul) < 0) {
#else
    if (PyModule_AddIntConstant(m, "HAVE_CLMUL", 0) < 0) {
#endif
        Py_XDECREF(layout);
        Py_DECREF(m);
        return NULL;
    }
#ifdef HAVE_ZLIB
    if (PyModule_AddIntConstant(m, "HAVE_ZLIB", 1) < 0) {
#else
    if (PyModule_AddIntConstant(m, "HAVE_ZLIB", 0) < 0) {
#endif
        Py_XDECREF(layout);
        Py_DECREF(m);
        return NULL;
    }
    if (layout == NULL || PyModule_AddObject(m, "LAYOUT", layout) < 0) {
        Py_XDECREF(layout);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
