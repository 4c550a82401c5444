/* The CRC (zlib's crc32) of pymq._speedups: zlib's own or a slice-by-8 table, with PCLMULQDQ folding
 * in front of either on x86-64 CPUs that have it. */
#include "speedups.h"

/* --- zlib's crc32 ------------------------------------------------------------------------------ */
/* zlib's own when setup.py found it (HAVE_ZLIB: faster than the table loop below), else slice-by-8. */

#ifdef HAVE_ZLIB
#include <zlib.h>
#endif

/* Filled by crc_init (at import). */
static uint32_t crc_table[8][256];

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

uint32_t crc32_of(uint32_t crc, const unsigned char *p, Py_ssize_t n) {
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

/* --- at import, and the Python-facing crc32 / crc32_table ------------------------------------- */

void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int k = 1; k < 8; k++)
            crc_table[k][i] = (crc_table[k - 1][i] >> 8) ^ crc_table[0][crc_table[k - 1][i] & 0xFF];
#ifdef HAVE_CLMUL_CODE
    __builtin_cpu_init();
    use_clmul = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
#endif
}

int crc_uses_clmul(void) {
#ifdef HAVE_CLMUL_CODE
    return use_clmul;
#else
    return 0;
#endif
}

SPEEDUPS_DOC(crc32_doc, "crc32(data, value=0) -> int\nThe CRC split_batch checks bodies with (zlib's if it was found at build).");

PyObject *crc32_py(PyObject *self, PyObject *args) {
    Py_buffer view;
    unsigned int value = 0;
    if (!PyArg_ParseTuple(args, "y*|I", &view, &value)) return NULL;
    uint32_t crc = crc32_of(value, view.buf, view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}

SPEEDUPS_DOC(crc32_table_doc, "crc32_table(data, value=0) -> int\nThe CRC without zlib (tested against zlib.crc32).");

PyObject *crc32_table_py(PyObject *self, PyObject *args) {
    Py_buffer view;
    unsigned int value = 0;
    if (!PyArg_ParseTuple(args, "y*|I", &view, &value)) return NULL;
    uint32_t crc = crc32_table_of(value, view.buf, view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}
