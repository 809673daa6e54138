/* npy.c - the NumPy .npy reader (versions 1 to 3, C order); see data.h. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data_impl.h"

/* The longest header read (numpy itself refuses more than 10000 bytes unless told otherwise):
 * a v2 preamble may declare 4 GiB of "header", which a .gz would inflate before any check. */
#define NPY_HEADER_MAX (1 << 20)

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

static void npy_ws(npy_cursor *c) {
    while (c->pos < c->n &&
           (c->s[c->pos] == ' ' || c->s[c->pos] == '\t' || c->s[c->pos] == '\n' || c->s[c->pos] == '\r'))
        c->pos++;
}

static int npy_fail(npy_cursor *c, const char *expected) {
    if (c->pos >= c->n)
        data_err(c->err, c->errlen, "%s: offset %zu: header: expected %s, got end of header", c->name, c->base + c->pos,
                 expected);
    else if (c->s[c->pos] >= 0x20 && c->s[c->pos] < 0x7F)
        data_err(c->err, c->errlen, "%s: offset %zu: header: expected %s, got '%c'", c->name, c->base + c->pos,
                 expected, c->s[c->pos]);
    else
        data_err(c->err, c->errlen, "%s: offset %zu: header: expected %s, got byte 0x%02X", c->name, c->base + c->pos,
                 expected, c->s[c->pos]);
    return -1;
}

/* Consumes `ch` (after optional whitespace) or fails. */
static int npy_expect(npy_cursor *c, char ch, const char *what) {
    npy_ws(c);
    if (c->pos >= c->n || c->s[c->pos] != (uint8_t)ch) return npy_fail(c, what);
    c->pos++;
    return 0;
}

/* string: '...' or "..." without escapes (numpy never writes any). */
static int npy_string(npy_cursor *c, char *out, size_t outlen) {
    uint8_t q;
    size_t k = 0;
    npy_ws(c);
    if (c->pos >= c->n || (c->s[c->pos] != '\'' && c->s[c->pos] != '"')) return npy_fail(c, "a quoted string");
    q = c->s[c->pos++];
    while (c->pos < c->n && c->s[c->pos] != q) {
        if (c->s[c->pos] == '\\' || k + 1 >= outlen) return npy_fail(c, "a short string without escapes");
        out[k++] = (char)c->s[c->pos++];
    }
    if (c->pos >= c->n) return npy_fail(c, "a closing quote");
    c->pos++;
    out[k] = '\0';
    return 0;
}

/* True | False */
static int npy_bool(npy_cursor *c, int *v) {
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
static int npy_int(npy_cursor *c, int64_t *v) {
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
    if (c->pos == start) return npy_fail(c, "a non-negative integer dimension");
    if (c->pos < c->n && c->s[c->pos] == 'L') c->pos++;
    *v = x;
    return 0;
}

/* shape: '(' [int (',' int)* [',']] ')' */
static int npy_shape(npy_cursor *c, npy_header *h) {
    if (npy_expect(c, '(', "'(' starting the shape tuple") != 0) return -1;
    h->rank = 0;
    for (;;) {
        npy_ws(c);
        if (c->pos < c->n && c->s[c->pos] == ')') break;
        if (h->rank == NNC_MAX_RANK) return npy_fail(c, "at most 8 dimensions");
        if (npy_int(c, &h->dims[h->rank++]) != 0) return -1;
        npy_ws(c);
        if (c->pos < c->n && c->s[c->pos] == ',') c->pos++;
        else if (c->pos >= c->n || c->s[c->pos] != ')') return npy_fail(c, "',' or ')' in the shape tuple");
    }
    c->pos++;
    return 0;
}

/* One 'key': value entry of the header dict. */
static int npy_entry(npy_cursor *c, npy_header *h) {
    char key[32];
    size_t at;
    npy_ws(c);
    at = c->pos;
    if (npy_string(c, key, sizeof key) != 0 || npy_expect(c, ':', "':' after the key") != 0) return -1;
    npy_ws(c);
    if (strcmp(key, "descr") == 0 && !(h->seen & 1)) {
        h->seen |= 1;
        if (c->pos < c->n && c->s[c->pos] == '[') {
            data_err(c->err, c->errlen,
                     "%s: header: structured dtypes (a list descr) are not "
                     "supported",
                     c->name);
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
static int npy_dict(npy_cursor *c, npy_header *h) {
    if (npy_expect(c, '{', "'{' starting the header dict") != 0) return -1;
    for (;;) {
        npy_ws(c);
        if (c->pos < c->n && c->s[c->pos] == '}') break;
        if (npy_entry(c, h) != 0) return -1;
        npy_ws(c);
        if (c->pos < c->n && c->s[c->pos] == ',') c->pos++;
        else if (c->pos >= c->n || c->s[c->pos] != '}') return npy_fail(c, "',' or '}' in the header dict");
    }
    c->pos++;
    npy_ws(c);
    if (c->pos != c->n) return npy_fail(c, "only padding after the header dict");
    if (h->seen != 7) {
        data_err(c->err, c->errlen, "%s: header: missing key '%s'", c->name,
                 !(h->seen & 1)       ? "descr"
                     : !(h->seen & 2) ? "fortran_order"
                                      : "shape");
        return -1;
    }
    return 0;
}

/* Maps a descr like '<f4' to a dtype, with advice for the common misses. */
static int npy_dtype(const char *descr, const char *name, nnc_dtype *t, char *err, size_t errlen) {
    static const struct {
        const char *kind; /* descr without the byte-order character */
        nnc_dtype dtype;
    } map[] = {{"u1", NNC_DT_U8},  {"b1", NNC_DT_U8},  {"i1", NNC_DT_I8},  {"i2", NNC_DT_I16},
               {"i4", NNC_DT_I32}, {"i8", NNC_DT_I64}, {"f4", NNC_DT_F32}, {"f8", NNC_DT_F64}};
    char order = descr[0], shown[4 * DATA_EXCERPT_MAX + 48];
    size_t i;
    /* a descr numpy did not write can hold any byte but a quote: shown escaped, cut short */
    data_excerpt(shown, sizeof shown, descr, strlen(descr), DATA_EXCERPT_MAX, 1);
    if (strchr(descr, 'O')) {
        data_err(err, errlen, "%s: header: object arrays (%s) are not supported", name, shown);
        return -1;
    }
    for (i = 0; order != '\0' && i < sizeof map / sizeof map[0]; i++) {
        int one_byte = map[i].kind[1] == '1';
        if (strcmp(descr + 1, map[i].kind) != 0) continue;
        *t = map[i].dtype;
        if (order == '<' || (one_byte && strchr(">|=", order))) return 0;
        if (order == '>') {
            data_err(err, errlen,
                     "%s: header: big-endian dtype '%s' is not supported (save with "
                     "arr.astype('<%s'))",
                     name, descr, map[i].kind);
            return -1;
        }
        break;
    }
    data_err(err, errlen,
             "%s: header: dtype %s is not supported (expected one of <u1 |u1 <i1 "
             "<i2 <i4 <i8 <f4 <f8 |b1)",
             name, shown);
    return -1;
}

/* Fortran order is only a problem when two or more dims exceed 1. */
static int npy_layout_check(const npy_header *h, const char *name, char *err, size_t errlen) {
    int i, big = 0;
    for (i = 0; i < h->rank; i++) big += h->dims[i] > 1;
    if (h->fortran && big > 1) {
        data_err(err, errlen,
                 "%s: header: fortran_order arrays are not supported (save with "
                 "np.ascontiguousarray)",
                 name);
        return -1;
    }
    return 0;
}

/* Parses the fixed preamble: magic, version, header length (not that the header is there). */
static int npy_preamble(const uint8_t *b, size_t len, const char *name, size_t *hstart, size_t *hlen, char *err,
                        size_t errlen) {
    if (len < 10 || memcmp(b, "\x93NUMPY", 6) != 0) {
        if (len >= 6 && memcmp(b, "\x93NUMPY", 6) != 0)
            data_err(err, errlen,
                     "%s: offset 0: expected .npy magic \\x93NUMPY, got other bytes "
                     "(not a .npy file?)",
                     name);
        else
            data_err(err, errlen,
                     "%s: truncated: expected at least 10 bytes of .npy preamble, "
                     "found %zu",
                     name, len);
        return -1;
    }
    if ((b[6] != 1 && b[6] != 2 && b[6] != 3) || b[7] != 0) {
        data_err(err, errlen,
                 "%s: offset 6: expected .npy format version 1.0, 2.0 or 3.0, got "
                 "%u.%u",
                 name, b[6], b[7]);
        return -1;
    }
    *hstart = b[6] == 1 ? 10 : 12;
    if (len < *hstart) {
        data_err(err, errlen, "%s: truncated: expected a %zu-byte .npy preamble, found %zu", name, *hstart, len);
        return -1;
    }
    *hlen = b[6] == 1 ? (size_t)b[8] | (size_t)b[9] << 8
                      : (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
    if (*hlen > NPY_HEADER_MAX) {
        data_err(err, errlen,
                 "%s: offset 8: expected a header of at most %d bytes, the preamble "
                 "declares %zu",
                 name, NPY_HEADER_MAX, *hlen);
        return -1;
    }
    return 0;
}

/* Preamble + dict + dtype + layout: everything but the data. */
static int npy_header_parse(const uint8_t *b, size_t len, const char *name, npy_header *h, nnc_dtype *t,
                            size_t *data_off, char *err, size_t errlen) {
    size_t hstart, hlen;
    npy_cursor c;
    if (npy_preamble(b, len, name, &hstart, &hlen, err, errlen) != 0) return -1;
    if (hlen > len - hstart) {
        data_err(err, errlen,
                 "%s: truncated: header of %zu bytes at offset %zu needs %zu bytes, "
                 "found %zu",
                 name, hlen, hstart, hstart + hlen, len);
        return -1;
    }
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

/* The data bytes h declares; -1 with a message when they cannot be addressed. */
static int npy_data_bytes(const npy_header *h, nnc_dtype t, const char *name, size_t *bytes, char *err, size_t errlen) {
    char shape[160];
    if (data_dims_bytes(h->dims, h->rank, nnc_dtype_size(t), bytes) == 0) return 0;
    data_err(err, errlen, "%s: header: shape %s of '%s' is too large to address", name,
             data_dims_str(h->dims, h->rank, shape, sizeof shape), h->descr);
    return -1;
}

/* Checks that exactly `bytes` follow the header ending at `off`.  A file is read only one byte
 * past what its header declares, so the excess is reported as "more", not counted. */
static int npy_size_check(const npy_header *h, size_t off, size_t bytes, size_t len, const char *name, char *err,
                          size_t errlen) {
    char shape[160];
    data_dims_str(h->dims, h->rank, shape, sizeof shape);
    if (len - off < bytes) {
        data_err(err, errlen,
                 "%s: truncated: shape %s of '%s' needs %zu data bytes at offset %zu, "
                 "found %zu",
                 name, shape, h->descr, bytes, off, len - off);
        return -1;
    }
    if (len - off > bytes) {
        data_err(err, errlen,
                 "%s: offset %zu: expected the end of the file after shape %s of '%s' "
                 "(%zu data bytes at offset %zu), found more",
                 name, off + bytes, shape, h->descr, bytes, off);
        return -1;
    }
    return 0;
}

/* The header of a .npy held in memory, checked against exactly its data after it. */
static int npy_checked(const uint8_t *b, size_t len, const char *name, npy_header *h, nnc_dtype *t, size_t *off,
                       size_t *bytes, char *err, size_t errlen) {
    if (npy_header_parse(b, len, name, h, t, off, err, errlen) != 0 ||
        npy_data_bytes(h, *t, name, bytes, err, errlen) != 0 ||
        npy_size_check(h, *off, *bytes, len, name, err, errlen) != 0)
        return -1;
    return 0;
}

static int parse_npy(const void *buf, size_t len, const char *name, nnc_array *out, int finite, char *err,
                     size_t errlen);

int nnc_parse_npy(const void *buf, size_t len, const char *name, nnc_array *out, char *err, size_t errlen) {
    return parse_npy(buf, len, name, out, 1, err, errlen);
}

/* finite: refuse NaN and Inf (training data); 0 reads the values as they are. */
static int parse_npy(const void *buf, size_t len, const char *name, nnc_array *out, int finite, char *err,
                     size_t errlen) {
    const uint8_t *b = buf;
    npy_header h;
    nnc_dtype t;
    size_t off, bytes, esize;
    data_array_clear(out);
    name = data_name(name);
    if (npy_checked(b, len, name, &h, &t, &off, &bytes, err, errlen) != 0) return -1;
    esize = nnc_dtype_size(t);
    if (data_array_alloc(out, t, h.rank, h.dims, bytes, name, err, errlen) != 0) return -1;
    data_elems_copy(out->data, b + off, bytes / esize, esize, 0);
    if (finite && data_array_finite_check(out, name, off, err, errlen) != 0) {
        nnc_array_free(out);
        return -1;
    }
    return 0;
}

/* Reads the preamble and the header it declares into h. */
static int npy_file_header(data_file *f, uint8_t **buf, size_t *len, size_t *cap, npy_header *h, nnc_dtype *t,
                           size_t *off, char *err, size_t errlen) {
    size_t hstart, hlen;
    if (data_file_read_upto(f, buf, len, cap, 12, err, errlen) != 0 ||
        npy_preamble(*buf, *len, f->path, &hstart, &hlen, err, errlen) != 0 ||
        data_file_read_upto(f, buf, len, cap, hstart + hlen, err, errlen) != 0)
        return -1;
    return npy_header_parse(*buf, *len, f->path, h, t, off, err, errlen);
}

/* Reads the preamble, then the header it declares, then at most one byte more than the data
 * the header declares: a .gz whose stream runs on past its shape (a gzip bomb) is refused
 * after that byte, not after inflating the rest. */
static int npy_file_read(data_file *f, uint8_t **buf, size_t *len, char *err, size_t errlen) {
    npy_header h;
    nnc_dtype t;
    size_t cap = 0, off, bytes, want;
    if (npy_file_header(f, buf, len, &cap, &h, &t, &off, err, errlen) != 0 ||
        npy_data_bytes(&h, t, f->path, &bytes, err, errlen) != 0)
        return -1;
    if (!f->direct && bytes > DATA_GZ_LIMIT) {
        data_err(err, errlen,
                 "%s: header claims %zu data bytes; refusing more than 4 GiB from a "
                 "gzip file",
                 f->path, bytes);
        return -1;
    }
    want = bytes > SIZE_MAX - off - 1 ? SIZE_MAX : off + bytes + 1;
    return data_file_read_upto(f, buf, len, &cap, want, err, errlen);
}

/* Turns the file image buf into out's data in place, or frees it (one copy of the data in
 * memory, not two). */
static int npy_adopt(uint8_t *buf, size_t len, const char *name, nnc_array *out, int finite, char *err, size_t errlen) {
    npy_header h;
    nnc_dtype t;
    size_t off, bytes;
    if (npy_checked(buf, len, name, &h, &t, &off, &bytes, err, errlen) != 0) {
        free(buf);
        return -1;
    }
    out->data = data_buf_adopt(buf, off, bytes, nnc_dtype_size(t), 0);
    out->dtype = t;
    out->rank = h.rank;
    memcpy(out->dims, h.dims, sizeof h.dims);
    if (finite && data_array_finite_check(out, name, off, err, errlen) != 0) {
        nnc_array_free(out);
        return -1;
    }
    return 0;
}

static int load_npy(const char *path, nnc_array *out, int finite, char *err, size_t errlen) {
    data_file f;
    uint8_t *buf = NULL;
    size_t len = 0;
    int rc;
    data_array_clear(out);
    if (data_file_open(&f, path, err, errlen) != 0) return -1;
    rc = npy_file_read(&f, &buf, &len, err, errlen);
    rc = data_file_close(&f, rc, err, errlen);
    if (rc == 0) return npy_adopt(buf, len, path, out, finite, err, errlen); /* takes buf */
    free(buf);
    return rc;
}

int nnc_load_npy_header(const char *path, nnc_array *out, char *err, size_t errlen) {
    data_file f;
    npy_header h;
    nnc_dtype t;
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0, off, bytes;
    int rc;
    data_array_clear(out);
    if (data_file_open_buffered(&f, path, 8192, err, errlen) != 0) return -1;
    rc = npy_file_header(&f, &buf, &len, &cap, &h, &t, &off, err, errlen);
    if (rc == 0) rc = npy_data_bytes(&h, t, path, &bytes, err, errlen); /* the size must be addressable */
    rc = data_file_close(&f, rc, err, errlen);
    free(buf);
    if (rc != 0) return -1;
    out->dtype = t;
    out->rank = h.rank;
    memcpy(out->dims, h.dims, sizeof h.dims);
    return 0;
}

int nnc_load_npy(const char *path, nnc_array *out, char *err, size_t errlen) {
    return load_npy(path, out, 1, err, errlen);
}

int nnc_load_npy_values(const char *path, nnc_array *out, char *err, size_t errlen) {
    return load_npy(path, out, 0, err, errlen);
}
