/* Encoding of pymq._speedups: the producer's record and its batch of plain messages. */
#include "speedups.h"
#include <structmember.h>

/* --- encode_record ----------------------------------------------------------------------------- */

SPEEDUPS_DOC(encode_record_doc,
             "encode_record(topic, body, properties, flag, sys_flag, born_timestamp, born_host, reconsume_times,\n"
             "              prepared_tx_offset, queue_id, queue_offset, physical_offset, store_timestamp, store_host)\n"
             "record.encode_record with every argument positional; NotImplemented for anything it does not handle\n"
             "(non-bytes, ints out of their field's range, hosts not of 8 bytes, lengths the Python code refuses).");

PyObject *encode_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
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

int encode_init(void) {
    if (!(s_topic = PyUnicode_InternFromString("topic")) || !(s_body = PyUnicode_InternFromString("body")) ||
        !(s_tags = PyUnicode_InternFromString("tags")) || !(s_keys = PyUnicode_InternFromString("keys")) ||
        !(s_properties = PyUnicode_InternFromString("properties")) ||
        !(s_flag = PyUnicode_InternFromString("flag")) || !(s_delay_level = PyUnicode_InternFromString("delay_level")))
        return -1;
    return 0;
}

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

SPEEDUPS_DOC(set_message_class_doc,
             "set_message_class(cls) -> bool\n"
             "encode_batch reads the fields of exact instances of cls from their slots; True if cls has an object slot\n"
             "(a member descriptor) for each field encode_batch reads, else False (getattr is used).");

PyObject *set_message_class(PyObject *self, PyObject *cls) {
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

SPEEDUPS_DOC(encode_batch_doc,
             "encode_batch(messages, topic, topic_bytes, born_timestamp, born_host, max_size, compress_threshold,\n"
             "             id_head, counter) -> (records, ids)\n"
             "batch_encode.encode_batch: the records of plain messages (no keys, no properties, no delay, bodies\n"
             "not above compress_threshold) concatenated, each with a UNIQ_KEY of id_head + next(counter) & 0xFFFF\n"
             "in 4 hex digits. Everything is checked before the counter is touched; NotImplemented (nothing\n"
             "consumed) for anything it does not handle.");

PyObject *encode_batch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
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

