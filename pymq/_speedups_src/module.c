/* pymq._speedups's module: the method table, the Syncer type (sync.c), LAYOUT / INDEX_LAYOUT / CQ_LAYOUT and the build's
 * HAVE_CLMUL / HAVE_ZLIB. */
#include "speedups.h"

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
    {"store_record", (PyCFunction)(void (*)(void))store_record, METH_FASTCALL, store_record_doc},
    {"property_codes_one", (PyCFunction)(void (*)(void))property_codes_one, METH_FASTCALL, property_codes_one_doc},
    {"unpack_record", (PyCFunction)(void (*)(void))unpack_record, METH_FASTCALL, unpack_record_doc},
    {"unpack_records", unpack_records, METH_O, unpack_records_doc},
    {"record_columns", record_columns, METH_O, record_columns_doc},
    {"stored_scan", (PyCFunction)(void (*)(void))stored_scan, METH_FASTCALL, stored_scan_doc},
    {"dispatch_scan", (PyCFunction)(void (*)(void))dispatch_scan, METH_FASTCALL, dispatch_scan_doc},
    {"record_string_columns", record_string_columns, METH_O, record_string_columns_doc},
    {"crc32", crc32_py, METH_VARARGS, crc32_doc},
    {"crc32_table", crc32_table_py, METH_VARARGS, crc32_table_doc},
    {"set_decode_error", set_decode_error, METH_O, set_decode_error_doc},
    {"stored_to_message_decoder", stored_to_message_decoder, METH_O, stored_to_message_decoder_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "pymq._speedups", "Optional C versions of pymq.protocol's per-record loops.", -1, methods,
};

PyMODINIT_FUNC PyInit__speedups(void) {
    crc_init();
    if (encode_init() < 0) return NULL;
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
    if (sync_init(m) < 0) {
        Py_XDECREF(layout);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "HAVE_CLMUL", crc_uses_clmul()) < 0) {
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
