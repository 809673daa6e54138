/*
 * data.c - what the IDX, .npy and CSV readers (idx.c, npy.c, csv.c) share, and the
 * conversions to f32 and i32 (see data.h for the contract).
 *
 * Design.  Each format has a parser over a byte buffer (nnc_parse_*), and
 * the file loaders only gather bytes and call it, so the fuzzers exercise
 * exactly the code that reads real files.  The parsers follow one rule:
 * work out how many bytes the header implies, with every multiplication
 * overflow-checked, and compare that with what is present *before*
 * allocating anything.  Files are read through zlib (gzdopen/gzread), which
 * passes plain files through untouched, and as they stream: IDX and .npy read
 * their header first, then at most one byte more than it declares (a .gz
 * whose stream runs on is refused at that byte), growing the buffer
 * geometrically, so a lying header in a small file costs at most twice the
 * file's real size; CSV is parsed a line at a time (csv.c).  A gzip file may
 * give at most 4 GiB of data (a zip bomb is refused rather than swapped to
 * death).
 *
 * Errors are one line, "name: where: expected X, got Y", written into the
 * caller's buffer; *out stays empty on every failure path.
 */
#define _POSIX_C_SOURCE 200809L /* open, fstat under -std=c11 */

#include "data_impl.h"
#include "half.h"

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

/* ---- errors and small helpers ------------------------------------------- */

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
void data_err(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    if (!err || errlen == 0) return;
    va_start(ap, fmt);
    /* A truncated message is still the best we can do; nothing to check. */
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

const char *data_name(const char *name) { return name ? name : "<memory>"; }

/* How a message shows bytes taken from a file: at most `max` characters between quotes, each
 * byte outside printable ASCII (and ' and \) written \xNN so a message stays one harmless line
 * (no terminal escapes, no newlines), and the full length when cut:
 *   'x1'   '2021-03-'... (19 bytes)   ''
 * A data file can be anything a model names (/etc/shadow, ~/.ssh/id_rsa), and messages end up
 * in logs: when others may not read the file (shown == 0) nothing of it is quoted, only its
 * length.  out needs 4 * max + 48 bytes. */
const char *data_excerpt(char *out, size_t n, const void *s, size_t len, size_t max, int shown) {
    const unsigned char *b = s;
    size_t i, k = 0;
    if (len > 0 && !shown) {
        snprintf(out, n, "%zu bytes (not shown: others cannot read the file)", len);
        return out;
    }
    if (n < 4 * max + 48) { /* a caller's mistake; still a valid string */
        snprintf(out, n, "%zu bytes", len);
        return out;
    }
    out[k++] = '\'';
    for (i = 0; i < len && i < max; i++) {
        if (b[i] >= 0x20 && b[i] < 0x7F && b[i] != '\'' && b[i] != '\\') out[k++] = (char)b[i];
        else k += (size_t)snprintf(out + k, n - k, "\\x%02X", b[i]);
    }
    out[k++] = '\'';
    if (len > max) snprintf(out + k, n - k, "... (%zu bytes)", len);
    else out[k] = '\0';
    return out;
}

static const struct {
    const char *name; /* as printed in messages */
    size_t size;      /* bytes per element */
} dtype_info[] = {
    [NNC_DT_U8] = {"u8", 1},   [NNC_DT_I8] = {"i8", 1},     [NNC_DT_I16] = {"i16", 2},
    [NNC_DT_I32] = {"i32", 4}, [NNC_DT_I64] = {"i64", 8},   [NNC_DT_F32] = {"f32", 4},
    [NNC_DT_F64] = {"f64", 8}, [NNC_DT_BF16] = {"bf16", 2}, [NNC_DT_F16] = {"f16", 2},
};
_Static_assert(sizeof dtype_info / sizeof dtype_info[0] == NNC_DT_COUNT, "dtype_info must cover nnc_dtype");

static int data_dtype_valid(nnc_dtype t) { return (int)t >= 0 && (int)t < NNC_DT_COUNT; }

size_t nnc_dtype_size(nnc_dtype t) { return data_dtype_valid(t) ? dtype_info[t].size : 0; }

const char *nnc_dtype_name(nnc_dtype t) { return data_dtype_valid(t) ? dtype_info[t].name : "?"; }

/* Product of dims into *n; -1 if a dim is negative or the product overflows. */
static int data_dims_numel(const int64_t *dims, int rank, int64_t *n) {
    int64_t p = 1;
    int i;
    for (i = 0; i < rank; i++) {
        if (dims[i] < 0) return -1;
        if (dims[i] != 0 && p > INT64_MAX / dims[i]) return -1;
        p *= dims[i];
    }
    *n = p;
    return 0;
}

/* Bytes that rank/dims of `esize`-byte elements occupy; -1 on any overflow. */
int data_dims_bytes(const int64_t *dims, int rank, size_t esize, size_t *bytes) {
    int64_t n;
    if (data_dims_numel(dims, rank, &n) != 0 || (uint64_t)n > SIZE_MAX / esize) return -1;
    *bytes = (size_t)n * esize;
    return 0;
}

int64_t nnc_array_numel(const nnc_array *a) {
    int64_t n;
    if (!a || a->rank < 0 || a->rank > NNC_MAX_RANK || data_dims_numel(a->dims, a->rank, &n) != 0) return -1;
    return n;
}

/* "[60000, 28, 28]" into buf (for messages). */
const char *data_dims_str(const int64_t *dims, int rank, char *buf, size_t n) {
    size_t used = 0;
    int i;
    buf[0] = '\0';
    for (i = 0; i < rank && used < n; i++) {
        int k = snprintf(buf + used, n - used, "%s%lld", i ? ", " : "[", (long long)dims[i]);
        if (k < 0) break;
        used += (size_t)k;
    }
    if (used < n) snprintf(buf + used, n - used, "%s", rank ? "]" : "[]");
    return buf;
}

void nnc_array_free(nnc_array *a) {
    if (!a) return;
    free(a->data);
    memset(a, 0, sizeof *a);
}

void data_array_clear(nnc_array *a) { memset(a, 0, sizeof *a); }

/* Allocates out->data for `bytes` (at least 1, so data is never NULL). */
int data_array_alloc(nnc_array *out, nnc_dtype t, int rank, const int64_t *dims, size_t bytes, const char *name,
                     char *err, size_t errlen) {
    data_array_clear(out);
    out->data = malloc(bytes ? bytes : 1);
    if (!out->data) {
        data_err(err, errlen, "%s: out of memory allocating %zu bytes", data_name(name), bytes);
        return -1;
    }
    out->dtype = t;
    out->rank = rank;
    if (rank > 0) memcpy(out->dims, dims, (size_t)rank * sizeof dims[0]);
    return 0;
}

int data_host_is_big_endian(void) {
    const uint16_t one = 1;
    return *(const uint8_t *)&one == 0;
}

/* Copies n elements of esize bytes stored in the given byte order into
 * host order. */
void data_elems_copy(void *dst, const uint8_t *src, size_t n, size_t esize, int src_big) {
    uint8_t *d = dst;
    size_t i, b;
    if (esize == 1 || src_big == data_host_is_big_endian()) {
        if (n) memcpy(dst, src, n * esize);
        return;
    }
    for (i = 0; i < n; i++)
        for (b = 0; b < esize; b++) d[i * esize + b] = src[i * esize + esize - 1 - b];
}

/* Makes the `bytes` of elements at buf + off, stored in the given byte order, an array's data:
 * moved to the front, swapped to host order there and the rest given back, so a loaded file
 * costs one copy of its data in memory, not two (a 4 GiB file needed 8 GiB).  Takes buf. */
void *data_buf_adopt(uint8_t *buf, size_t off, size_t bytes, size_t esize, int src_big) {
    size_t i, b;
    uint8_t *shrunk;
    memmove(buf, buf + off, bytes);
    if (esize > 1 && src_big != data_host_is_big_endian())
        for (i = 0; i < bytes; i += esize)
            for (b = 0; b < esize / 2; b++) {
                uint8_t t = buf[i + b];
                buf[i + b] = buf[i + esize - 1 - b];
                buf[i + esize - 1 - b] = t;
            }
    shrunk = realloc(buf, bytes ? bytes : 1);
    return shrunk ? shrunk : buf;
}

/* Training data must be finite: one NaN pixel would otherwise flow silently into
 * the weights (a ReLU can hide it from the loss).  Refuses the first NaN or Inf of a
 * float array, naming the sample (index along the first dimension), the element
 * within it and the byte offset in the file, where the data starts at `data_off`. */
int data_array_finite_check(const nnc_array *a, const char *name, size_t data_off, char *err, size_t errlen) {
    int64_t n = nnc_array_numel(a), row, i;
    size_t esize = nnc_dtype_size(a->dtype);
    if (a->dtype != NNC_DT_F32 && a->dtype != NNC_DT_F64) return 0;
    row = a->rank > 0 && a->dims[0] > 0 ? n / a->dims[0] : 1;
    for (i = 0; i < n; i++) {
        double v = a->dtype == NNC_DT_F32 ? (double)((const float *)a->data)[i] : ((const double *)a->data)[i];
        if (isfinite(v)) continue;
        data_err(err, errlen,
                 "%s: offset %zu: sample %lld, element %lld is %s; training data "
                 "must be finite",
                 name, data_off + (size_t)i * esize, (long long)(i / row), (long long)(i % row),
                 isnan(v)    ? "NaN"
                     : v > 0 ? "+Inf"
                             : "-Inf");
        return -1;
    }
    return 0;
}

/* ---- reading files -------------------------------------------------------- */

int data_file_open(data_file *f, const char *path, char *err, size_t errlen) {
    return data_file_open_buffered(f, path, 256u << 10, err, errlen);
}

/* zlib's default 8 KiB buffer: one read(2) and one short inflate call per 8 KiB; at 256 KiB
 * Fashion-MNIST's training images inflate in 0.22 s instead of 0.24.  A header alone wants a
 * small one: zlib reads `buffer` bytes and inflates twice that ahead (2 ms for 256 KiB). */
int data_file_open_buffered(data_file *f, const char *path, unsigned buffer, char *err, size_t errlen) {
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
    f->shown = (st.st_mode & S_IROTH) != 0;
    f->gz = gzdopen(fd, "rb");
    if (!f->gz) {
        data_err(err, errlen, "%s: cannot open: out of memory", path);
        close(fd);
        return -1;
    }
    gzbuffer(f->gz, buffer); /* before the first read, which gzdirect makes */
    f->direct = gzdirect(f->gz);
    return 0;
}

/* Grows *buf so that it can hold more than *len bytes, never past `want`. */
static int buf_grow(uint8_t **buf, size_t *cap, size_t want) {
    size_t ncap = *cap < DATA_READ_CHUNK ? DATA_READ_CHUNK : *cap;
    uint8_t *nb;
    if (*cap >= DATA_READ_CHUNK) ncap = *cap > SIZE_MAX / 2 ? SIZE_MAX : *cap * 2;
    if (ncap > want) ncap = want;
    nb = realloc(*buf, ncap);
    if (!nb) return -1;
    *buf = nb;
    *cap = ncap;
    return 0;
}

/* Reports zlib's error state; zerr/msg come from gzerror(). */
static int file_read_failed(data_file *f, int zerr, const char *msg, char *err, size_t errlen) {
    const char *colon = msg ? strstr(msg, ": ") : NULL;
    if (msg && msg[0] == '<' && colon) /* drop zlib's "<fd:3>: " prefix */
        msg = colon + 2;
    if (zerr == Z_BUF_ERROR) msg = "gzip data ends early (truncated .gz file?)";
    data_err(err, errlen, "%s: cannot read: %s", f->path, zerr == Z_ERRNO ? strerror(errno) : msg ? msg : "zlib error");
    return -1;
}

/* gzread's end of file may hide an error (a cut deflate stream). */
static int data_file_check_error(data_file *f, char *err, size_t errlen) {
    int zerr = Z_OK;
    const char *msg = gzerror(f->gz, &zerr);
    return zerr == Z_OK ? 0 : file_read_failed(f, zerr, msg, err, errlen);
}

/* Closes f; reports a failure only if nothing went wrong before (rc == 0). */
int data_file_close(data_file *f, int rc, char *err, size_t errlen) {
    int zrc;
    if (rc == 0) rc = data_file_check_error(f, err, errlen);
    zrc = gzclose(f->gz);
    if (rc == 0 && zrc != Z_OK) {
        data_err(err, errlen, "%s: cannot read: %s", f->path,
                 zrc == Z_BUF_ERROR ? "gzip data ends early (truncated .gz file?)" : "error closing file");
        return -1;
    }
    return rc;
}

/* Appends to *buf until it holds `want` bytes or the file ends. */
int data_file_read_upto(data_file *f, uint8_t **buf, size_t *len, size_t *cap, size_t want, char *err, size_t errlen) {
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
        if (got < 0 && data_file_check_error(f, err, errlen) == 0)
            data_err(err, errlen, "%s: cannot read", f->path); /* no zlib detail */
        if (got < 0) return -1;
        if (got == 0) /* end of file, or a cut deflate stream */
            return data_file_check_error(f, err, errlen);
        *len += (size_t)got;
    }
    return 0;
}

/* ---- conversions ---------------------------------------------------------- */

static double elem_f64(const void *data, nnc_dtype t, size_t i) {
    switch (t) {
    case NNC_DT_U8: return ((const uint8_t *)data)[i];
    case NNC_DT_I8: return ((const int8_t *)data)[i];
    case NNC_DT_I16: return ((const int16_t *)data)[i];
    case NNC_DT_I32: return ((const int32_t *)data)[i];
    case NNC_DT_I64: return (double)((const int64_t *)data)[i];
    case NNC_DT_F32: return ((const float *)data)[i];
    case NNC_DT_F64: return ((const double *)data)[i];
    case NNC_DT_BF16: return nnc_bf16_to_f32(((const uint16_t *)data)[i]);
    case NNC_DT_F16: return nnc_f16_to_f32(((const uint16_t *)data)[i]);
    }
    return 0;
}

/* "sample 5, element 3": flat index i split along the first dimension, the way
 * the data loaders count samples; for messages. */
static const char *elem_where(const nnc_array *a, size_t i, char *buf, size_t n) {
    int64_t numel = nnc_array_numel(a);
    int64_t row = a->rank > 0 && a->dims[0] > 0 ? numel / a->dims[0] : 1;
    snprintf(buf, n, "sample %lld, element %lld", (long long)((int64_t)i / row), (long long)((int64_t)i % row));
    return buf;
}

/* Checks `in` is a well-formed array and yields its element count. */
static int array_check(const nnc_array *in, const char *op, size_t *n, char *err, size_t errlen) {
    int64_t numel = in ? nnc_array_numel(in) : -1;
    if (!in || !data_dtype_valid(in->dtype) || numel < 0 || (!in->data && numel > 0) ||
        (uint64_t)numel > SIZE_MAX / sizeof(double)) {
        data_err(err, errlen, "%s: invalid input array", op);
        return -1;
    }
    *n = (size_t)numel;
    return 0;
}

/* Moves tmp into *out, releasing out's old data when out aliases in. */
static void array_replace(const nnc_array *in, nnc_array *out, nnc_array *tmp) {
    if (out == in) free(out->data);
    *out = *tmp;
}

int nnc_array_to_f32(const nnc_array *in, float scale, nnc_array *out, char *err, size_t errlen) {
    nnc_array tmp;
    size_t i, n;
    float *d;
    char where[64];
    if (out != in) /* on failure out must be empty, but never clobber in */
        data_array_clear(out);
    if (array_check(in, "to_f32", &n, err, errlen) != 0 ||
        data_array_alloc(&tmp, NNC_DT_F32, in->rank, in->dims, n * sizeof(float), "to_f32", err, errlen))
        return -1;
    d = tmp.data;
    for (i = 0; i < n; i++) {
        double x = elem_f64(in->data, in->dtype, i);
        d[i] = (float)(x * (double)scale);
        if (isfinite(d[i]) || !isfinite(x)) continue;
        /* a finite value that scaling or narrowing to f32 overflows */
        data_err(err, errlen,
                 "to_f32: element %zu (%s) is %.17g (%s), which times %g is outside "
                 "the f32 range",
                 i, elem_where(in, i, where, sizeof where), x, nnc_dtype_name(in->dtype), (double)scale);
        free(tmp.data);
        return -1;
    }
    array_replace(in, out, &tmp);
    return 0;
}

/* Element i of an integer-or-float array as int32, or -1 with a message. */
static int elem_i32(const nnc_array *in, size_t i, int32_t *v, char *err, size_t errlen) {
    double x;
    char where[64];
    elem_where(in, i, where, sizeof where);
    if (in->dtype == NNC_DT_I64) { /* exact: a double cannot hold every int64 */
        int64_t y = ((const int64_t *)in->data)[i];
        if (y >= INT32_MIN && y <= INT32_MAX) {
            *v = (int32_t)y;
            return 0;
        }
        data_err(err, errlen, "to_i32: element %zu (%s) is %lld (i64), outside the int32 range", i, where,
                 (long long)y);
        return -1;
    }
    x = elem_f64(in->data, in->dtype, i);
    if (x != x || x != floor(x) || x < INT32_MIN || x > INT32_MAX) {
        data_err(err, errlen,
                 "to_i32: element %zu (%s) is %.17g (%s), not an integer in the "
                 "int32 range",
                 i, where, x, nnc_dtype_name(in->dtype));
        return -1;
    }
    *v = (int32_t)x;
    return 0;
}

int nnc_array_to_i32(const nnc_array *in, nnc_array *out, char *err, size_t errlen) {
    nnc_array tmp;
    size_t i, n;
    if (out != in) /* on failure out must be empty, but never clobber in */
        data_array_clear(out);
    if (array_check(in, "to_i32", &n, err, errlen) != 0 ||
        data_array_alloc(&tmp, NNC_DT_I32, in->rank, in->dims, n * sizeof(int32_t), "to_i32", err, errlen))
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
