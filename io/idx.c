/* idx.c - the IDX reader (MNIST's format), plain or gzip'd; see data.h. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data_impl.h"

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

static int idx_dtype(uint8_t code, nnc_dtype *t) {
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
static int idx_prefix_parse(const uint8_t *b, size_t len, const char *name, idx_header *h, char *err, size_t errlen) {
    if (len < 4) {
        data_err(err, errlen, "%s: truncated: expected a 4-byte IDX header, found %zu bytes", name, len);
        return -1;
    }
    if (b[0] != 0 || b[1] != 0) {
        data_err(err, errlen, "%s: offset 0: expected IDX magic 0x00 0x00, got 0x%02X 0x%02X", name, b[0], b[1]);
        return -1;
    }
    if (idx_dtype(b[2], &h->dtype) != 0) {
        data_err(err, errlen, "%s: offset 2: expected IDX type code 0x08..0x0E, got 0x%02X%s", name, b[2],
                 b[2] == 0x0A ? " (0x0A is unassigned)" : "");
        return -1;
    }
    if (b[3] < 1 || b[3] > NNC_MAX_RANK) {
        data_err(err, errlen, "%s: offset 3: expected 1..%d dimensions, got %u", name, NNC_MAX_RANK, b[3]);
        return -1;
    }
    h->rank = b[3];
    h->hdr_bytes = 4 + 4 * (size_t)h->rank;
    return 0;
}

static int idx_header_parse(const uint8_t *b, size_t len, const char *name, idx_header *h, char *err, size_t errlen) {
    char shape[160];
    int i;
    if (idx_prefix_parse(b, len, name, h, err, errlen) != 0) return -1;
    if (len < h->hdr_bytes) {
        data_err(err, errlen, "%s: truncated: a %d-dimensional IDX header needs %zu bytes, found %zu", name, h->rank,
                 h->hdr_bytes, len);
        return -1;
    }
    for (i = 0; i < h->rank; i++) {
        const uint8_t *p = b + 4 + 4 * i;
        h->dims[i] = (int64_t)((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3]);
    }
    if (data_dims_bytes(h->dims, h->rank, nnc_dtype_size(h->dtype), &h->data_bytes) != 0) {
        data_err(err, errlen, "%s: header: shape %s of %s is too large to address", name,
                 data_dims_str(h->dims, h->rank, shape, sizeof shape), nnc_dtype_name(h->dtype));
        return -1;
    }
    return 0;
}

/* Checks that exactly h->data_bytes follow the header. */
static int idx_size_check(const idx_header *h, size_t len, const char *name, char *err, size_t errlen) {
    char shape[160];
    size_t avail = len - h->hdr_bytes;
    data_dims_str(h->dims, h->rank, shape, sizeof shape);
    if (avail < h->data_bytes) {
        data_err(err, errlen,
                 "%s: truncated: shape %s of %s needs %zu data bytes after the %zu-byte header, "
                 "found %zu",
                 name, shape, nnc_dtype_name(h->dtype), h->data_bytes, h->hdr_bytes, avail);
        return -1;
    }
    if (avail > h->data_bytes) { /* a file is read one byte past its shape: "more", not a count */
        data_err(err, errlen,
                 "%s: offset %zu: expected the end of the file after shape %s of %s (%zu data "
                 "bytes after the %zu-byte header), found more",
                 name, h->hdr_bytes + h->data_bytes, shape, nnc_dtype_name(h->dtype), h->data_bytes, h->hdr_bytes);
        return -1;
    }
    return 0;
}

/* The header of an IDX held in memory, checked against exactly its data bytes after it; out
 * cleared, *name the name messages use. */
static int idx_checked(const uint8_t *b, size_t len, const char **name, nnc_array *out, idx_header *h, char *err,
                       size_t errlen) {
    data_array_clear(out);
    *name = data_name(*name);
    if (idx_header_parse(b, len, *name, h, err, errlen) != 0 || idx_size_check(h, len, *name, err, errlen) != 0)
        return -1;
    return 0;
}

int nnc_view_idx_u8(const void *buf, size_t len, const char *name, nnc_array *out, char *err, size_t errlen) {
    const uint8_t *b = buf;
    idx_header h;
    if (idx_checked(b, len, &name, out, &h, err, errlen) != 0) return -1;
    if (h.dtype != NNC_DT_U8) {
        data_err(err, errlen, "%s: expected 8-bit samples, found %s", name, nnc_dtype_name(h.dtype));
        return -1;
    }
    out->dtype = h.dtype;
    out->rank = h.rank;
    for (int i = 0; i < h.rank; i++) out->dims[i] = h.dims[i];
    out->data = (void *)(uintptr_t)(b + h.hdr_bytes);
    return 0;
}

int nnc_parse_idx(const void *buf, size_t len, const char *name, nnc_array *out, char *err, size_t errlen) {
    const uint8_t *b = buf;
    idx_header h;
    if (idx_checked(b, len, &name, out, &h, err, errlen) != 0) return -1;
    if (data_array_alloc(out, h.dtype, h.rank, h.dims, h.data_bytes, name, err, errlen) != 0) return -1;
    data_elems_copy(out->data, b + h.hdr_bytes, h.data_bytes / nnc_dtype_size(h.dtype), nnc_dtype_size(h.dtype), 1);
    if (data_array_finite_check(out, name, h.hdr_bytes, err, errlen) != 0) {
        nnc_array_free(out);
        return -1;
    }
    return 0;
}

/* Reads just enough of f to parse the header into h. */
static int idx_file_header(data_file *f, uint8_t **buf, size_t *len, size_t *cap, idx_header *h, char *err,
                           size_t errlen) {
    if (data_file_read_upto(f, buf, len, cap, 4, err, errlen) != 0) return -1;
    if (!f->shown && *len >= 2 && ((*buf)[0] != 0 || (*buf)[1] != 0)) { /* see data_excerpt */
        data_err(err, errlen,
                 "%s: offset 0: expected IDX magic 0x00 0x00, got other bytes (not "
                 "shown: others cannot read the file)",
                 f->path);
        return -1;
    }
    if (*len == 4 && data_file_read_upto(f, buf, len, cap, 4 + 4 * (size_t)(*buf)[3], err, errlen)) return -1;
    return idx_header_parse(*buf, *len, f->path, h, err, errlen);
}

/* Reads the header, then at most one byte more than it says the file holds (so trailing junk
 * is still noticed, and a .gz that runs on is refused at that byte). */
static int idx_file_read(data_file *f, uint8_t **buf, size_t *len, char *err, size_t errlen) {
    idx_header h;
    size_t cap = 0, want;
    if (idx_file_header(f, buf, len, &cap, &h, err, errlen) != 0) return -1;
    if (!f->direct && h.data_bytes > DATA_GZ_LIMIT) {
        data_err(err, errlen,
                 "%s: header claims %zu data bytes; refusing more than 4 GiB from a "
                 "gzip file",
                 f->path, h.data_bytes);
        return -1;
    }
    want = h.data_bytes > SIZE_MAX - h.hdr_bytes - 1 ? SIZE_MAX : h.hdr_bytes + h.data_bytes + 1;
    return data_file_read_upto(f, buf, len, &cap, want, err, errlen);
}

/* Turns the file image buf (header + data) into out's data in place, or frees it. */
static int idx_adopt(uint8_t *buf, size_t len, const char *name, nnc_array *out, char *err, size_t errlen) {
    idx_header h;
    if (idx_header_parse(buf, len, name, &h, err, errlen) != 0 || idx_size_check(&h, len, name, err, errlen) != 0) {
        free(buf);
        return -1;
    }
    out->data = data_buf_adopt(buf, h.hdr_bytes, h.data_bytes, nnc_dtype_size(h.dtype), 1);
    out->dtype = h.dtype;
    out->rank = h.rank;
    memcpy(out->dims, h.dims, (size_t)h.rank * sizeof h.dims[0]);
    if (data_array_finite_check(out, name, h.hdr_bytes, err, errlen) != 0) {
        nnc_array_free(out);
        return -1;
    }
    return 0;
}

int nnc_load_idx(const char *path, nnc_array *out, char *err, size_t errlen) {
    data_file f;
    uint8_t *buf = NULL;
    size_t len = 0;
    int rc;
    data_array_clear(out);
    if (data_file_open(&f, path, err, errlen) != 0) return -1;
    rc = idx_file_read(&f, &buf, &len, err, errlen);
    rc = data_file_close(&f, rc, err, errlen);
    if (rc == 0) return idx_adopt(buf, len, path, out, err, errlen); /* takes buf */
    free(buf);
    return rc;
}

int nnc_load_idx_header(const char *path, nnc_array *out, char *err, size_t errlen) {
    data_file f;
    idx_header h;
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0;
    int rc;
    data_array_clear(out);
    if (data_file_open_buffered(&f, path, 8192, err, errlen) != 0) return -1;
    rc = data_file_close(&f, idx_file_header(&f, &buf, &len, &cap, &h, err, errlen), err, errlen);
    free(buf);
    if (rc != 0) return -1;
    out->dtype = h.dtype;
    out->rank = h.rank;
    memcpy(out->dims, h.dims, (size_t)h.rank * sizeof h.dims[0]);
    return 0;
}
