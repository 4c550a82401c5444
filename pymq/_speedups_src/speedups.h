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
 * The layout constants below are pymq.protocol.record's; LAYOUT exports them and
 * pymq/protocol/accelerator.py refuses to load a module whose LAYOUT differs from record.py's
 * speedups_layout() (a stale or drifted build).
 *
 * The sources (one extension module, pymq._speedups, built from all of them by setup.py):
 *   speedups.h  this header: the layouts, big-endian reads and writes, int conversions, and what the
 *               files share (the method functions and their docstrings, named in module.c's table)
 *   crc.c       the CRC: zlib's or a slice-by-8 table, PCLMULQDQ folding; crc32 / crc32_table
 *   records.c   record scanning: split_batch, any_property_contains, patch_broker_blocks,
 *               store_record (one record), property_codes(_one), dispatch_scan (a slave's consume-queue
 *               and index entries), unpack_record(s), record_columns,
 *               record_string_columns (the Spark connector's columns), set_decode_error,
 *               stored_scan (verifying stored records: recovery, replication)
 *   store.c     store entries: index_put (the index file), cq_entries (the consume queue)
 *   encode.c    encoding: encode_record, encode_batch, set_message_class
 *   remoting.c  stored_to_message_decoder: stored records in RocketMQ 4.x's MessageDecoder layout (issue 30)
 *   sync.c      the Syncer type: msync jobs on a thread without the GIL, done jobs on an eventfd (SYNC_FLUSH)
 *   module.c    the method table, the module and its init (LAYOUT, INDEX_LAYOUT, CQ_LAYOUT, HAVE_*)
 */
#ifndef PYMQ_SPEEDUPS_H
#define PYMQ_SPEEDUPS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Bumped (here and as ABI_VERSION in pymq/protocol/accelerator.py) when a function is added or changes its contract. */
#define ABI_VERSION 10

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

/* The store's index file (pymq/broker/store/index.py's layout; INDEX_LAYOUT exports it). */
#define INDEX_ENTRY_FORMAT "<Iqii"
#define INDEX_ENTRY_SIZE 20
#define INDEX_SLOT_FORMAT "<i"

/* The store's consume-queue entries (pymq/broker/store/consume_queue.py's layout; CQ_LAYOUT exports it). */
#define CQ_ENTRY_FORMAT ">qiq"
#define CQ_ENTRY_SIZE 20

/* The files' shared functions and data stay inside the .so: only PyInit__speedups is exported. */
#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility push(hidden)
#endif

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

/* --- int arguments ------------------------------------------------------------------------------ */

/* An exact int that fits a Py_ssize_t; 0 (no error set) otherwise. */
static inline int as_ssize(PyObject *obj, Py_ssize_t *out) {
    if (!PyLong_CheckExact(obj)) return 0;
    Py_ssize_t v = PyLong_AsSsize_t(obj);
    if (v == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    *out = v;
    return 1;
}

static inline int as_i64(PyObject *obj, int64_t *out) {
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


/* --- buffers ------------------------------------------------------------------------------------ */

/* A read-only byte buffer of bytes, bytearray, a byte memoryview or an mmap; 0 (no error set)
 * for anything else, whose len() might not be its byte count. */
static inline int get_bytes_buffer(PyObject *obj, Py_buffer *view) {
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

/* --- what the files share ---------------------------------------------------------------------- */

/* A docstring defined next to its function and named in module.c's method table. */
#define SPEEDUPS_DOC(name, text) const char name[] = PyDoc_STR(text)

/* crc.c */
void crc_init(void); /* at import: the table, and whether the CPU can fold with PCLMULQDQ */
int crc_uses_clmul(void);
uint32_t crc32_of(uint32_t crc, const unsigned char *p, Py_ssize_t n); /* zlib's crc32 */
PyObject *crc32_py(PyObject *self, PyObject *args);
PyObject *crc32_table_py(PyObject *self, PyObject *args);
extern const char crc32_doc[], crc32_table_doc[];

/* records.c */
PyObject *split_batch(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *any_property_contains(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *patch_broker_blocks(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *property_codes(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *store_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *property_codes_one(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *unpack_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *unpack_records(PyObject *self, PyObject *buf);
PyObject *record_columns(PyObject *self, PyObject *buf);
PyObject *stored_scan(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *dispatch_scan(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *record_string_columns(PyObject *self, PyObject *buf);
PyObject *set_decode_error(PyObject *self, PyObject *cls);
extern const char split_batch_doc[], any_property_contains_doc[], patch_broker_blocks_doc[], property_codes_doc[],
    unpack_record_doc[], unpack_records_doc[], record_columns_doc[], record_string_columns_doc[],
    set_decode_error_doc[], store_record_doc[], property_codes_one_doc[], stored_scan_doc[],
    dispatch_scan_doc[];

/* store.c */
PyObject *index_put(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *cq_entries(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
extern const char index_put_doc[], cq_entries_doc[];

/* encode.c */
int encode_init(void); /* at import: the interned attribute names; -1 with an error set */
PyObject *encode_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *encode_batch(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *set_message_class(PyObject *self, PyObject *cls);
extern const char encode_record_doc[], encode_batch_doc[], set_message_class_doc[];

/* remoting.c */
PyObject *stored_to_message_decoder(PyObject *self, PyObject *buf);
extern const char stored_to_message_decoder_doc[];

/* sync.c */
int sync_init(PyObject *m); /* at import: adds the Syncer type (Linux only); -1 with an error set */

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility pop
#endif

#endif /* PYMQ_SPEEDUPS_H */
