/*
 * data.c - IDX, .npy and CSV loaders (see data.h for the contract).
 *
 * Design.  Each format has a parser over a byte buffer (nnc_parse_*), and
 * the file loaders only gather bytes and call it, so the fuzzers exercise
 * exactly the code that reads real files.  The parsers follow one rule:
 * work out how many bytes the header implies, with every multiplication
 * overflow-checked, and compare that with what is present *before*
 * allocating anything.  Files are read through zlib (gzdopen/gzread), which
 * passes plain files through untouched; reading grows its buffer
 * geometrically up to what the header claims, so a lying header in a small
 * file costs at most twice the file's real size.  A gzip file may not
 * inflate past 4 GiB (a zip bomb is refused rather than swapped to death).
 *
 * Errors are one line, "name: where: expected X, got Y", written into the
 * caller's buffer; *out stays empty on every failure path.
 */
#define _POSIX_C_SOURCE 200809L /* open, fstat under -std=c11 */

#include "data.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define DATA_GZ_LIMIT ((size_t)4 << 30) /* most bytes a .gz may inflate to */
#define DATA_READ_CHUNK ((size_t)1 << 20)
#define DATA_CELL_MAX 63 /* longest CSV cell we parse as a number */

/* ---- errors and small helpers ------------------------------------------- */

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static void data_err(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    if (!err || errlen == 0)
        return;
    va_start(ap, fmt);
    /* A truncated message is still the best we can do; nothing to check. */
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static const char *data_name(const char *name)
{
    return name ? name : "<memory>";
}

static const struct {
    const char *name; /* as printed in messages */
    size_t size;      /* bytes per element */
} dtype_info[] = {
    [NNC_DT_U8] = { "u8", 1 },  [NNC_DT_I8] = { "i8", 1 },   [NNC_DT_I16] = { "i16", 2 },
    [NNC_DT_I32] = { "i32", 4 }, [NNC_DT_I64] = { "i64", 8 }, [NNC_DT_F32] = { "f32", 4 },
    [NNC_DT_F64] = { "f64", 8 },
};
_Static_assert(sizeof dtype_info / sizeof dtype_info[0] == NNC_DT_COUNT,
               "dtype_info must cover nnc_dtype");

static int dtype_valid(nnc_dtype t)
{
    return (int)t >= 0 && (int)t < NNC_DT_COUNT;
}

size_t nnc_dtype_size(nnc_dtype t)
{
    return dtype_valid(t) ? dtype_info[t].size : 0;
}

const char *nnc_dtype_name(nnc_dtype t)
{
    return dtype_valid(t) ? dtype_info[t].name : "?";
}

/* Product of dims into *n; -1 if a dim is negative or the product overflows. */
static int dims_numel(const int64_t *dims, int rank, int64_t *n)
{
    int64_t p = 1;
    int i;
    for (i = 0; i < rank; i++) {
        if (dims[i] < 0)
            return -1;
        if (dims[i] != 0 && p > INT64_MAX / dims[i])
            return -1;
        p *= dims[i];
    }
    *n = p;
    return 0;
}

/* Bytes that rank/dims of `esize`-byte elements occupy; -1 on any overflow. */
static int dims_bytes(const int64_t *dims, int rank, size_t esize, size_t *bytes)
{
    int64_t n;
    if (dims_numel(dims, rank, &n) != 0 || (uint64_t)n > SIZE_MAX / esize)
        return -1;
    *bytes = (size_t)n * esize;
    return 0;
}

int64_t nnc_array_numel(const nnc_array *a)
{
    int64_t n;
    if (!a || a->rank < 0 || a->rank > NNC_MAX_RANK || dims_numel(a->dims, a->rank, &n) != 0)
        return -1;
    return n;
}

/* "[60000, 28, 28]" into buf (for messages). */
static const char *dims_str(const int64_t *dims, int rank, char *buf, size_t n)
{
    size_t used = 0;
    int i;
    buf[0] = '\0';
    for (i = 0; i < rank && used < n; i++) {
        int k = snprintf(buf + used, n - used, "%s%lld", i ? ", " : "[", (long long)dims[i]);
        if (k < 0)
            break;
        used += (size_t)k;
    }
    if (used < n)
        snprintf(buf + used, n - used, "%s", rank ? "]" : "[]");
    return buf;
}

void nnc_array_free(nnc_array *a)
{
    if (!a)
        return;
    free(a->data);
    memset(a, 0, sizeof *a);
}

static void array_clear(nnc_array *a)
{
    memset(a, 0, sizeof *a);
}

/* Allocates out->data for `bytes` (at least 1, so data is never NULL). */
static int array_alloc(nnc_array *out, nnc_dtype t, int rank, const int64_t *dims, size_t bytes,
                       const char *name, char *err, size_t errlen)
{
    array_clear(out);
    out->data = malloc(bytes ? bytes : 1);
    if (!out->data) {
        data_err(err, errlen, "%s: out of memory allocating %zu bytes", data_name(name), bytes);
        return -1;
    }
    out->dtype = t;
    out->rank = rank;
    if (rank > 0)
        memcpy(out->dims, dims, (size_t)rank * sizeof dims[0]);
    return 0;
}

static int host_is_big_endian(void)
{
    const uint16_t one = 1;
    return *(const uint8_t *)&one == 0;
}

/* Copies n elements of esize bytes stored in the given byte order into
 * host order. */
static void elems_copy(void *dst, const uint8_t *src, size_t n, size_t esize, int src_big)
{
    uint8_t *d = dst;
    size_t i, b;
    if (esize == 1 || src_big == host_is_big_endian()) {
        if (n)
            memcpy(dst, src, n * esize);
        return;
    }
    for (i = 0; i < n; i++)
        for (b = 0; b < esize; b++)
            d[i * esize + b] = src[i * esize + esize - 1 - b];
}

/* Training data must be finite: one NaN pixel would otherwise flow silently into
 * the weights (a ReLU can hide it from the loss).  Refuses the first NaN or Inf of a
 * float array, naming the sample (index along the first dimension), the element
 * within it and the byte offset in the file, where the data starts at `data_off`. */
static int array_finite_check(const nnc_array *a, const char *name, size_t data_off, char *err,
                              size_t errlen)
{
    int64_t n = nnc_array_numel(a), row, i;
    size_t esize = nnc_dtype_size(a->dtype);
    if (a->dtype != NNC_DT_F32 && a->dtype != NNC_DT_F64)
        return 0;
    row = a->rank > 0 && a->dims[0] > 0 ? n / a->dims[0] : 1;
    for (i = 0; i < n; i++) {
        double v = a->dtype == NNC_DT_F32 ? (double)((const float *)a->data)[i]
                                          : ((const double *)a->data)[i];
        if (isfinite(v))
            continue;
        data_err(err, errlen, "%s: offset %zu: sample %lld, element %lld is %s; training data "
                 "must be finite", name, data_off + (size_t)i * esize, (long long)(i / row),
                 (long long)(i % row), isnan(v) ? "NaN" : v > 0 ? "+Inf" : "-Inf");
        return -1;
    }
    return 0;
}

/* ---- reading files -------------------------------------------------------- */

typedef struct {
    gzFile gz;
    const char *path;
    int direct; /* 1 if the file is not gzip-compressed */
} data_file;

static int file_open(data_file *f, const char *path, char *err, size_t errlen)
{
    struct stat st;
    int e, fd = open(path, O_RDONLY);
    if (fd < 0) {
        data_err(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    /* a directory opens fine but would fail later with a vaguer message */
    e = fstat(fd, &st) != 0 ? errno : S_ISDIR(st.st_mode) ? EISDIR : 0;
    if (e != 0) {
        data_err(err, errlen, "%s: cannot open: %s", path, strerror(e));
        close(fd);
        return -1;
    }
    f->path = path;
    f->gz = gzdopen(fd, "rb");
    if (!f->gz) {
        data_err(err, errlen, "%s: cannot open: out of memory", path);
        close(fd);
        return -1;
    }
    f->direct = gzdirect(f->gz);
    return 0;
}

/* Grows *buf so that it can hold more than *len bytes, never past `want`. */
static int buf_grow(uint8_t **buf, size_t *cap, size_t want)
{
    size_t ncap = *cap < DATA_READ_CHUNK ? DATA_READ_CHUNK : *cap;
    uint8_t *nb;
    if (*cap >= DATA_READ_CHUNK)
        ncap = *cap > SIZE_MAX / 2 ? SIZE_MAX : *cap * 2;
    if (ncap > want)
        ncap = want;
    nb = realloc(*buf, ncap);
    if (!nb)
        return -1;
    *buf = nb;
    *cap = ncap;
    return 0;
}

/* Reports zlib's error state; zerr/msg come from gzerror(). */
static int file_read_failed(data_file *f, int zerr, const char *msg, char *err, size_t errlen)
{
    const char *colon = msg ? strstr(msg, ": ") : NULL;
    if (msg && msg[0] == '<' && colon) /* drop zlib's "<fd:3>: " prefix */
        msg = colon + 2;
    if (zerr == Z_BUF_ERROR)
        msg = "gzip data ends early (truncated .gz file?)";
    data_err(err, errlen, "%s: cannot read: %s", f->path,
             zerr == Z_ERRNO ? strerror(errno) : msg ? msg : "zlib error");
    return -1;
}

/* gzread's end of file may hide an error (a cut deflate stream). */
static int file_check_error(data_file *f, char *err, size_t errlen)
{
    int zerr = Z_OK;
    const char *msg = gzerror(f->gz, &zerr);
    return zerr == Z_OK ? 0 : file_read_failed(f, zerr, msg, err, errlen);
}

/* Closes f; reports a failure only if nothing went wrong before (rc == 0). */
static int file_close(data_file *f, int rc, char *err, size_t errlen)
{
    int zrc;
    if (rc == 0)
        rc = file_check_error(f, err, errlen);
    zrc = gzclose(f->gz);
    if (rc == 0 && zrc != Z_OK) {
        data_err(err, errlen, "%s: cannot read: %s", f->path,
                 zrc == Z_BUF_ERROR ? "gzip data ends early (truncated .gz file?)"
                                    : "error closing file");
        return -1;
    }
    return rc;
}

/* Appends to *buf until it holds `want` bytes or the file ends. */
static int file_read_upto(data_file *f, uint8_t **buf, size_t *len, size_t *cap, size_t want,
                          char *err, size_t errlen)
{
    while (*len < want) {
        size_t chunk;
        int got;
        if (*len == *cap && buf_grow(buf, cap, want) != 0) {
            data_err(err, errlen, "%s: out of memory reading file", f->path);
            return -1;
        }
        chunk = *cap - *len;
        if (chunk > DATA_READ_CHUNK * 64) /* gzread takes an unsigned and returns int */
            chunk = DATA_READ_CHUNK * 64;
        got = gzread(f->gz, *buf + *len, (unsigned)chunk);
        if (got < 0 && file_check_error(f, err, errlen) == 0)
            data_err(err, errlen, "%s: cannot read", f->path); /* no zlib detail */
        if (got < 0)
            return -1;
        if (got == 0) /* end of file, or a cut deflate stream */
            return file_check_error(f, err, errlen);
        *len += (size_t)got;
    }
    return 0;
}

/* Reads the whole file; a .gz may not inflate past DATA_GZ_LIMIT. */
static int file_read_all(const char *path, uint8_t **buf, size_t *len, char *err, size_t errlen)
{
    data_file f;
    size_t cap = 0;
    int rc;
    *buf = NULL;
    *len = 0;
    if (file_open(&f, path, err, errlen) != 0)
        return -1;
    rc = file_read_upto(&f, buf, len, &cap, f.direct ? SIZE_MAX : DATA_GZ_LIMIT + 1, err, errlen);
    if (rc == 0 && !f.direct && *len > DATA_GZ_LIMIT) {
        data_err(err, errlen, "%s: gzip data inflates to more than 4 GiB; refusing", path);
        rc = -1;
    }
    rc = file_close(&f, rc, err, errlen);
    if (rc != 0) {
        free(*buf);
        *buf = NULL;
    }
    return rc;
}

/* ---- IDX ------------------------------------------------------------------ */
/* magic: 0x00 0x00 <type> <ndims>, then ndims big-endian uint32 dims, then
 * the elements, big-endian.  http://yann.lecun.com/exdb/mnist/ */

typedef struct {
    nnc_dtype dtype;
    int rank;
    int64_t dims[NNC_MAX_RANK];
    size_t hdr_bytes;  /* 4 + 4 * rank */
    size_t data_bytes; /* numel * element size, overflow-checked */
} idx_header;

static int idx_dtype(uint8_t code, nnc_dtype *t)
{
    switch (code) {
    case 0x08: *t = NNC_DT_U8; return 0;
    case 0x09: *t = NNC_DT_I8; return 0;
    case 0x0B: *t = NNC_DT_I16; return 0;
    case 0x0C: *t = NNC_DT_I32; return 0;
    case 0x0D: *t = NNC_DT_F32; return 0;
    case 0x0E: *t = NNC_DT_F64; return 0;
    default: return -1;
    }
}

/* Checks the fixed 4-byte prefix: magic, type code, rank. */
static int idx_prefix_parse(const uint8_t *b, size_t len, const char *name, idx_header *h,
                            char *err, size_t errlen)
{
    if (len < 4) {
        data_err(err, errlen, "%s: truncated: expected a 4-byte IDX header, found %zu bytes", name,
                 len);
        return -1;
    }
    if (b[0] != 0 || b[1] != 0) {
        data_err(err, errlen, "%s: offset 0: expected IDX magic 0x00 0x00, got 0x%02X 0x%02X", name,
                 b[0], b[1]);
        return -1;
    }
    if (idx_dtype(b[2], &h->dtype) != 0) {
        data_err(err, errlen, "%s: offset 2: expected IDX type code 0x08..0x0E, got 0x%02X%s", name,
                 b[2], b[2] == 0x0A ? " (0x0A is unassigned)" : "");
        return -1;
    }
    if (b[3] < 1 || b[3] > NNC_MAX_RANK) {
        data_err(err, errlen, "%s: offset 3: expected 1..%d dimensions, got %u", name, NNC_MAX_RANK,
                 b[3]);
        return -1;
    }
    h->rank = b[3];
    h->hdr_bytes = 4 + 4 * (size_t)h->rank;
    return 0;
}

static int idx_header_parse(const uint8_t *b, size_t len, const char *name, idx_header *h,
                            char *err, size_t errlen)
{
    char shape[160];
    int i;
    if (idx_prefix_parse(b, len, name, h, err, errlen) != 0)
        return -1;
    if (len < h->hdr_bytes) {
        data_err(err, errlen, "%s: truncated: a %d-dimensional IDX header needs %zu bytes, found %zu",
                 name, h->rank, h->hdr_bytes, len);
        return -1;
    }
    for (i = 0; i < h->rank; i++) {
        const uint8_t *p = b + 4 + 4 * i;
        h->dims[i] = (int64_t)((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
                               (uint32_t)p[3]);
    }
    if (dims_bytes(h->dims, h->rank, nnc_dtype_size(h->dtype), &h->data_bytes) != 0) {
        data_err(err, errlen, "%s: header: shape %s of %s is too large to address", name,
                 dims_str(h->dims, h->rank, shape, sizeof shape), nnc_dtype_name(h->dtype));
        return -1;
    }
    return 0;
}

/* Checks that exactly h->data_bytes follow the header. */
static int idx_size_check(const idx_header *h, size_t len, const char *name, char *err,
                          size_t errlen)
{
    char shape[160];
    size_t avail = len - h->hdr_bytes;
    dims_str(h->dims, h->rank, shape, sizeof shape);
    if (avail < h->data_bytes) {
        data_err(err, errlen,
                 "%s: truncated: shape %s of %s needs %zu data bytes after the %zu-byte header, "
                 "found %zu",
                 name, shape, nnc_dtype_name(h->dtype), h->data_bytes, h->hdr_bytes, avail);
        return -1;
    }
    if (avail > h->data_bytes) {
        data_err(err, errlen,
                 "%s: offset %zu: expected end of file after shape %s of %s, found %zu more bytes",
                 name, h->hdr_bytes + h->data_bytes, shape, nnc_dtype_name(h->dtype),
                 avail - h->data_bytes);
        return -1;
    }
    return 0;
}

int nnc_parse_idx(const void *buf, size_t len, const char *name, nnc_array *out, char *err,
                  size_t errlen)
{
    const uint8_t *b = buf;
    idx_header h;
    array_clear(out);
    name = data_name(name);
    if (idx_header_parse(b, len, name, &h, err, errlen) != 0 ||
        idx_size_check(&h, len, name, err, errlen) != 0)
        return -1;
    if (array_alloc(out, h.dtype, h.rank, h.dims, h.data_bytes, name, err, errlen) != 0)
        return -1;
    elems_copy(out->data, b + h.hdr_bytes, h.data_bytes / nnc_dtype_size(h.dtype),
               nnc_dtype_size(h.dtype), 1);
    if (array_finite_check(out, name, h.hdr_bytes, err, errlen) != 0) {
        nnc_array_free(out);
        return -1;
    }
    return 0;
}

/* Reads just enough of f to parse the header, then at most one byte more
 * than the header says the file holds (so trailing junk is still noticed). */
static int idx_file_read(data_file *f, uint8_t **buf, size_t *len, char *err, size_t errlen)
{
    idx_header h;
    size_t cap = 0, want;
    if (file_read_upto(f, buf, len, &cap, 4, err, errlen) != 0)
        return -1;
    if (*len == 4 && file_read_upto(f, buf, len, &cap, 4 + 4 * (size_t)(*buf)[3], err, errlen))
        return -1;
    if (idx_header_parse(*buf, *len, f->path, &h, err, errlen) != 0)
        return -1;
    if (!f->direct && h.data_bytes > DATA_GZ_LIMIT) {
        data_err(err, errlen, "%s: header claims %zu data bytes; refusing more than 4 GiB from a "
                 "gzip file", f->path, h.data_bytes);
        return -1;
    }
    want = h.data_bytes > SIZE_MAX - h.hdr_bytes - 1 ? SIZE_MAX : h.hdr_bytes + h.data_bytes + 1;
    return file_read_upto(f, buf, len, &cap, want, err, errlen);
}

/* Turns the file image buf (header + data) into out's data in place, or frees it: the
 * elements move to the front and are swapped to host order there, so loading costs one copy
 * of the data in memory, not two (a 4 GiB file needed 8 GiB). */
static int idx_adopt(uint8_t *buf, size_t len, const char *name, nnc_array *out, char *err,
                     size_t errlen)
{
    idx_header h;
    size_t esize, i, b;
    uint8_t *shrunk;
    if (idx_header_parse(buf, len, name, &h, err, errlen) != 0 ||
        idx_size_check(&h, len, name, err, errlen) != 0) {
        free(buf);
        return -1;
    }
    esize = nnc_dtype_size(h.dtype);
    memmove(buf, buf + h.hdr_bytes, h.data_bytes);
    if (esize > 1 && !host_is_big_endian())
        for (i = 0; i < h.data_bytes; i += esize)
            for (b = 0; b < esize / 2; b++) {
                uint8_t t = buf[i + b];
                buf[i + b] = buf[i + esize - 1 - b];
                buf[i + esize - 1 - b] = t;
            }
    shrunk = realloc(buf, h.data_bytes ? h.data_bytes : 1);
    out->data = shrunk ? shrunk : buf;
    out->dtype = h.dtype;
    out->rank = h.rank;
    memcpy(out->dims, h.dims, (size_t)h.rank * sizeof h.dims[0]);
    if (array_finite_check(out, name, h.hdr_bytes, err, errlen) != 0) {
        nnc_array_free(out);
        return -1;
    }
    return 0;
}

int nnc_load_idx(const char *path, nnc_array *out, char *err, size_t errlen)
{
    data_file f;
    uint8_t *buf = NULL;
    size_t len = 0;
    int rc;
    array_clear(out);
    if (file_open(&f, path, err, errlen) != 0)
        return -1;
    rc = idx_file_read(&f, &buf, &len, err, errlen);
    rc = file_close(&f, rc, err, errlen);
    if (rc == 0)
        return idx_adopt(buf, len, path, out, err, errlen); /* takes buf */
    free(buf);
    return rc;
}

/* ---- .npy ----------------------------------------------------------------- */
/* "\x93NUMPY" major minor, header length (u16 LE for v1, u32 LE for v2/v3),
 * then a Python dict literal such as
 *   {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
 * padded with spaces and a '\n', then the raw elements.
 * https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html */

typedef struct {
    const uint8_t *s; /* the header text */
    size_t n, pos;    /* its length and the cursor */
    size_t base;      /* file offset of s[0], for messages */
    const char *name;
    char *err;
    size_t errlen;
} npy_cursor;

typedef struct {
    char descr[32];
    int fortran;
    int rank;
    int64_t dims[NNC_MAX_RANK];
    int seen; /* bit 0 descr, bit 1 fortran_order, bit 2 shape */
} npy_header;

static void npy_ws(npy_cursor *c)
{
    while (c->pos < c->n && (c->s[c->pos] == ' ' || c->s[c->pos] == '\t' ||
                             c->s[c->pos] == '\n' || c->s[c->pos] == '\r'))
        c->pos++;
}

static int npy_fail(npy_cursor *c, const char *expected)
{
    if (c->pos >= c->n)
        data_err(c->err, c->errlen, "%s: offset %zu: header: expected %s, got end of header",
                 c->name, c->base + c->pos, expected);
    else if (c->s[c->pos] >= 0x20 && c->s[c->pos] < 0x7F)
        data_err(c->err, c->errlen, "%s: offset %zu: header: expected %s, got '%c'", c->name,
                 c->base + c->pos, expected, c->s[c->pos]);
    else
        data_err(c->err, c->errlen, "%s: offset %zu: header: expected %s, got byte 0x%02X", c->name,
                 c->base + c->pos, expected, c->s[c->pos]);
    return -1;
}

/* Consumes `ch` (after optional whitespace) or fails. */
static int npy_expect(npy_cursor *c, char ch, const char *what)
{
    npy_ws(c);
    if (c->pos >= c->n || c->s[c->pos] != (uint8_t)ch)
        return npy_fail(c, what);
    c->pos++;
    return 0;
}

/* string: '...' or "..." without escapes (numpy never writes any). */
static int npy_string(npy_cursor *c, char *out, size_t outlen)
{
    uint8_t q;
    size_t k = 0;
    npy_ws(c);
    if (c->pos >= c->n || (c->s[c->pos] != '\'' && c->s[c->pos] != '"'))
        return npy_fail(c, "a quoted string");
    q = c->s[c->pos++];
    while (c->pos < c->n && c->s[c->pos] != q) {
        if (c->s[c->pos] == '\\' || k + 1 >= outlen)
            return npy_fail(c, "a short string without escapes");
        out[k++] = (char)c->s[c->pos++];
    }
    if (c->pos >= c->n)
        return npy_fail(c, "a closing quote");
    c->pos++;
    out[k] = '\0';
    return 0;
}

/* True | False */
static int npy_bool(npy_cursor *c, int *v)
{
    npy_ws(c);
    if (c->n - c->pos >= 4 && memcmp(c->s + c->pos, "True", 4) == 0) {
        c->pos += 4;
        *v = 1;
        return 0;
    }
    if (c->n - c->pos >= 5 && memcmp(c->s + c->pos, "False", 5) == 0) {
        c->pos += 5;
        *v = 0;
        return 0;
    }
    return npy_fail(c, "True or False");
}

/* int: digits, with the 'L' suffix Python 2 wrote for longs. */
static int npy_int(npy_cursor *c, int64_t *v)
{
    int64_t x = 0;
    size_t start;
    npy_ws(c);
    start = c->pos;
    while (c->pos < c->n && c->s[c->pos] >= '0' && c->s[c->pos] <= '9') {
        int d = c->s[c->pos] - '0';
        if (x > (INT64_MAX - d) / 10) {
            c->pos = start;
            return npy_fail(c, "a dimension below 2^63");
        }
        x = x * 10 + d;
        c->pos++;
    }
    if (c->pos == start)
        return npy_fail(c, "a non-negative integer dimension");
    if (c->pos < c->n && c->s[c->pos] == 'L')
        c->pos++;
    *v = x;
    return 0;
}

/* shape: '(' [int (',' int)* [',']] ')' */
static int npy_shape(npy_cursor *c, npy_header *h)
{
    if (npy_expect(c, '(', "'(' starting the shape tuple") != 0)
        return -1;
    h->rank = 0;
    for (;;) {
        npy_ws(c);
        if (c->pos < c->n && c->s[c->pos] == ')')
            break;
        if (h->rank == NNC_MAX_RANK)
            return npy_fail(c, "at most 8 dimensions");
        if (npy_int(c, &h->dims[h->rank++]) != 0)
            return -1;
        npy_ws(c);
        if (c->pos < c->n && c->s[c->pos] == ',')
            c->pos++;
        else if (c->pos >= c->n || c->s[c->pos] != ')')
            return npy_fail(c, "',' or ')' in the shape tuple");
    }
    c->pos++;
    return 0;
}

/* One 'key': value entry of the header dict. */
static int npy_entry(npy_cursor *c, npy_header *h)
{
    char key[32];
    size_t at;
    npy_ws(c);
    at = c->pos;
    if (npy_string(c, key, sizeof key) != 0 || npy_expect(c, ':', "':' after the key") != 0)
        return -1;
    npy_ws(c);
    if (strcmp(key, "descr") == 0 && !(h->seen & 1)) {
        h->seen |= 1;
        if (c->pos < c->n && c->s[c->pos] == '[') {
            data_err(c->err, c->errlen, "%s: header: structured dtypes (a list descr) are not "
                     "supported", c->name);
            return -1;
        }
        return npy_string(c, h->descr, sizeof h->descr);
    }
    if (strcmp(key, "fortran_order") == 0 && !(h->seen & 2)) {
        h->seen |= 2;
        return npy_bool(c, &h->fortran);
    }
    if (strcmp(key, "shape") == 0 && !(h->seen & 4)) {
        h->seen |= 4;
        return npy_shape(c, h);
    }
    c->pos = at;
    return npy_fail(c, "one each of the keys 'descr', 'fortran_order', 'shape'");
}

/* dict: '{' entry (',' entry)* [','] '}' then padding to the end. */
static int npy_dict(npy_cursor *c, npy_header *h)
{
    if (npy_expect(c, '{', "'{' starting the header dict") != 0)
        return -1;
    for (;;) {
        npy_ws(c);
        if (c->pos < c->n && c->s[c->pos] == '}')
            break;
        if (npy_entry(c, h) != 0)
            return -1;
        npy_ws(c);
        if (c->pos < c->n && c->s[c->pos] == ',')
            c->pos++;
        else if (c->pos >= c->n || c->s[c->pos] != '}')
            return npy_fail(c, "',' or '}' in the header dict");
    }
    c->pos++;
    npy_ws(c);
    if (c->pos != c->n)
        return npy_fail(c, "only padding after the header dict");
    if (h->seen != 7) {
        data_err(c->err, c->errlen, "%s: header: missing key '%s'", c->name,
                 !(h->seen & 1) ? "descr" : !(h->seen & 2) ? "fortran_order" : "shape");
        return -1;
    }
    return 0;
}

/* Maps a descr like '<f4' to a dtype, with advice for the common misses. */
static int npy_dtype(const char *descr, const char *name, nnc_dtype *t, char *err, size_t errlen)
{
    static const struct {
        const char *kind; /* descr without the byte-order character */
        nnc_dtype dtype;
    } map[] = { { "u1", NNC_DT_U8 },  { "b1", NNC_DT_U8 },  { "i1", NNC_DT_I8 },
                { "i2", NNC_DT_I16 }, { "i4", NNC_DT_I32 }, { "i8", NNC_DT_I64 },
                { "f4", NNC_DT_F32 }, { "f8", NNC_DT_F64 } };
    char order = descr[0];
    size_t i;
    if (strchr(descr, 'O')) {
        data_err(err, errlen, "%s: header: object arrays ('%s') are not supported", name, descr);
        return -1;
    }
    for (i = 0; order != '\0' && i < sizeof map / sizeof map[0]; i++) {
        int one_byte = map[i].kind[1] == '1';
        if (strcmp(descr + 1, map[i].kind) != 0)
            continue;
        *t = map[i].dtype;
        if (order == '<' || (one_byte && strchr(">|=", order)))
            return 0;
        if (order == '>') {
            data_err(err, errlen, "%s: header: big-endian dtype '%s' is not supported (save with "
                     "arr.astype('<%s'))", name, descr, map[i].kind);
            return -1;
        }
        break;
    }
    data_err(err, errlen, "%s: header: dtype '%s' is not supported (expected one of <u1 |u1 <i1 "
             "<i2 <i4 <i8 <f4 <f8 |b1)", name, descr);
    return -1;
}

/* Fortran order is only a problem when two or more dims exceed 1. */
static int npy_layout_check(const npy_header *h, const char *name, char *err, size_t errlen)
{
    int i, big = 0;
    for (i = 0; i < h->rank; i++)
        big += h->dims[i] > 1;
    if (h->fortran && big > 1) {
        data_err(err, errlen, "%s: header: fortran_order arrays are not supported (save with "
                 "np.ascontiguousarray)", name);
        return -1;
    }
    return 0;
}

/* Parses the fixed preamble: magic, version, header length. */
static int npy_preamble(const uint8_t *b, size_t len, const char *name, size_t *hstart,
                        size_t *hlen, char *err, size_t errlen)
{
    if (len < 10 || memcmp(b, "\x93NUMPY", 6) != 0) {
        if (len >= 6 && memcmp(b, "\x93NUMPY", 6) != 0)
            data_err(err, errlen, "%s: offset 0: expected .npy magic \\x93NUMPY, got other bytes "
                     "(not a .npy file?)", name);
        else
            data_err(err, errlen, "%s: truncated: expected at least 10 bytes of .npy preamble, "
                     "found %zu", name, len);
        return -1;
    }
    if ((b[6] != 1 && b[6] != 2 && b[6] != 3) || b[7] != 0) {
        data_err(err, errlen, "%s: offset 6: expected .npy format version 1.0, 2.0 or 3.0, got "
                 "%u.%u", name, b[6], b[7]);
        return -1;
    }
    *hstart = b[6] == 1 ? 10 : 12;
    if (len < *hstart) {
        data_err(err, errlen, "%s: truncated: expected a %zu-byte .npy preamble, found %zu", name,
                 *hstart, len);
        return -1;
    }
    *hlen = b[6] == 1 ? (size_t)b[8] | (size_t)b[9] << 8
                      : (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 |
                            (size_t)b[11] << 24;
    if (*hlen > len - *hstart) {
        data_err(err, errlen, "%s: truncated: header of %zu bytes at offset %zu needs %zu bytes, "
                 "found %zu", name, *hlen, *hstart, *hstart + *hlen, len);
        return -1;
    }
    return 0;
}

/* Preamble + dict + dtype + layout: everything but the data. */
static int npy_header_parse(const uint8_t *b, size_t len, const char *name, npy_header *h,
                            nnc_dtype *t, size_t *data_off, char *err, size_t errlen)
{
    size_t hstart, hlen;
    npy_cursor c;
    if (npy_preamble(b, len, name, &hstart, &hlen, err, errlen) != 0)
        return -1;
    memset(h, 0, sizeof *h);
    c.s = b + hstart;
    c.n = hlen;
    c.pos = 0;
    c.base = hstart;
    c.name = name;
    c.err = err;
    c.errlen = errlen;
    if (npy_dict(&c, h) != 0 || npy_dtype(h->descr, name, t, err, errlen) != 0 ||
        npy_layout_check(h, name, err, errlen) != 0)
        return -1;
    *data_off = hstart + hlen;
    return 0;
}

static int parse_npy(const void *buf, size_t len, const char *name, nnc_array *out, int finite,
                     char *err, size_t errlen);

int nnc_parse_npy(const void *buf, size_t len, const char *name, nnc_array *out, char *err,
                  size_t errlen)
{
    return parse_npy(buf, len, name, out, 1, err, errlen);
}

/* finite: refuse NaN and Inf (training data); 0 reads the values as they are. */
static int parse_npy(const void *buf, size_t len, const char *name, nnc_array *out, int finite,
                     char *err, size_t errlen)
{
    const uint8_t *b = buf;
    npy_header h;
    nnc_dtype t;
    size_t off, bytes, esize;
    char shape[160];
    array_clear(out);
    name = data_name(name);
    if (npy_header_parse(b, len, name, &h, &t, &off, err, errlen) != 0)
        return -1;
    esize = nnc_dtype_size(t);
    dims_str(h.dims, h.rank, shape, sizeof shape);
    if (dims_bytes(h.dims, h.rank, esize, &bytes) != 0) {
        data_err(err, errlen, "%s: header: shape %s of '%s' is too large to address", name, shape,
                 h.descr);
        return -1;
    }
    if (len - off != bytes) {
        data_err(err, errlen, "%s: %s: shape %s of '%s' needs %zu data bytes at offset %zu, found "
                 "%zu", name, len - off < bytes ? "truncated" : "size mismatch", shape, h.descr,
                 bytes, off, len - off);
        return -1;
    }
    if (array_alloc(out, t, h.rank, h.dims, bytes, name, err, errlen) != 0)
        return -1;
    elems_copy(out->data, b + off, bytes / esize, esize, 0);
    if (finite && array_finite_check(out, name, off, err, errlen) != 0) {
        nnc_array_free(out);
        return -1;
    }
    return 0;
}

static int load_npy(const char *path, nnc_array *out, int finite, char *err, size_t errlen)
{
    uint8_t *buf;
    size_t len;
    int rc;
    array_clear(out);
    if (file_read_all(path, &buf, &len, err, errlen) != 0)
        return -1;
    rc = parse_npy(buf, len, path, out, finite, err, errlen);
    free(buf);
    return rc;
}

int nnc_load_npy(const char *path, nnc_array *out, char *err, size_t errlen)
{
    return load_npy(path, out, 1, err, errlen);
}

int nnc_load_npy_values(const char *path, nnc_array *out, char *err, size_t errlen)
{
    return load_npy(path, out, 0, err, errlen);
}

/* ---- CSV ------------------------------------------------------------------ */
/* Comma-separated numbers, one row per line; '\r\n' endings, a UTF-8 BOM,
 * blank lines and spaces around cells are tolerated.  Every row must have
 * as many cells as the first data row. */

typedef struct {
    const char *s; /* the line, without its terminator */
    size_t n;
    long lineno; /* 1-based */
} csv_line;

typedef struct {
    double *v;
    size_t n, cap;
} csv_values;

/* Next line starting at *pos; 0 at end of input. */
static int csv_next_line(const char *b, size_t len, size_t *pos, csv_line *line)
{
    const char *nl;
    if (*pos >= len)
        return 0;
    line->s = b + *pos;
    nl = memchr(line->s, '\n', len - *pos);
    line->n = nl ? (size_t)(nl - line->s) : len - *pos;
    *pos += line->n + (nl != NULL);
    if (line->n > 0 && line->s[line->n - 1] == '\r')
        line->n--;
    line->lineno++;
    return 1;
}

static int csv_blank(const csv_line *line)
{
    size_t i;
    for (i = 0; i < line->n; i++)
        if (line->s[i] != ' ' && line->s[i] != '\t')
            return 0;
    return 1;
}

static size_t csv_count_cells(const csv_line *line)
{
    size_t i, k = 1;
    for (i = 0; i < line->n; i++)
        k += line->s[i] == ',';
    return k;
}

/* Parses cell [s, s+n) as a number; -1 if it is not exactly one. */
static int csv_cell_parse(const char *s, size_t n, double *v)
{
    char tmp[DATA_CELL_MAX + 1];
    char *end;
    while (n > 0 && (*s == ' ' || *s == '\t'))
        s++, n--;
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        n--;
    if (n == 0 || n > DATA_CELL_MAX)
        return -1;
    memcpy(tmp, s, n); /* strtod needs a terminator the buffer lacks */
    tmp[n] = '\0';
    *v = strtod(tmp, &end);
    return end == tmp + n ? 0 : -1;
}

/* Span of cell `k`'s text within the line starting at *at; advances *at. */
static size_t csv_cell_span(const csv_line *line, size_t *at)
{
    size_t start = *at, end = start;
    while (end < line->n && line->s[end] != ',')
        end++;
    *at = end + 1;
    return end - start;
}

/* A header has a cell of text; an empty cell alone does not make one (the
 * line is then data, and its empty cell an error worth reporting). */
static int csv_is_header(const csv_line *line)
{
    size_t at = 0, k, cells = csv_count_cells(line);
    double v;
    for (k = 0; k < cells; k++) {
        size_t start = at, n = csv_cell_span(line, &at), i;
        int empty = 1;
        for (i = 0; i < n; i++)
            empty &= line->s[start + i] == ' ' || line->s[start + i] == '\t';
        if (!empty && csv_cell_parse(line->s + start, n, &v) != 0)
            return 1;
    }
    return 0;
}

static int csv_push(csv_values *vals, double v)
{
    if (vals->n == vals->cap) {
        size_t ncap = vals->cap ? vals->cap * 2 : 1024;
        double *nv;
        if (ncap > SIZE_MAX / sizeof *nv)
            return -1;
        nv = realloc(vals->v, ncap * sizeof *nv);
        if (!nv)
            return -1;
        vals->v = nv;
        vals->cap = ncap;
    }
    vals->v[vals->n++] = v;
    return 0;
}

static int csv_bad_cell(const char *name, const csv_line *line, size_t col, const char *s,
                        size_t n, char *err, size_t errlen)
{
    char shown[40];
    size_t i, k = n < sizeof shown - 4 ? n : sizeof shown - 4;
    for (i = 0; i < k; i++) /* keep the message one printable line */
        shown[i] = (s[i] >= 0x20 && s[i] < 0x7F) ? s[i] : '?';
    strcpy(shown + k, k < n ? "..." : "");
    data_err(err, errlen, "%s:%ld: column %zu: expected a number, got '%s'", name, line->lineno,
             col, shown);
    return -1;
}

/* Appends data row `row` (0-based sample index) of exactly `cols` cells; a NaN or
 * Inf cell ("nan", "inf", or a number past the double range) is refused, as in
 * array_finite_check. */
static int csv_row_parse(const csv_line *line, size_t row, size_t cols, csv_values *vals,
                         const char *name, char *err, size_t errlen)
{
    size_t k, at = 0, cells = csv_count_cells(line);
    if (cells != cols) {
        data_err(err, errlen, "%s:%ld: expected %zu columns, got %zu", name, line->lineno, cols,
                 cells);
        return -1;
    }
    for (k = 0; k < cells; k++) {
        size_t start = at, n = csv_cell_span(line, &at);
        double v;
        if (csv_cell_parse(line->s + start, n, &v) != 0)
            return csv_bad_cell(name, line, k + 1, line->s + start, n, err, errlen);
        if (!isfinite(v)) {
            data_err(err, errlen, "%s:%ld: sample %zu, column %zu is %s; training data must be "
                     "finite", name, line->lineno, row, k + 1, isnan(v) ? "NaN" : v > 0 ? "+Inf" : "-Inf");
            return -1;
        }
        if (csv_push(vals, v) != 0) {
            data_err(err, errlen, "%s:%ld: out of memory", name, line->lineno);
            return -1;
        }
    }
    return 0;
}

/* Walks the lines, dropping the header if asked (or if auto-detected). */
static int csv_rows_parse(const char *b, size_t len, const char *name, int skip_header,
                          csv_values *vals, size_t *rows, size_t *cols, char *err, size_t errlen)
{
    csv_line line = { NULL, 0, 0 };
    size_t pos = 0;
    int first = 1;
    if (len >= 3 && memcmp(b, "\xEF\xBB\xBF", 3) == 0) /* UTF-8 byte-order mark */
        pos = 3;
    *rows = *cols = 0;
    while (csv_next_line(b, len, &pos, &line)) {
        if (csv_blank(&line))
            continue;
        if (first) {
            first = 0;
            if (skip_header > 0 || (skip_header < 0 && csv_is_header(&line)))
                continue;
        }
        if (*rows == 0)
            *cols = csv_count_cells(&line);
        if (csv_row_parse(&line, *rows, *cols, vals, name, err, errlen) != 0)
            return -1;
        (*rows)++;
    }
    if (*rows == 0) {
        data_err(err, errlen, "%s: no data rows%s", name, first ? " (empty file)" : "");
        return -1;
    }
    return 0;
}

int nnc_parse_csv(const void *buf, size_t len, const char *name, int skip_header, nnc_array *out,
                  char *err, size_t errlen)
{
    csv_values vals = { NULL, 0, 0 };
    size_t rows, cols;
    array_clear(out);
    name = data_name(name);
    if (csv_rows_parse(buf, len, name, skip_header, &vals, &rows, &cols, err, errlen) != 0) {
        free(vals.v);
        return -1;
    }
    out->dtype = NNC_DT_F64;
    out->rank = 2;
    out->dims[0] = (int64_t)rows;
    out->dims[1] = (int64_t)cols;
    out->data = vals.v; /* rows * cols == vals.n doubles, never NULL here */
    return 0;
}

int nnc_load_csv(const char *path, int skip_header, nnc_array *out, char *err, size_t errlen)
{
    uint8_t *buf;
    size_t len;
    int rc;
    array_clear(out);
    if (file_read_all(path, &buf, &len, err, errlen) != 0)
        return -1;
    rc = nnc_parse_csv(buf, len, path, skip_header, out, err, errlen);
    free(buf);
    return rc;
}

/* ---- conversions ---------------------------------------------------------- */

static double elem_f64(const void *data, nnc_dtype t, size_t i)
{
    switch (t) {
    case NNC_DT_U8: return ((const uint8_t *)data)[i];
    case NNC_DT_I8: return ((const int8_t *)data)[i];
    case NNC_DT_I16: return ((const int16_t *)data)[i];
    case NNC_DT_I32: return ((const int32_t *)data)[i];
    case NNC_DT_I64: return (double)((const int64_t *)data)[i];
    case NNC_DT_F32: return ((const float *)data)[i];
    case NNC_DT_F64: return ((const double *)data)[i];
    }
    return 0;
}

/* "sample 5, element 3": flat index i split along the first dimension, the way
 * the data loaders count samples; for messages. */
static const char *elem_where(const nnc_array *a, size_t i, char *buf, size_t n)
{
    int64_t numel = nnc_array_numel(a);
    int64_t row = a->rank > 0 && a->dims[0] > 0 ? numel / a->dims[0] : 1;
    snprintf(buf, n, "sample %lld, element %lld", (long long)((int64_t)i / row),
             (long long)((int64_t)i % row));
    return buf;
}

/* Checks `in` is a well-formed array and yields its element count. */
static int array_check(const nnc_array *in, const char *op, size_t *n, char *err, size_t errlen)
{
    int64_t numel = in ? nnc_array_numel(in) : -1;
    if (!in || !dtype_valid(in->dtype) || numel < 0 || (!in->data && numel > 0) ||
        (uint64_t)numel > SIZE_MAX / sizeof(double)) {
        data_err(err, errlen, "%s: invalid input array", op);
        return -1;
    }
    *n = (size_t)numel;
    return 0;
}

/* Moves tmp into *out, releasing out's old data when out aliases in. */
static void array_replace(const nnc_array *in, nnc_array *out, nnc_array *tmp)
{
    if (out == in)
        free(out->data);
    *out = *tmp;
}

int nnc_array_to_f32(const nnc_array *in, float scale, nnc_array *out, char *err, size_t errlen)
{
    nnc_array tmp;
    size_t i, n;
    float *d;
    char where[64];
    if (out != in) /* on failure out must be empty, but never clobber in */
        array_clear(out);
    if (array_check(in, "to_f32", &n, err, errlen) != 0 ||
        array_alloc(&tmp, NNC_DT_F32, in->rank, in->dims, n * sizeof(float), "to_f32", err, errlen))
        return -1;
    d = tmp.data;
    for (i = 0; i < n; i++) {
        double x = elem_f64(in->data, in->dtype, i);
        d[i] = (float)(x * (double)scale);
        if (isfinite(d[i]) || !isfinite(x))
            continue;
        /* a finite value that scaling or narrowing to f32 overflows */
        data_err(err, errlen, "to_f32: element %zu (%s) is %.17g (%s), which times %g is outside "
                 "the f32 range", i, elem_where(in, i, where, sizeof where), x,
                 nnc_dtype_name(in->dtype), (double)scale);
        free(tmp.data);
        return -1;
    }
    array_replace(in, out, &tmp);
    return 0;
}

/* Element i of an integer-or-float array as int32, or -1 with a message. */
static int elem_i32(const nnc_array *in, size_t i, int32_t *v, char *err, size_t errlen)
{
    double x;
    char where[64];
    elem_where(in, i, where, sizeof where);
    if (in->dtype == NNC_DT_I64) { /* exact: a double cannot hold every int64 */
        int64_t y = ((const int64_t *)in->data)[i];
        if (y >= INT32_MIN && y <= INT32_MAX) {
            *v = (int32_t)y;
            return 0;
        }
        data_err(err, errlen, "to_i32: element %zu (%s) is %lld (i64), outside the int32 range",
                 i, where, (long long)y);
        return -1;
    }
    x = elem_f64(in->data, in->dtype, i);
    if (x != x || x != floor(x) || x < INT32_MIN || x > INT32_MAX) {
        data_err(err, errlen, "to_i32: element %zu (%s) is %.17g (%s), not an integer in the "
                 "int32 range", i, where, x, nnc_dtype_name(in->dtype));
        return -1;
    }
    *v = (int32_t)x;
    return 0;
}

int nnc_array_to_i32(const nnc_array *in, nnc_array *out, char *err, size_t errlen)
{
    nnc_array tmp;
    size_t i, n;
    if (out != in) /* on failure out must be empty, but never clobber in */
        array_clear(out);
    if (array_check(in, "to_i32", &n, err, errlen) != 0 ||
        array_alloc(&tmp, NNC_DT_I32, in->rank, in->dims, n * sizeof(int32_t), "to_i32", err,
                    errlen))
        return -1;
    for (i = 0; i < n; i++) {
        if (elem_i32(in, i, &((int32_t *)tmp.data)[i], err, errlen) != 0) {
            free(tmp.data);
            return -1;
        }
    }
    array_replace(in, out, &tmp);
    return 0;
}
