/* RocketMQ 4.x's MessageDecoder layout from pymq's stored records (issue 30): what a 4.x client's PULL reads.
 * The twin of pymq.remoting.message_layout.from_stored_records, byte for byte. */
#include "speedups.h"

/* MessageDecoder's magic code (MESSAGE_MAGIC_CODE, -626843481) and its fixed part up to the body:
 * size, magic, crc, queue id, flag, queue offset, commit-log offset, sysFlag, born ts, born host (8),
 * store ts, store host (8), reconsume times, prepared tx offset, body length. */
#define MD_MAGIC 0xDAA320A7u
#define MD_HEAD 88
/* RocketMQ's topic length is one byte, its limit 127. */
#define MD_MAX_TOPIC 127

/* One stored record at pos: its body, topic and properties bounds; 0 if it is not a well-formed record
 * (bounds as record.unpack_record checks them) or its topic does not fit MessageDecoder's byte. */
static int stored_at(const unsigned char *d, Py_ssize_t n, Py_ssize_t pos, int64_t *body_len, int64_t *topic_at,
                     int64_t *props_at, int64_t *end) {
    if (n - pos < MIN_RECORD_SIZE) return 0;
    const unsigned char *r = d + pos;
    int64_t total = rd_i32(r);
    int64_t blen = rd_i32(r + BODY_LEN_POS);
    int64_t e = (int64_t)pos + total;
    int64_t t_at = (int64_t)pos + BODY_POS + blen + 2;
    if (rd_u32(r + 4) != MAGIC || total < MIN_RECORD_SIZE || e > n || blen < 0 || t_at + 2 > e) return 0;
    int64_t topic_len = rd_u16(d + t_at - 2);
    int64_t p_at = t_at + topic_len + 2;
    if (p_at > e || p_at + rd_u16(d + p_at - 2) != e || topic_len > MD_MAX_TOPIC) return 0;
    *body_len = blen;
    *topic_at = t_at;
    *props_at = p_at;
    *end = e;
    return 1;
}

SPEEDUPS_DOC(stored_to_message_decoder_doc,
             "stored_to_message_decoder(buf) -> bytes\n"
             "message_layout.from_stored_records: stored records (up to a blank marker or the end) in RocketMQ's\n"
             "MessageDecoder layout. NotImplemented for a buffer type it does not handle, a record that is not one\n"
             "or a topic longer than 127 bytes (the Python body then raises what it raises).");

PyObject *stored_to_message_decoder(PyObject *self, PyObject *buf) {
    Py_buffer view;
    if (!get_bytes_buffer(buf, &view)) Py_RETURN_NOTIMPLEMENTED;
    const unsigned char *d = view.buf;
    Py_ssize_t n = view.len, pos = 0;
    int64_t out_len = 0, body_len, topic_at, props_at, end;
    /* pass 1: check every record and size the answer */
    while (n - pos >= BLANK_SIZE && rd_u32(d + pos + 4) != BLANK_MAGIC) {
        if (!stored_at(d, n, pos, &body_len, &topic_at, &props_at, &end)) {
            PyBuffer_Release(&view);
            Py_RETURN_NOTIMPLEMENTED;
        }
        out_len += MD_HEAD + body_len + 1 + (props_at - 2 - topic_at) + 2 + (end - props_at);
        pos = (Py_ssize_t)end;
    }
    if (out_len > PY_SSIZE_T_MAX) {
        PyBuffer_Release(&view);
        Py_RETURN_NOTIMPLEMENTED;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)out_len);
    if (out == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    unsigned char *w = (unsigned char *)PyBytes_AS_STRING(out);
    /* pass 2: write them (the records were all checked above) */
    pos = 0;
    while (n - pos >= BLANK_SIZE && rd_u32(d + pos + 4) != BLANK_MAGIC) {
        stored_at(d, n, pos, &body_len, &topic_at, &props_at, &end);
        const unsigned char *r = d + pos;
        int64_t topic_len = props_at - 2 - topic_at;
        int64_t props_len = end - props_at;
        int64_t size = MD_HEAD + body_len + 1 + topic_len + 2 + props_len;
        wr_u32(w, (uint32_t)size);
        wr_u32(w + 4, MD_MAGIC);
        wr_u32(w + 8, rd_u32(r + 8) & 0x7FFFFFFFu); /* UtilAll.crc32's 31 bits */
        memcpy(w + 12, r + 48, 4);                   /* queue id */
        memcpy(w + 16, r + 12, 4);                   /* flag */
        memcpy(w + 20, r + 52, 16);                  /* queue offset, commit-log offset */
        memcpy(w + 36, r + 16, 4);                   /* sysFlag */
        memcpy(w + 40, r + 20, 16);                  /* born timestamp, born host */
        memcpy(w + 56, r + 68, 16);                  /* store timestamp, store host */
        memcpy(w + 72, r + 36, 12);                  /* reconsume times, prepared tx offset */
        memcpy(w + 84, r + BODY_LEN_POS, 4);         /* body length */
        w += MD_HEAD;
        memcpy(w, r + BODY_POS, (size_t)body_len);
        w += body_len;
        *w++ = (unsigned char)topic_len;
        memcpy(w, d + topic_at, (size_t)topic_len + 2); /* the topic, then the properties length (< 32768) */
        w += topic_len + 2;
        memcpy(w, d + props_at, (size_t)props_len);
        w += props_len;
        pos = (Py_ssize_t)end;
    }
    PyBuffer_Release(&view);
    return out;
}
