/* Record scanning of pymq._speedups: the broker's batch split and patch, the dispatcher's codes, the
 * stored-record scan (recovery, replication) and a slave's dispatch of what it scanned, and the decoders
 * (record_batch.py's and record.py's per-record loops, the Spark connector's columns). */
#include "speedups.h"

/* --- helpers ----------------------------------------------------------------------------------- */

/* The error class pymq/protocol/accelerator.py registers (pymq.errors.MessageDecodeError). */
static PyObject *decode_error = NULL;

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

SPEEDUPS_DOC(split_batch_doc,
             "split_batch(data, topic_field, max_size, reject_reason) -> (positions, sizes, props_ats, rejected)\n"
             "record_batch.split_batch's loop; reject_reason(data, pos, end, body_end, topic_field, max_size)\n"
             "names the refusal of a record whose lengths or topic do not check out. NotImplemented for\n"
             "arguments it does not handle.");

PyObject *split_batch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
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

SPEEDUPS_DOC(any_property_contains_doc,
             "any_property_contains(data, positions, sizes, props_ats, needle) -> bool\n"
             "record_batch.any_property_contains over a split's lists; NotImplemented for arguments it does not "
             "handle.");

PyObject *any_property_contains(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
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

SPEEDUPS_DOC(patch_broker_blocks_doc,
             "patch_broker_blocks(buf, positions, queue_id, first_queue_offset, base, store_timestamp, store_host)\n"
             "record_batch.patch_broker_blocks; checks every argument before writing and returns NotImplemented\n"
             "(nothing written) for anything it does not handle.");

PyObject *patch_broker_blocks(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
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

/* --- store_record (one record: copy, then its broker block) ------------------------------------ */

#if defined(__GNUC__) || defined(__clang__)
#define COPY_BEFORE_PATCH() __asm__ __volatile__("" ::: "memory")
#else
#define COPY_BEFORE_PATCH() ((void)0)
#endif

SPEEDUPS_DOC(store_record_doc,
             "store_record(buf, at, data, pos, size, queue_id, queue_offset, base, store_timestamp, store_host)\n"
             "record_batch.store_record: data[pos:pos + size] copied to buf[at:], then its broker block written.\n"
             "Checks every argument first and returns NotImplemented (nothing written) for anything it does not\n"
             "handle.");

PyObject *store_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 10) {
        PyErr_SetString(PyExc_TypeError, "store_record takes 10 arguments");
        return NULL;
    }
    PyObject *data = args[2], *host = args[9];
    Py_ssize_t at, pos, size;
    int64_t queue_id, qoff, base, store_ts;
    if (!as_ssize(args[1], &at) || !PyBytes_CheckExact(data) || !as_ssize(args[3], &pos) ||
        !as_ssize(args[4], &size) || !as_i64(args[5], &queue_id) || queue_id < INT32_MIN || queue_id > INT32_MAX ||
        !as_i64(args[6], &qoff) || !as_i64(args[7], &base) || !as_i64(args[8], &store_ts) ||
        !PyBytes_CheckExact(host) || PyBytes_GET_SIZE(host) != 8)
        Py_RETURN_NOTIMPLEMENTED;
    Py_ssize_t n = PyBytes_GET_SIZE(data);
    if (at < 0 || pos < 0 || size < 0 || pos > n || size > n - pos ||
        (base > 0 ? (int64_t)at > INT64_MAX - base : (int64_t)at < INT64_MIN - base))
        Py_RETURN_NOTIMPLEMENTED;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_WRITABLE) < 0) {
        PyErr_Clear();
        Py_RETURN_NOTIMPLEMENTED;
    }
    if (at > view.len - size || at > view.len - BROKER_BLOCK_OFFSET - BROKER_BLOCK_SIZE) {
        PyBuffer_Release(&view);
        Py_RETURN_NOTIMPLEMENTED;
    }
    unsigned char *b = (unsigned char *)view.buf;
    memcpy(b + at, PyBytes_AS_STRING(data) + pos, (size_t)size);
    COPY_BEFORE_PATCH(); /* the copy lands before the block is patched (crash safety, see the appender) */
    unsigned char *p = b + at + BROKER_BLOCK_OFFSET;
    wr_u32(p, (uint32_t)queue_id);
    wr_u64(p + 4, (uint64_t)qoff);
    wr_u64(p + 12, (uint64_t)(base + at));
    wr_u64(p + 20, (uint64_t)store_ts);
    memcpy(p + 28, PyBytes_AS_STRING(host), 8);
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

SPEEDUPS_DOC(property_codes_doc,
             "property_codes(data, positions, sizes, props_ats, phys, prefix_crc) -> (tags_codes, index_entries)\n"
             "Dispatcher.codes for each record of a split batch: its TAGS crc32 (0 without), and (crc32(key,\n"
             "prefix_crc), phys[i]) per unique key and KEYS word. NotImplemented for arguments it does not handle.");

PyObject *property_codes(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
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

SPEEDUPS_DOC(property_codes_one_doc,
             "property_codes_one(data, pos, size, props_at, phys, prefix_crc) -> (tags_code, index_entries)\n"
             "property_codes of one record (no lists around its arguments and its tags code).\n"
             "NotImplemented for arguments it does not handle.");

PyObject *property_codes_one(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "property_codes_one takes 6 arguments");
        return NULL;
    }
    PyObject *data = args[0], *phys = args[4];
    Py_ssize_t pos, size, props_at;
    int64_t prefix_crc;
    if (!PyBytes_CheckExact(data) || !as_ssize(args[1], &pos) || !as_ssize(args[2], &size) ||
        !as_ssize(args[3], &props_at) || !as_i64(args[5], &prefix_crc) || prefix_crc < 0 ||
        prefix_crc > 0xFFFFFFFFLL)
        Py_RETURN_NOTIMPLEMENTED;
    Py_ssize_t n = PyBytes_GET_SIZE(data);
    if (pos < 0 || size < 0 || pos > n || size > n - pos || props_at < 0 || props_at > pos + size)
        Py_RETURN_NOTIMPLEMENTED;
    const unsigned char *d = (const unsigned char *)PyBytes_AS_STRING(data);
    PyObject *entries = PyList_New(0);
    if (entries == NULL) return NULL;
    uint32_t tags_code = 0;
    Py_ssize_t end = pos + size;
    if (props_at < end &&
        record_codes(d + props_at, end - props_at, (uint32_t)prefix_crc, phys, entries, &tags_code) < 0) {
        Py_DECREF(entries);
        return NULL;
    }
    return Py_BuildValue("(kN)", (unsigned long)tags_code, entries);
}

/* --- dispatch_scan (a slave's replicated records: their consume-queue runs and index entries) ---- */

/* One open run of consecutive queue offsets of one queue, its packed entries growing. */
typedef struct {
    PyObject *topic; /* strong */
    long qid;
    int64_t first, next;
    unsigned char *buf;
    Py_ssize_t len, cap;
} cq_run;

static int cq_run_add(cq_run *r, int64_t phys, int64_t size, uint32_t code) {
    if (r->len + CQ_ENTRY_SIZE > r->cap) {
        Py_ssize_t cap = r->cap ? 2 * r->cap : 16 * CQ_ENTRY_SIZE;
        unsigned char *b = PyMem_Realloc(r->buf, (size_t)cap);
        if (b == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        r->buf = b;
        r->cap = cap;
    }
    unsigned char *p = r->buf + r->len;
    wr_u64(p, (uint64_t)phys);
    wr_u32(p + 8, (uint32_t)size);
    wr_u64(p + 12, (uint64_t)code);
    r->len += CQ_ENTRY_SIZE;
    return 0;
}

/* Append run r to out as (topic, queue_id, first_queue_offset, entries) and empty it. */
static int cq_run_emit(cq_run *r, PyObject *out) {
    PyObject *t = Py_BuildValue("(OlLy#)", r->topic, r->qid, (long long)r->first, (const char *)r->buf, r->len);
    if (t == NULL) return -1;
    int rc = PyList_Append(out, t);
    Py_DECREF(t);
    r->len = 0;
    return rc;
}

SPEEDUPS_DOC(dispatch_scan_doc,
             "dispatch_scan(buf, delta, base, records, topics) -> (runs, index)\n"
             "Dispatcher.scan_stored_py: what stored records add to their consume queues and the index.\n"
             "records: stored_scan's tuples, positions counted from buf[delta] (physical offset base). topics\n"
             "maps a record's raw topic to (topic, prefix_crc). runs: (topic, queue_id, first_queue_offset,\n"
             "entries) per run of consecutive offsets of one queue; index: (store_ts, [(hash, phys), ...]) per\n"
             "run of records of one store time with keys. NotImplemented for a topic not in topics or with a\n"
             "prefix_crc < 0 (its own tags rule), or anything else it does not handle.");

PyObject *dispatch_scan(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "dispatch_scan takes 5 arguments");
        return NULL;
    }
    Py_ssize_t delta;
    int64_t base;
    PyObject *records = args[3], *topics = args[4];
    if (!as_ssize(args[1], &delta) || !as_i64(args[2], &base) || delta < 0 || base < 0 ||
        base > INT64_MAX / 2 || !PyList_CheckExact(records) || !PyDict_CheckExact(topics))
        Py_RETURN_NOTIMPLEMENTED;
    Py_buffer view;
    if (!get_bytes_buffer(args[0], &view)) Py_RETURN_NOTIMPLEMENTED;
    const unsigned char *d = (const unsigned char *)view.buf + (delta <= view.len ? delta : view.len);
    Py_ssize_t n = delta <= view.len ? view.len - delta : 0;
    /* records is copied (a tuple) before anything is allocated: an allocation may run a collection,
     * and a finalizer could change the list */
    PyObject *items = PyList_AsTuple(records);
    PyObject *runs_out = PyList_New(0), *index_out = PyList_New(0);
    PyObject *last_raw = NULL, *last_topic = NULL, *cur_list = NULL;
    int64_t last_crc = 0, cur_ts = 0;
    cq_run *runs = NULL;
    Py_ssize_t nruns = 0, runs_cap = 0;
    int unsupported = 0;
    if (items == NULL || runs_out == NULL || index_out == NULL) goto fail;
    Py_ssize_t count = PyTuple_GET_SIZE(items);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *t = PyTuple_GET_ITEM(items, i);
        Py_ssize_t pos, size, topic_at, props_at;
        long qid;
        int64_t qoff, store_ts;
        if (!PyTuple_CheckExact(t) || PyTuple_GET_SIZE(t) != 7 || !as_ssize(PyTuple_GET_ITEM(t, 0), &pos) ||
            !as_ssize(PyTuple_GET_ITEM(t, 1), &size) || !as_ssize(PyTuple_GET_ITEM(t, 2), &topic_at) ||
            !as_ssize(PyTuple_GET_ITEM(t, 3), &props_at) || !as_i64(PyTuple_GET_ITEM(t, 5), &qoff) ||
            !as_i64(PyTuple_GET_ITEM(t, 6), &store_ts) || !PyLong_CheckExact(PyTuple_GET_ITEM(t, 4))) {
            unsupported = 1;
            break;
        }
        qid = PyLong_AsLong(PyTuple_GET_ITEM(t, 4));
        if (qid == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            unsupported = 1;
            break;
        }
        if (pos < 0 || size < 0 || pos > n || size > n - pos || size > INT32_MAX || topic_at < pos ||
            props_at < topic_at + 2 || props_at > pos + size) {
            unsupported = 1;
            break;
        }
        /* the topic: the last record's, else looked up (no bytes object per record of one topic) */
        const unsigned char *raw = d + topic_at;
        Py_ssize_t raw_len = props_at - 2 - topic_at;
        if (last_raw == NULL || PyBytes_GET_SIZE(last_raw) != raw_len ||
            memcmp(PyBytes_AS_STRING(last_raw), raw, (size_t)raw_len) != 0) {
            PyObject *key = PyBytes_FromStringAndSize((const char *)raw, raw_len);
            if (key == NULL) goto fail;
            PyObject *known = PyDict_GetItemWithError(topics, key); /* borrowed */
            if (known == NULL) {
                Py_DECREF(key);
                if (PyErr_Occurred()) goto fail;
                unsupported = 1;
                break;
            }
            int64_t crc;
            if (!PyTuple_CheckExact(known) || PyTuple_GET_SIZE(known) != 2 ||
                !PyUnicode_CheckExact(PyTuple_GET_ITEM(known, 0)) || !as_i64(PyTuple_GET_ITEM(known, 1), &crc) ||
                crc < 0 || crc > 0xFFFFFFFFLL) {
                Py_DECREF(key);
                unsupported = 1;
                break;
            }
            Py_XSETREF(last_raw, key);
            Py_INCREF(PyTuple_GET_ITEM(known, 0));
            Py_XSETREF(last_topic, PyTuple_GET_ITEM(known, 0));
            last_crc = crc;
        }
        int64_t phys = base + pos;
        /* tags code and index entries: into the current store time's list, or a new one */
        PyObject *phys_obj = PyLong_FromLongLong((long long)phys);
        if (phys_obj == NULL) goto fail;
        PyObject *into = (cur_list != NULL && cur_ts == store_ts) ? cur_list : PyList_New(0);
        if (into == NULL) {
            Py_DECREF(phys_obj);
            goto fail;
        }
        uint32_t tags_code = 0;
        Py_ssize_t end = pos + size;
        int rc = props_at < end ? record_codes(d + props_at, end - props_at, (uint32_t)last_crc, phys_obj, into,
                                               &tags_code)
                                : 0;
        Py_DECREF(phys_obj);
        if (into != cur_list) {
            if (rc == 0 && PyList_GET_SIZE(into) > 0) {
                PyObject *group = Py_BuildValue("(LO)", (long long)store_ts, into);
                if (group == NULL || PyList_Append(index_out, group) < 0) {
                    Py_XDECREF(group);
                    Py_DECREF(into);
                    goto fail;
                }
                Py_DECREF(group);
                cur_list = into; /* borrowed from index_out from here on */
                cur_ts = store_ts;
            }
            Py_DECREF(into);
        }
        if (rc < 0) goto fail;
        /* the queue's open run: continued, or ended and a new one begun */
        cq_run *r = NULL;
        for (Py_ssize_t k = 0; k < nruns; k++) {
            if (runs[k].topic == last_topic && runs[k].qid == qid) {
                r = &runs[k];
                break;
            }
        }
        if (r != NULL && r->next != qoff) {
            if (cq_run_emit(r, runs_out) < 0) goto fail;
            r->first = qoff;
        } else if (r == NULL) {
            if (nruns == runs_cap) {
                Py_ssize_t cap = runs_cap ? 2 * runs_cap : 8;
                cq_run *grown = PyMem_Realloc(runs, (size_t)cap * sizeof(cq_run));
                if (grown == NULL) {
                    PyErr_NoMemory();
                    goto fail;
                }
                runs = grown;
                runs_cap = cap;
            }
            r = &runs[nruns++];
            memset(r, 0, sizeof(*r));
            Py_INCREF(last_topic);
            r->topic = last_topic;
            r->qid = qid;
            r->first = qoff;
        }
        if (cq_run_add(r, phys, size, tags_code) < 0) goto fail;
        r->next = qoff + 1;
    }
    if (unsupported) goto fail;
    for (Py_ssize_t k = 0; k < nruns; k++) {
        if (cq_run_emit(&runs[k], runs_out) < 0) goto fail;
    }
    PyObject *result = PyTuple_Pack(2, runs_out, index_out);
    if (result == NULL) goto fail;
    for (Py_ssize_t k = 0; k < nruns; k++) {
        Py_DECREF(runs[k].topic);
        PyMem_Free(runs[k].buf);
    }
    PyMem_Free(runs);
    Py_DECREF(runs_out);
    Py_DECREF(index_out);
    Py_XDECREF(last_raw);
    Py_XDECREF(last_topic);
    Py_DECREF(items);
    PyBuffer_Release(&view);
    return result;
fail:
    for (Py_ssize_t k = 0; k < nruns; k++) {
        Py_DECREF(runs[k].topic);
        PyMem_Free(runs[k].buf);
    }
    PyMem_Free(runs);
    Py_XDECREF(runs_out);
    Py_XDECREF(index_out);
    Py_XDECREF(last_raw);
    Py_XDECREF(last_topic);
    Py_XDECREF(items);
    PyBuffer_Release(&view);
    if (unsupported && !PyErr_Occurred()) Py_RETURN_NOTIMPLEMENTED;
    return NULL;
}

/* --- unpack_record / unpack_records ------------------------------------------------------------ */

/* The slice bounds of the record at pos (body_at, topic_at, props_at, end), its lengths checked;
 * -1 with decode_error set if it is not one. */
static int record_bounds(const unsigned char *d, Py_ssize_t n, Py_ssize_t pos, int64_t out[4]) {
    if (n - pos < MIN_RECORD_SIZE) {
        PyErr_Format(decode_error, "truncated record at %zd: %zd bytes left", pos, n - pos);
        return -1;
    }
    const unsigned char *r = d + pos;
    int64_t total = rd_i32(r);
    int64_t body_len = rd_i32(r + BODY_LEN_POS);
    int64_t end = (int64_t)pos + total;
    int64_t body_at = (int64_t)pos + BODY_POS;
    int64_t topic_at = body_at + body_len + 2;
    if (rd_u32(r + 4) != MAGIC || total < MIN_RECORD_SIZE || end > n || body_len < 0 || topic_at + 2 > end) {
        PyErr_Format(decode_error, "bad record at %zd", pos);
        return -1;
    }
    int64_t props_at = topic_at + rd_u16(d + topic_at - 2) + 2;
    if (props_at > end) {
        PyErr_Format(decode_error, "bad topic length at %zd", pos);
        return -1;
    }
    if (props_at + rd_u16(d + props_at - 2) != end) {
        PyErr_Format(decode_error, "record lengths do not add up at %zd", pos);
        return -1;
    }
    out[0] = body_at;
    out[1] = topic_at;
    out[2] = props_at;
    out[3] = end;
    return 0;
}

/* The record at pos as record.unpack_record's tuple; NULL with decode_error set if it is not one. */
static PyObject *unpack_at(const unsigned char *d, Py_ssize_t n, Py_ssize_t pos) {
    int64_t b[4];
    if (record_bounds(d, n, pos, b) < 0) return NULL;
    const unsigned char *r = d + pos;
    return Py_BuildValue("(LkiiLy#iLiLLLy#LLLL)", (long long)rd_i32(r), (unsigned long)rd_u32(r + 8),
                         (int)rd_i32(r + 12), (int)rd_i32(r + 16), (long long)rd_i64(r + 20), (const char *)r + 28,
                         (Py_ssize_t)8, (int)rd_i32(r + 36), (long long)rd_i64(r + 40), (int)rd_i32(r + 48),
                         (long long)rd_i64(r + 52), (long long)rd_i64(r + 60), (long long)rd_i64(r + 68),
                         (const char *)r + 76, (Py_ssize_t)8, (long long)b[0], (long long)b[1], (long long)b[2],
                         (long long)b[3]);
}

/* Take the pending decode_error (the record that ended a scan early) as an exception object. */
static PyObject *take_decode_error(void) {
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyErr_NormalizeException(&type, &value, &traceback);
    Py_XDECREF(type);
    Py_XDECREF(traceback);
    return value;
}

SPEEDUPS_DOC(unpack_record_doc,
             "unpack_record(buf, pos) -> tuple\n"
             "record.unpack_record; NotImplemented for a buffer type or position it does not handle.");

PyObject *unpack_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
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

SPEEDUPS_DOC(unpack_records_doc,
             "unpack_records(buf) -> (records, error)\n"
             "record.iter_records's records as a list, up to a blank marker or the end; error is the\n"
             "MessageDecodeError that ended it early, else None. NotImplemented for a buffer type it does not handle.");

PyObject *unpack_records(PyObject *self, PyObject *buf) {
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
            error = take_decode_error();
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

/* The columns of d[0:n]'s records (record_columns's tuple); NULL with an exception set on failure. */
static PyObject *columns_of(const unsigned char *d, Py_ssize_t n) {
    Py_ssize_t pos = 0, count = 0;
    PyObject *error = NULL, *cols[9] = {NULL};
    int64_t b[4];
    /* First pass: how many whole records (the columns are then allocated once). */
    while (n - pos >= BLANK_SIZE) {
        if (rd_u32(d + pos + 4) == BLANK_MAGIC) break;
        if (record_bounds(d, n, pos, b) < 0) {
            if (!PyErr_ExceptionMatches(decode_error)) return NULL;
            error = take_decode_error();
            break;
        }
        count++;
        pos = (Py_ssize_t)b[3];
    }
    /* sys_flags, born, reconsumes, queue ids, queue offsets, physical, stored, store hosts, bounds */
    const Py_ssize_t widths[9] = {4, 8, 4, 4, 8, 8, 8, 8, 0};
    for (int i = 0; i < 9; i++) cols[i] = PyBytes_FromStringAndSize(NULL, i < 8 ? count * widths[i] : (6 * count + 1) * 4);
    for (int i = 0; i < 9; i++) {
        if (cols[i] == NULL) {
            for (int j = 0; j < 9; j++) Py_XDECREF(cols[j]);
            Py_XDECREF(error);
            return NULL;
        }
    }
    int32_t *sys_flags = (int32_t *)PyBytes_AS_STRING(cols[0]), *reconsumes = (int32_t *)PyBytes_AS_STRING(cols[2]),
            *qids = (int32_t *)PyBytes_AS_STRING(cols[3]), *bounds = (int32_t *)PyBytes_AS_STRING(cols[8]);
    int64_t *born = (int64_t *)PyBytes_AS_STRING(cols[1]), *qoffs = (int64_t *)PyBytes_AS_STRING(cols[4]),
            *phys = (int64_t *)PyBytes_AS_STRING(cols[5]), *stored = (int64_t *)PyBytes_AS_STRING(cols[6]);
    char *hosts = PyBytes_AS_STRING(cols[7]);
    /* Second pass: fill them (the records were checked above). Six spans per record from its body on:
     * body, 2-byte gap, topic, 2-byte gap, properties, then the next record's
     * header up to its body (after the last record: empty). */
    pos = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        const unsigned char *r = d + pos;
        record_bounds(d, n, pos, b);
        sys_flags[i] = rd_i32(r + 16);
        born[i] = rd_i64(r + 20);
        reconsumes[i] = rd_i32(r + 36);
        qids[i] = rd_i32(r + 48);
        qoffs[i] = rd_i64(r + 52);
        phys[i] = rd_i64(r + 60);
        stored[i] = rd_i64(r + 68);
        memcpy(hosts + 8 * i, r + 76, 8);
        int32_t *s = bounds + 6 * i;
        s[0] = (int32_t)b[0];
        s[1] = (int32_t)(b[1] - 2);
        s[2] = (int32_t)b[1];
        s[3] = (int32_t)(b[2] - 2);
        s[4] = (int32_t)b[2];
        s[5] = (int32_t)b[3];
        pos = (Py_ssize_t)b[3];
    }
    bounds[6 * count] = (int32_t)pos;
    return Py_BuildValue("(nNNNNNNNNNN)", count, cols[0], cols[1], cols[2], cols[3], cols[4], cols[5], cols[6],
                        cols[7], cols[8], error ? error : Py_NewRef(Py_None));
}

SPEEDUPS_DOC(record_columns_doc,
             "record_columns(buf) -> (count, sys_flags, born, reconsumes, queue_ids, queue_offsets, physical,\n"
             "                        stored, store_hosts, bounds, error)\n"
             "record_columns.record_columns: iter_records's records as columns (bytes of native int32/int64, store hosts\n"
             "8 bytes each, bounds int32 [6 * count + 1]), up to a blank marker, the end or the first bad record\n"
             "(error: its MessageDecodeError, else None). NotImplemented for a buffer it does not handle or of 2 GiB+.");

PyObject *record_columns(PyObject *self, PyObject *buf) {
    Py_buffer view;
    if (decode_error == NULL || !get_bytes_buffer(buf, &view)) Py_RETURN_NOTIMPLEMENTED;
    if (view.len >= INT32_MAX) {  /* the bounds are int32 (Arrow's binary offsets) */
        PyBuffer_Release(&view);
        Py_RETURN_NOTIMPLEMENTED;
    }
    PyObject *out = columns_of(view.buf, view.len);
    PyBuffer_Release(&view);
    return out;
}

/* --- record_string_columns (issue 34: the Spark connector's string columns, split here) ---------- */

/* Whether s[0:n] is UTF-8 as str.decode takes it (strict: no overlong forms, surrogates or code
 * points past U+10FFFF); Arrow's string arrays must hold nothing else. */
static int utf8_ok(const unsigned char *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        uint64_t w;
        if (n - i >= 8 && (memcpy(&w, s + i, 8), (w & 0x8080808080808080ULL) == 0)) { /* 8 ASCII bytes */
            i += 8;
            continue;
        }
        unsigned char c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        Py_ssize_t len;
        unsigned char lo = 0x80, hi = 0xBF; /* the second byte's range */
        if (c >= 0xC2 && c <= 0xDF) {
            len = 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            if (c == 0xE0) lo = 0xA0;      /* overlong */
            else if (c == 0xED) hi = 0x9F; /* surrogates */
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            if (c == 0xF0) lo = 0x90;      /* overlong */
            else if (c == 0xF4) hi = 0x8F; /* past U+10FFFF */
        } else {
            return 0;
        }
        if (n - i < len || s[i + 1] < lo || s[i + 1] > hi) return 0;
        for (Py_ssize_t k = 2; k < len; k++)
            if ((s[i + k] & 0xC0) != 0x80) return 0;
        i += len;
    }
    return 1;
}

/* One Arrow string/binary column being written: int32 offsets, and the bytes they index, each in a
 * bytes object allocated at an upper bound and trimmed at the end. */
typedef struct {
    PyObject *offsets, *data;
    Py_ssize_t count, len;
} str_col;

static int str_col_init(str_col *c, Py_ssize_t max_count, Py_ssize_t max_len) {
    c->count = c->len = 0;
    c->offsets = PyBytes_FromStringAndSize(NULL, (max_count + 1) * 4);
    c->data = PyBytes_FromStringAndSize(NULL, max_len);
    if (c->offsets == NULL || c->data == NULL) return -1;
    ((int32_t *)PyBytes_AS_STRING(c->offsets))[0] = 0;
    return 0;
}

static inline void str_col_add(str_col *c, const unsigned char *s, Py_ssize_t len) {
    if (len) memcpy(PyBytes_AS_STRING(c->data) + c->len, s, (size_t)len);
    c->len += len;
    ((int32_t *)PyBytes_AS_STRING(c->offsets))[++c->count] = (int32_t)c->len;
}

static int str_col_trim(str_col *c) {
    if (_PyBytes_Resize(&c->offsets, (c->count + 1) * 4) < 0) return -1;
    return _PyBytes_Resize(&c->data, c->len);
}

static void str_col_free(str_col *c) {
    Py_CLEAR(c->offsets);
    Py_CLEAR(c->data);
}

static inline int span_is(const unsigned char *s, Py_ssize_t len, const char *word, Py_ssize_t wlen) {
    return len == wlen && memcmp(s, word, (size_t)wlen) == 0;
}

/* The columns, in the order of record_columns.StringColumns. */
enum { C_BODY, C_TOPIC, C_NAME, C_VALUE, C_TAG, C_ID, C_KEY, C_COLS };

/* One record's properties p[0:len] (UTF-8, checked) into the name/value/key columns; its tag and
 * unique key (the last of each, NULL if none) into *tag / *uniq with their lengths. As the row
 * decoder reads them: empty items skipped, an item without \x01 is a name with an empty value,
 * every KEYS item's space-separated words (empty ones skipped) are keys. */
static void split_properties(const unsigned char *p, Py_ssize_t len, str_col *c, const unsigned char **tag,
                             Py_ssize_t *tag_len, const unsigned char **uniq, Py_ssize_t *uniq_len) {
    *tag = *uniq = NULL;
    for (Py_ssize_t at = 0; at <= len;) {
        const unsigned char *sep = memchr(p + at, 0x02, (size_t)(len - at));
        Py_ssize_t end = sep ? sep - p : len;
        if (end > at) {
            const unsigned char *eq = memchr(p + at, 0x01, (size_t)(end - at));
            Py_ssize_t name_end = eq ? eq - p : end, value_at = eq ? name_end + 1 : end;
            const unsigned char *name = p + at, *value = p + value_at;
            Py_ssize_t nlen = name_end - at, vlen = end - value_at;
            str_col_add(&c[C_NAME], name, nlen);
            str_col_add(&c[C_VALUE], value, vlen);
            if (span_is(name, nlen, "TAGS", 4)) {
                *tag = value;
                *tag_len = vlen;
            } else if (span_is(name, nlen, "UNIQ_KEY", 8)) {
                *uniq = value;
                *uniq_len = vlen;
            } else if (span_is(name, nlen, "KEYS", 4)) {
                for (Py_ssize_t w = 0; w < vlen;) {
                    const unsigned char *sp = memchr(value + w, ' ', (size_t)(vlen - w));
                    Py_ssize_t wend = sp ? sp - value : vlen;
                    if (wend > w) str_col_add(&c[C_KEY], value + w, wend - w);
                    w = wend + 1;
                }
            }
        }
        at = end + 1;
    }
}

/* The broker-side message id (record.offset_msg_id): the record's store host and commitlog offset
 * (both as stored, big-endian) in 32 uppercase hex digits. */
static void add_offset_msg_id(str_col *c, const unsigned char *record) {
    static const char hex[] = "0123456789ABCDEF";
    unsigned char raw[16], text[32];
    memcpy(raw, record + 76, 8);
    memcpy(raw + 8, record + 60, 8);
    for (int k = 0; k < 16; k++) {
        text[2 * k] = (unsigned char)hex[raw[k] >> 4];
        text[2 * k + 1] = (unsigned char)hex[raw[k] & 15];
    }
    str_col_add(c, text, 32);
}

/* The string columns of count records of d whose spans are bounds (columns_of's, trusted); Py_None
 * if a topic or properties are not UTF-8, NULL with an exception set on failure. */
static PyObject *strings_of(const unsigned char *d, Py_ssize_t count, const int32_t *bounds) {
    Py_ssize_t body_bytes = 0, topic_bytes = 0, prop_bytes = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        const int32_t *s = bounds + 6 * i;
        body_bytes += s[1] - s[0];
        topic_bytes += s[3] - s[2];
        prop_bytes += s[5] - s[4];
    }
    /* Upper bounds: a non-empty item (or key) takes a byte and a separator, but the last one. */
    Py_ssize_t max_items = (prop_bytes + count) / 2 + 1;
    str_col c[C_COLS] = {{NULL}};
    PyObject *prop_offsets = PyBytes_FromStringAndSize(NULL, (count + 1) * 4);
    PyObject *key_lists = PyBytes_FromStringAndSize(NULL, (count + 1) * 4);
    PyObject *tag_valid = PyBytes_FromStringAndSize(NULL, (count + 7) / 8), *out = NULL;
    if (prop_offsets == NULL || key_lists == NULL || tag_valid == NULL || str_col_init(&c[C_BODY], count, body_bytes) ||
        str_col_init(&c[C_TOPIC], count, topic_bytes) || str_col_init(&c[C_NAME], max_items, prop_bytes) ||
        str_col_init(&c[C_VALUE], max_items, prop_bytes) || str_col_init(&c[C_TAG], count, prop_bytes) ||
        str_col_init(&c[C_ID], count, prop_bytes + 32 * count) || str_col_init(&c[C_KEY], max_items, prop_bytes))
        goto done;
    int32_t *props_at = (int32_t *)PyBytes_AS_STRING(prop_offsets), *keys_at = (int32_t *)PyBytes_AS_STRING(key_lists);
    unsigned char *valid = (unsigned char *)PyBytes_AS_STRING(tag_valid);
    memset(valid, 0, (size_t)((count + 7) / 8));
    props_at[0] = keys_at[0] = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        const int32_t *s = bounds + 6 * i;
        if (!utf8_ok(d + s[2], s[3] - s[2]) || !utf8_ok(d + s[4], s[5] - s[4])) {
            out = Py_NewRef(Py_None);
            goto done;
        }
        str_col_add(&c[C_BODY], d + s[0], s[1] - s[0]);
        str_col_add(&c[C_TOPIC], d + s[2], s[3] - s[2]);
        const unsigned char *tag, *uniq;
        Py_ssize_t tag_len = 0, uniq_len = 0;
        split_properties(d + s[4], s[5] - s[4], c, &tag, &tag_len, &uniq, &uniq_len);
        props_at[i + 1] = (int32_t)c[C_NAME].count;
        keys_at[i + 1] = (int32_t)c[C_KEY].count;
        if (tag != NULL) valid[i / 8] |= (unsigned char)(1u << (i % 8));
        str_col_add(&c[C_TAG], tag, tag != NULL ? tag_len : 0); /* a null slot is empty */
        if (uniq != NULL && uniq_len > 0) str_col_add(&c[C_ID], uniq, uniq_len);
        else add_offset_msg_id(&c[C_ID], d + s[0] - BODY_POS);
    }
    for (int k = 0; k < C_COLS; k++)
        if (str_col_trim(&c[k]) < 0) goto done;
    out = Py_BuildValue("(OOOOOOOOOOOOOOOOO)", c[C_BODY].offsets, c[C_BODY].data, c[C_TOPIC].offsets, c[C_TOPIC].data,
                        prop_offsets, c[C_NAME].offsets, c[C_NAME].data, c[C_VALUE].offsets, c[C_VALUE].data,
                        tag_valid, c[C_TAG].offsets, c[C_TAG].data, c[C_ID].offsets, c[C_ID].data, key_lists,
                        c[C_KEY].offsets, c[C_KEY].data);
done:
    for (int k = 0; k < C_COLS; k++) str_col_free(&c[k]);
    Py_XDECREF(prop_offsets);
    Py_XDECREF(key_lists);
    Py_XDECREF(tag_valid);
    return out;
}

SPEEDUPS_DOC(record_string_columns_doc,
             "record_string_columns(buf) -> (columns, strings)\n"
             "record_columns.record_string_columns: columns is record_columns(buf)'s tuple; strings the records'\n"
             "Arrow string columns (StringColumns' 17 bytes: int32 offsets and data each), or None if a topic or\n"
             "properties are not UTF-8. NotImplemented for a buffer it does not handle or of 1 GiB+.");

PyObject *record_string_columns(PyObject *self, PyObject *buf) {
    Py_buffer view;
    if (decode_error == NULL || !get_bytes_buffer(buf, &view)) Py_RETURN_NOTIMPLEMENTED;
    if (view.len >= (1 << 30)) { /* every string column's int32 offsets fit (ids add 32 bytes a record) */
        PyBuffer_Release(&view);
        Py_RETURN_NOTIMPLEMENTED;
    }
    PyObject *cols = columns_of(view.buf, view.len), *strings = NULL;
    if (cols != NULL) {
        Py_ssize_t count = PyLong_AsSsize_t(PyTuple_GET_ITEM(cols, 0));
        strings = strings_of(view.buf, count, (const int32_t *)PyBytes_AS_STRING(PyTuple_GET_ITEM(cols, 9)));
    }
    PyBuffer_Release(&view);
    if (strings == NULL) {
        Py_XDECREF(cols);
        return NULL;
    }
    return Py_BuildValue("(NN)", cols, strings);
}

SPEEDUPS_DOC(set_decode_error_doc, "set_decode_error(cls)\nThe exception class decode failures raise (record.py passes "
                                   "MessageDecodeError).");

PyObject *set_decode_error(PyObject *self, PyObject *cls) {
    if (!PyExceptionClass_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "an exception class is required");
        return NULL;
    }
    Py_XSETREF(decode_error, Py_NewRef(cls));
    Py_RETURN_NONE;
}

SPEEDUPS_DOC(stored_scan_doc,
             "stored_scan(buf, start, limit, base, check_crc, max_records) -> (records, pos, clean)\n"
             "record_batch.stored_scan_py: up to max_records verified stored records of buf[start:limit]\n"
             "(physical offset of buf[0] = base) as (pos, size, topic_at, props_at, queue_id, queue_offset,\n"
             "store_ts) tuples, where the scan stopped, and whether it stopped cleanly (a blank marker, the\n"
             "exact end or max_records). NotImplemented for a buffer type or bounds it does not handle.");

PyObject *stored_scan(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "stored_scan takes 6 arguments");
        return NULL;
    }
    Py_ssize_t start, limit, max_records;
    int64_t base;
    if (!as_ssize(args[1], &start) || !as_ssize(args[2], &limit) || !as_i64(args[3], &base) ||
        !as_ssize(args[5], &max_records) || start < 0 || max_records < 0 || base < 0 || base > INT64_MAX / 2)
        Py_RETURN_NOTIMPLEMENTED;
    int check_crc = PyObject_IsTrue(args[4]);
    if (check_crc < 0) return NULL;
    Py_buffer view;
    if (!get_bytes_buffer(args[0], &view)) Py_RETURN_NOTIMPLEMENTED;
    if (limit > view.len) {  /* (the Python scan would read past the buffer and raise) */
        PyBuffer_Release(&view);
        Py_RETURN_NOTIMPLEMENTED;
    }
    const unsigned char *d = view.buf;
    Py_ssize_t pos = start;
    int valid = 1;
    PyObject *records = PyList_New(0);
    if (records == NULL) goto fail;
    while (pos + BLANK_SIZE <= limit && PyList_GET_SIZE(records) < max_records) {
        const unsigned char *r = d + pos;
        if (pos + MIN_RECORD_SIZE > limit) {  /* too little room for a record: only a blank marker can be here */
            valid = rd_u32(r + 4) == BLANK_MAGIC;
            break;
        }
        uint32_t magic = rd_u32(r + 4);
        if (magic != MAGIC) {
            valid = magic == BLANK_MAGIC;
            break;
        }
        int64_t size = rd_i32(r), body_len = rd_i32(r + 84);
        int64_t end = pos + size, topic_at = pos + BODY_POS + body_len + 2;
        if (size < MIN_RECORD_SIZE || end > limit || body_len < 0 || topic_at + 2 > end) {
            valid = 0;
            break;
        }
        int64_t props_at = topic_at + rd_u16(d + topic_at - 2) + 2;
        if (props_at > end || props_at + rd_u16(d + props_at - 2) != end) {
            valid = 0;
            break;
        }
        int64_t store_ts = rd_i64(r + 68);
        if (rd_i64(r + 60) != base + pos || store_ts <= 0) {
            valid = 0;
            break;
        }
        if (check_crc && crc32_of(0, r + BODY_POS, (Py_ssize_t)body_len) != rd_u32(r + 8)) {
            valid = 0;
            break;
        }
        PyObject *t = Py_BuildValue("(nLLLiLL)", pos, (long long)size, (long long)topic_at, (long long)props_at,
                                    (int)rd_i32(r + 48), (long long)rd_i64(r + 52), (long long)store_ts);
        if (t == NULL) goto fail;
        int rc = PyList_Append(records, t);
        Py_DECREF(t);
        if (rc < 0) goto fail;
        pos = (Py_ssize_t)end;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(NnO)", records, pos, valid ? Py_True : Py_False);
fail:
    PyBuffer_Release(&view);
    Py_XDECREF(records);
    return NULL;
}
