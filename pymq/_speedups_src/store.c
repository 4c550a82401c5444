/* Store entries of pymq._speedups: the index file's entries and the consume queue's. */
#include "speedups.h"

/* --- index_put (the store's index file; its layout is pymq/broker/store/index.py's) ------------ */

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

SPEEDUPS_DOC(index_put_doc,
             "index_put(buf, entries_base, slots_base, slots, count, entries, tdiff) -> new count\n"
             "IndexFile.put_many's loop: entry n = count, count + 1 ... for each (hash, phys) of entries, chained\n"
             "to its slot's previous entry, written before the slot points at it. Checks every argument first and\n"
             "returns NotImplemented (nothing written) for anything it does not handle.");

PyObject *index_put(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
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

SPEEDUPS_DOC(cq_entries_doc,
             "cq_entries(phys, sizes, tags_codes) -> bytes\n"
             "The consume-queue entries (commitlog offset, size, tags code) of a batch, packed back to back.\n"
             "NotImplemented for anything it does not handle (not three lists of one length, an item not an int\n"
             "that fits its field).");

PyObject *cq_entries(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
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

