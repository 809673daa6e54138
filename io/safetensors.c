/*
 * safetensors.c - safetensors checkpoints (see safetensors.h).
 *
 * Loading is three steps: a strict little JSON parser (json.c) turns the
 * header into a tree (only strings, numbers, arrays and objects, nested at
 * most JSON_DEPTH_MAX deep: the header needs three levels and anything else
 * is not a safetensors header); the tree is checked against the schema (known
 * dtype, shape product * element size == end - begin, offsets inside the
 * data section, no two tensors overlapping) with every multiplication
 * overflow-checked; then the crc32 recorded by nnc_st_save is compared
 * with the data.  Only then are tensors handed out.  Every message names the
 * file and, for the header, the byte offset or the tensor.
 *
 * Saving writes the data grouped by element size, largest first, so each
 * tensor starts at a multiple of its element size (the header is padded to
 * a multiple of 8) and the loader can point straight into the file buffer.
 * The data section stays contiguous with no gaps, which the reference
 * implementation requires.  The file is written beside the target, fsynced,
 * and renamed over it (atomic_file.c): rename is atomic, so readers see the
 * old or the new checkpoint, never half of one.
 */
#define _XOPEN_SOURCE 700 /* fileno, fstat under -std=c11 */

#include "safetensors.h"
#include "atomic_file.h"
#include "data_impl.h" /* data_err, data_excerpt */
#include "json.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors stores little-endian data; big-endian hosts are not supported"
#endif

#define ST_HEADER_MAX ((uint64_t)100 * 1000 * 1000) /* as the reference reader */
#define ST_CRC_KEY "nnc_crc32"
/* crc32 of the other metadata, so that an edited or corrupted step, epoch or position is
 * caught like a flipped weight: over "key\0value\0" of every entry but the two checksums,
 * in strcmp order of the keys (so a writer that reorders the dict does not break it). */
#define ST_META_CRC_KEY "nnc_meta_crc32"

/* ---- errors ------------------------------------------------------------- */

/* A tensor name, key or value from a file's header as messages show it: decoded JSON may hold
 * any byte but NUL (a "\u001b" is a terminal escape), so escaped and cut short (data_excerpt),
 * quotes included.  buf is ST_Q_LEN bytes. */
#define ST_Q_MAX 64
#define ST_Q_LEN (4 * ST_Q_MAX + 48)
static const char *st_q(char *buf, const char *s) { return data_excerpt(buf, ST_Q_LEN, s, strlen(s), ST_Q_MAX, 1); }

static const struct {
    const char *name; /* safetensors dtype string */
    nnc_dtype dtype;
} st_dtypes[] = {
    {"U8", NNC_DT_U8},   {"I8", NNC_DT_I8},   {"I16", NNC_DT_I16}, {"I32", NNC_DT_I32},
    {"I64", NNC_DT_I64}, {"F32", NNC_DT_F32}, {"F64", NNC_DT_F64}, {"BF16", NNC_DT_BF16},
    {"F16", NNC_DT_F16}, {"BOOL", NNC_DT_U8}, /* read-only alias: numpy/torch bools are one byte 0/1 */
};

static const char *st_dtype_name(nnc_dtype t) {
    size_t i;
    for (i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (st_dtypes[i].dtype == t) return st_dtypes[i].name;
    return NULL;
}

static int st_dtype_parse(const char *s, nnc_dtype *t) {
    size_t i;
    for (i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++) {
        if (strcmp(st_dtypes[i].name, s) == 0) {
            *t = st_dtypes[i].dtype;
            return 0;
        }
    }
    return -1;
}

/* ---- the file object ------------------------------------------------------ */

struct nnc_st_file {
    int n;                  /* tensors, in header order */
    nnc_st_tensor *tensors; /* names and data owned by this struct */
    int nmeta;
    nnc_st_meta *meta; /* keys and values owned */
    void *block;       /* holds every tensor's data */
    const char *name;  /* for messages while building; not owned */
};

void nnc_st_close(nnc_st_file *f) {
    int i;
    if (!f) return;
    for (i = 0; i < f->n; i++) free((char *)f->tensors[i].name);
    for (i = 0; i < f->nmeta; i++) {
        free((char *)f->meta[i].key);
        free((char *)f->meta[i].value);
    }
    free(f->tensors);
    free(f->meta);
    free(f->block);
    free(f);
}

int nnc_st_count(const nnc_st_file *f) { return f ? f->n : 0; }

const nnc_st_tensor *nnc_st_get(const nnc_st_file *f, int i) { return f && i >= 0 && i < f->n ? &f->tensors[i] : NULL; }

const nnc_st_tensor *nnc_st_find(const nnc_st_file *f, const char *name) {
    int i;
    for (i = 0; f && name && i < f->n; i++)
        if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

const char *nnc_st_meta_get(const nnc_st_file *f, const char *key) {
    int i;
    for (i = 0; f && key && i < f->nmeta; i++)
        if (strcmp(f->meta[i].key, key) == 0) return f->meta[i].value;
    return NULL;
}

/* ---- schema ---------------------------------------------------------------- */

typedef struct {
    uint64_t begin, end; /* data_offsets */
    int index;           /* into f->tensors */
} st_span;

/* A JSON number that must be an integer in [0, INT64_MAX]. */
static int st_uint(const json_value *v, int64_t *out) {
    const char *s = v->str;
    int64_t x = 0;
    if (v->kind != JSON_NUMBER || *s == '\0') return -1;
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || x > (INT64_MAX - (*s - '0')) / 10) return -1;
        x = x * 10 + (*s - '0');
    }
    *out = x;
    return 0;
}

/* __metadata__: an object of string -> string. */
static int st_meta_build(nnc_st_file *f, json_value *m, char *err, size_t errlen) {
    size_t i;
    if (m->kind != JSON_OBJECT) {
        data_err(err, errlen, "%s: offset %zu: header: __metadata__ must be an object of strings", f->name, m->offset);
        return -1;
    }
    f->meta = calloc(m->n ? m->n : 1, sizeof *f->meta);
    if (!f->meta) {
        data_err(err, errlen, "%s: out of memory", f->name);
        return -1;
    }
    for (i = 0; i < m->n; i++) {
        if (m->items[i].kind != JSON_STRING) {
            char q[ST_Q_LEN];
            data_err(err, errlen,
                     "%s: offset %zu: header: __metadata__ value for %s must be a "
                     "string",
                     f->name, m->items[i].offset, st_q(q, m->keys[i]));
            return -1;
        }
        f->meta[i].key = m->keys[i]; /* steal the strings from the tree */
        f->meta[i].value = m->items[i].str;
        m->keys[i] = NULL;
        m->items[i].str = NULL;
        f->nmeta++;
    }
    return 0;
}

static const json_value *st_field(const json_value *e, const char *key) {
    size_t i;
    for (i = 0; i < e->n; i++)
        if (strcmp(e->keys[i], key) == 0) return &e->items[i];
    return NULL;
}

/* Entry must have exactly dtype, shape and data_offsets. */
static int st_entry_keys(const nnc_st_file *f, const char *tname, const json_value *e, char *err, size_t errlen) {
    size_t i, j;
    char q[ST_Q_LEN], q2[ST_Q_LEN];
    if (e->kind != JSON_OBJECT) {
        data_err(err, errlen, "%s: offset %zu: tensor %s: expected an object", f->name, e->offset, st_q(q, tname));
        return -1;
    }
    for (i = 0; i < e->n; i++) {
        int known = !strcmp(e->keys[i], "dtype") || !strcmp(e->keys[i], "shape") || !strcmp(e->keys[i], "data_offsets");
        for (j = 0; known && j < i; j++) known = strcmp(e->keys[i], e->keys[j]) != 0;
        if (!known) {
            data_err(err, errlen, "%s: offset %zu: tensor %s: unexpected or repeated key %s", f->name,
                     e->items[i].offset, st_q(q, tname), st_q(q2, e->keys[i]));
            return -1;
        }
    }
    if (e->n != 3) {
        data_err(err, errlen,
                 "%s: offset %zu: tensor %s: expected keys dtype, shape and "
                 "data_offsets",
                 f->name, e->offset, st_q(q, tname));
        return -1;
    }
    return 0;
}

static int st_entry_dtype(const nnc_st_file *f, nnc_st_tensor *t, const json_value *d, char *err, size_t errlen) {
    char q[ST_Q_LEN], q2[ST_Q_LEN];
    if (d->kind != JSON_STRING || st_dtype_parse(d->str, &t->dtype) != 0) {
        data_err(err, errlen,
                 "%s: offset %zu: tensor %s: dtype %s is not supported "
                 "(expected U8 I8 I16 I32 I64 F32 F64)",
                 f->name, d->offset, st_q(q, t->name), d->kind == JSON_STRING ? st_q(q2, d->str) : "(not a string)");
        return -1;
    }
    return 0;
}

static int st_entry_shape(const nnc_st_file *f, nnc_st_tensor *t, const json_value *s, char *err, size_t errlen) {
    size_t i;
    char q[ST_Q_LEN];
    if (s->kind != JSON_ARRAY || s->n > NNC_MAX_RANK) {
        data_err(err, errlen,
                 "%s: offset %zu: tensor %s: shape must be an array of at most %d "
                 "dimensions",
                 f->name, s->offset, st_q(q, t->name), NNC_MAX_RANK);
        return -1;
    }
    for (i = 0; i < s->n; i++) {
        if (st_uint(&s->items[i], &t->dims[i]) != 0) {
            data_err(err, errlen,
                     "%s: offset %zu: tensor %s: shape[%zu] is not an integer in "
                     "0..2^63-1",
                     f->name, s->items[i].offset, st_q(q, t->name), i);
            return -1;
        }
    }
    t->rank = (int)s->n;
    return 0;
}

/* "[2, 3]" into buf, for messages. */
static const char *st_dims_str(const nnc_st_tensor *t, char *buf, size_t n) {
    size_t used = 0;
    int i;
    buf[0] = '\0';
    for (i = 0; i < t->rank && used < n; i++) {
        int k = snprintf(buf + used, n - used, "%s%lld", i ? ", " : "[", (long long)t->dims[i]);
        if (k < 0) break;
        used += (size_t)k;
    }
    if (used < n) snprintf(buf + used, n - used, "%s", t->rank ? "]" : "[]");
    return buf;
}

/* Byte size implied by dtype and shape; -1 on overflow. */
static int st_tensor_bytes(const nnc_st_tensor *t, uint64_t *bytes) {
    uint64_t b = nnc_dtype_size(t->dtype);
    int i;
    for (i = 0; i < t->rank; i++) {
        if (t->dims[i] < 0 || (t->dims[i] != 0 && b > UINT64_MAX / (uint64_t)t->dims[i])) return -1;
        b *= (uint64_t)t->dims[i];
    }
    *bytes = b;
    return 0;
}

static int st_entry_offsets(const nnc_st_file *f, const nnc_st_tensor *t, const json_value *o, uint64_t data_len,
                            st_span *sp, char *err, size_t errlen) {
    int64_t b, e;
    uint64_t bytes;
    char q[ST_Q_LEN];
    if (o->kind != JSON_ARRAY || o->n != 2 || st_uint(&o->items[0], &b) != 0 || st_uint(&o->items[1], &e) != 0 ||
        b > e) {
        data_err(err, errlen,
                 "%s: offset %zu: tensor %s: data_offsets must be [begin, end] with "
                 "0 <= begin <= end",
                 f->name, o->offset, st_q(q, t->name));
        return -1;
    }
    if (st_tensor_bytes(t, &bytes) != 0 || bytes != (uint64_t)(e - b)) {
        char shape[160], need[32];
        if (st_tensor_bytes(t, &bytes) != 0) snprintf(need, sizeof need, "more than 2^64");
        else snprintf(need, sizeof need, "%llu", (unsigned long long)bytes);
        data_err(err, errlen,
                 "%s: tensor %s: shape %s of %s needs %s bytes, but data_offsets "
                 "[%lld, %lld] hold %lld",
                 f->name, st_q(q, t->name), st_dims_str(t, shape, sizeof shape), st_dtype_name(t->dtype), need,
                 (long long)b, (long long)e, (long long)(e - b));
        return -1;
    }
    if ((uint64_t)e > data_len) {
        data_err(err, errlen,
                 "%s: tensor %s: data_offsets [%lld, %lld] run past the end of the "
                 "%llu-byte data section (file truncated?)",
                 f->name, st_q(q, t->name), (long long)b, (long long)e, (unsigned long long)data_len);
        return -1;
    }
    sp->begin = (uint64_t)b;
    sp->end = (uint64_t)e;
    return 0;
}

/* One tensor entry: takes the name from the tree and fills t and sp. */
static int st_entry_build(nnc_st_file *f, char **key, const json_value *e, uint64_t data_len, st_span *sp, char *err,
                          size_t errlen) {
    nnc_st_tensor *t = &f->tensors[f->n];
    memset(t, 0, sizeof *t);
    if (st_entry_keys(f, *key, e, err, errlen) != 0) return -1;
    t->name = *key;
    *key = NULL;
    sp->index = f->n++;
    if (st_entry_dtype(f, t, st_field(e, "dtype"), err, errlen) != 0 ||
        st_entry_shape(f, t, st_field(e, "shape"), err, errlen) != 0 ||
        st_entry_offsets(f, t, st_field(e, "data_offsets"), data_len, sp, err, errlen) != 0)
        return -1;
    return 0;
}

static int st_span_cmp(const void *a, const void *b) {
    const st_span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static int st_name_cmp(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* No two tensors may share bytes or a name. */
static int st_disjoint_check(const nnc_st_file *f, st_span *sp, char *err, size_t errlen) {
    const char **names;
    char q[ST_Q_LEN], q2[ST_Q_LEN];
    int i, rc = 0;
    qsort(sp, (size_t)f->n, sizeof *sp, st_span_cmp);
    for (i = 1; i < f->n && rc == 0; i++) {
        if (sp[i].begin < sp[i - 1].end) {
            data_err(err, errlen, "%s: tensors %s and %s overlap in the data section", f->name,
                     st_q(q, f->tensors[sp[i - 1].index].name), st_q(q2, f->tensors[sp[i].index].name));
            rc = -1;
        }
    }
    names = malloc((f->n ? (size_t)f->n : 1) * sizeof *names);
    if (!names) {
        data_err(err, errlen, "%s: out of memory", f->name);
        return -1;
    }
    for (i = 0; i < f->n; i++) names[i] = f->tensors[i].name;
    qsort(names, (size_t)f->n, sizeof *names, st_name_cmp);
    for (i = 1; i < f->n && rc == 0; i++) {
        if (strcmp(names[i], names[i - 1]) == 0) {
            data_err(err, errlen, "%s: tensor name %s appears twice", f->name, st_q(q, names[i]));
            rc = -1;
        }
    }
    free(names);
    return rc;
}

/* Builds f's tensors and metadata from the header tree; *spans gets each
 * tensor's data_offsets (indexed by sp->index after the sort). */
static int st_schema_build(nnc_st_file *f, json_value *root, uint64_t data_len, st_span **spans, char *err,
                           size_t errlen) {
    size_t i;
    f->tensors = calloc(root->n ? root->n : 1, sizeof *f->tensors);
    *spans = calloc(root->n ? root->n : 1, sizeof **spans);
    if (!f->tensors || !*spans) {
        data_err(err, errlen, "%s: out of memory", f->name);
        return -1;
    }
    for (i = 0; i < root->n; i++) {
        int rc;
        if (strcmp(root->keys[i], "__metadata__") == 0)
            rc = f->meta ? -2 : st_meta_build(f, &root->items[i], err, errlen);
        else rc = st_entry_build(f, &root->keys[i], &root->items[i], data_len, &(*spans)[f->n], err, errlen);
        if (rc == -2)
            data_err(err, errlen, "%s: offset %zu: header: __metadata__ appears twice", f->name, root->items[i].offset);
        if (rc != 0) return -1;
    }
    return st_disjoint_check(f, *spans, err, errlen);
}

/* ---- data ------------------------------------------------------------------- */

static uint32_t st_crc(const unsigned char *p, uint64_t n) {
    uLong crc = crc32(0L, Z_NULL, 0);
    while (n > 0) { /* crc32 takes a uInt length */
        uInt k = n > UINT_MAX ? UINT_MAX : (uInt)n;
        crc = crc32(crc, p, k);
        p += k;
        n -= k;
    }
    return (uint32_t)crc;
}

static int st_meta_key_cmp(const void *a, const void *b) {
    return strcmp((*(const nnc_st_meta *const *)a)->key, (*(const nnc_st_meta *const *)b)->key);
}

static int st_meta_is_crc(const char *key) { return strcmp(key, ST_CRC_KEY) == 0 || strcmp(key, ST_META_CRC_KEY) == 0; }

/* The ST_META_CRC_KEY checksum of meta[0..n); -1 when out of memory. */
static int st_meta_crc(const nnc_st_meta *meta, int n, uint32_t *out) {
    const nnc_st_meta **v = malloc((n > 0 ? (size_t)n : 1) * sizeof *v);
    uLong crc = crc32(0L, Z_NULL, 0);
    int i, k = 0;
    if (!v) return -1;
    for (i = 0; i < n; i++)
        if (!st_meta_is_crc(meta[i].key)) v[k++] = &meta[i];
    qsort(v, (size_t)k, sizeof *v, st_meta_key_cmp);
    for (i = 0; i < k; i++) {
        crc = crc32(crc, (const Bytef *)v[i]->key, (uInt)strlen(v[i]->key) + 1);
        crc = crc32(crc, (const Bytef *)v[i]->value, (uInt)strlen(v[i]->value) + 1);
    }
    free(v);
    *out = (uint32_t)crc;
    return 0;
}

/* Compares the metadata with nnc_meta_crc32, when the writer recorded one. */
static int st_meta_crc_check(const nnc_st_file *f, char *err, size_t errlen) {
    const char *want = nnc_st_meta_get(f, ST_META_CRC_KEY);
    char have[16];
    uint32_t crc;
    if (!want) return 0;
    if (st_meta_crc(f->meta, f->nmeta, &crc) != 0) {
        data_err(err, errlen, "%s: out of memory", f->name);
        return -1;
    }
    snprintf(have, sizeof have, "%08x", (unsigned)crc);
    if (strcmp(have, want) != 0) {
        char q[ST_Q_LEN];
        data_err(err, errlen,
                 "%s: metadata checksum mismatch: header says %s, metadata has '%s' "
                 "(file edited or corrupted?)",
                 f->name, st_q(q, want), have);
        return -1;
    }
    return 0;
}

/* Compares the data with metadata nnc_crc32, when the writer recorded one. */
static int st_crc_check(const nnc_st_file *f, const unsigned char *data, uint64_t len, char *err, size_t errlen) {
    const char *want = nnc_st_meta_get(f, ST_CRC_KEY);
    char have[9];
    size_t i;
    if (!want) return 0;
    for (i = 0; i < 8; i++)
        if (!((want[i] >= '0' && want[i] <= '9') || (want[i] >= 'a' && want[i] <= 'f'))) break;
    if (i != 8 || want[8] != '\0') {
        char q[ST_Q_LEN];
        data_err(err, errlen, "%s: metadata %s is %s, expected 8 lowercase hex digits", f->name, ST_CRC_KEY,
                 st_q(q, want));
        return -1;
    }
    snprintf(have, sizeof have, "%08x", (unsigned)st_crc(data, len));
    if (strcmp(have, want) != 0) {
        data_err(err, errlen, "%s: checksum mismatch: header says %s, data has %s (file corrupted?)", f->name, want,
                 have);
        return -1;
    }
    return 0;
}

/* Points every tensor at its data.  If the caller's buffer is ours to keep
 * (owned) and every tensor is aligned to its element size in it, use it in
 * place; otherwise copy each tensor to a 16-byte-aligned slot of a new block. */
static int st_data_place(nnc_st_file *f, const st_span *sp, unsigned char *buf, size_t data_off, int owned, char *err,
                         size_t errlen) {
    size_t total = 0, at = 0;
    int i, aligned = owned;
    for (i = 0; i < f->n; i++) {
        size_t esize = nnc_dtype_size(f->tensors[sp[i].index].dtype);
        aligned = aligned && (data_off + sp[i].begin) % esize == 0;
        total += ((size_t)(sp[i].end - sp[i].begin) + 15) & ~(size_t)15;
    }
    if (aligned) {
        f->block = buf;
        for (i = 0; i < f->n; i++) f->tensors[sp[i].index].data = buf + data_off + sp[i].begin;
        return 0;
    }
    f->block = malloc(total ? total : 1);
    if (!f->block) {
        data_err(err, errlen, "%s: out of memory copying %zu bytes of tensor data", f->name, total);
        return -1;
    }
    for (i = 0; i < f->n; i++) {
        size_t bytes = (size_t)(sp[i].end - sp[i].begin);
        memcpy((unsigned char *)f->block + at, buf + data_off + sp[i].begin, bytes);
        f->tensors[sp[i].index].data = (unsigned char *)f->block + at;
        at += (bytes + 15) & ~(size_t)15;
    }
    if (owned) free(buf);
    return 0;
}

/* The 8-byte length and its bounds; *hlen is checked to fit in len. */
static int st_header_len(const unsigned char *b, size_t len, const char *name, size_t *hlen, char *err, size_t errlen) {
    uint64_t n = 0;
    int i;
    if (len < 8) {
        data_err(err, errlen, "%s: truncated: expected an 8-byte header length, found %zu bytes", name, len);
        return -1;
    }
    for (i = 7; i >= 0; i--) n = n << 8 | b[i];
    if (n > ST_HEADER_MAX) {
        data_err(err, errlen,
                 "%s: header length %llu exceeds the 100 MB limit (not a safetensors "
                 "file?)",
                 name, (unsigned long long)n);
        return -1;
    }
    if (n > len - 8) {
        data_err(err, errlen, "%s: truncated: header length is %llu but only %zu bytes follow it", name,
                 (unsigned long long)n, len - 8);
        return -1;
    }
    *hlen = (size_t)n;
    return 0;
}

/* Parses buf; takes ownership of buf when `owned` (freeing it on failure). */
static nnc_st_file *st_parse_impl(unsigned char *buf, size_t len, const char *name, int owned, char *err,
                                  size_t errlen) {
    nnc_st_file *f = calloc(1, sizeof *f);
    json_value root;
    json_parser p;
    st_span *spans = NULL;
    size_t hlen = 0;
    int rc = -1;
    memset(&root, 0, sizeof root);
    if (!f) data_err(err, errlen, "%s: out of memory", name);
    else if (st_header_len(buf, len, name, &hlen, err, errlen) == 0) {
        json_parser init = {buf + 8, hlen, 0, 8, name, err, errlen};
        p = init;
        f->name = name;
        if (json_header_parse(&p, &root) == 0 && st_schema_build(f, &root, len - 8 - hlen, &spans, err, errlen) == 0 &&
            st_crc_check(f, buf + 8 + hlen, len - 8 - hlen, err, errlen) == 0 && st_meta_crc_check(f, err, errlen) == 0)
            rc = st_data_place(f, spans, buf, 8 + hlen, owned, err, errlen);
    }
    json_free(&root);
    free(spans);
    if (rc != 0) {
        if (owned) free(buf);
        nnc_st_close(f);
        return NULL;
    }
    f->name = NULL; /* the caller's string may not outlive f */
    return f;
}

nnc_st_file *nnc_st_parse(const void *buf, size_t len, const char *name, char *err, size_t errlen) {
    /* not owned: st_parse_impl only reads it, then copies the tensors out */
    return st_parse_impl((unsigned char *)(uintptr_t)buf, len, name ? name : "<memory>", 0, err, errlen);
}

/* Reads a whole regular file into a malloc'd buffer. */
static int st_file_read(const char *path, unsigned char **buf, size_t *len, char *err, size_t errlen) {
    struct stat st;
    /* O_NONBLOCK: opening a FIFO for reading would wait for a writer; it is refused below */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC), e;
    FILE *fp = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (!fp) {
        data_err(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    e = fstat(fileno(fp), &st) != 0 ? errno : !S_ISREG(st.st_mode) ? EINVAL : 0;
    if (e == 0 && (uint64_t)st.st_size > SIZE_MAX - 1) e = EFBIG;
    *len = e == 0 ? (size_t)st.st_size : 0;
    *buf = e == 0 ? malloc(*len ? *len : 1) : NULL;
    if (e == 0 && !*buf) e = ENOMEM;
    if (e == 0 && fread(*buf, 1, *len, fp) != *len)
        e = ferror(fp) ? (errno ? errno : EIO) : EIO; /* shrank while we read */
    if (fclose(fp) != 0 && e == 0) e = errno;
    if (e != 0) {
        data_err(err, errlen, "%s: cannot read: %s", path, e == EINVAL ? "not a regular file" : strerror(e));
        free(*buf);
        *buf = NULL;
        return -1;
    }
    return 0;
}

nnc_st_file *nnc_st_load(const char *path, char *err, size_t errlen) {
    unsigned char *buf;
    size_t len;
    if (st_file_read(path, &buf, &len, err, errlen) != 0) return NULL;
    return st_parse_impl(buf, len, path, 1, err, errlen);
}

/* ---- saving ----------------------------------------------------------------- */

typedef struct {
    char *s;
    size_t n, cap;
    int oom; /* sticky: checked once at the end */
} st_buf;

static void st_buf_put(st_buf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t ncap = (b->cap ? b->cap : 256);
        char *ns;
        while (ncap < b->n + n + 1) ncap *= 2;
        ns = realloc(b->s, ncap);
        if (!ns) {
            b->oom = 1;
            return;
        }
        b->s = ns;
        b->cap = ncap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = '\0';
}

static void st_buf_str(st_buf *b, const char *s) { st_buf_put(b, s, strlen(s)); }

/* A JSON string literal: quotes, backslashes and control bytes escaped. */
static void st_buf_json(st_buf *b, const char *s) {
    st_buf_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            st_buf_put(b, esc, 2);
        } else if (c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            st_buf_put(b, esc, 6);
        } else {
            st_buf_put(b, s, 1);
        }
    }
    st_buf_put(b, "\"", 1);
}

/* Order in which tensors are laid out: by element size, largest first,
 * stable, so every tensor is aligned to its element size. */
static void st_save_order(const nnc_st_tensor *ts, int n, int *order) {
    static const size_t sizes[] = {8, 4, 2, 1};
    int k = 0, i;
    size_t s;
    for (s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (i = 0; i < n; i++)
            if (nnc_dtype_size(ts[i].dtype) == sizes[s]) order[k++] = i;
}

static int st_save_check_tensor(const char *path, const nnc_st_tensor *t, uint64_t *bytes, char *err, size_t errlen) {
    if (!t->name || !*t->name || strcmp(t->name, "__metadata__") == 0) {
        data_err(err, errlen, "%s: a tensor needs a non-empty name other than __metadata__", path);
        return -1;
    }
    if (nnc_dtype_size(t->dtype) == 0 || t->rank < 0 || t->rank > NNC_MAX_RANK || st_tensor_bytes(t, bytes) != 0 ||
        *bytes > (uint64_t)(SIZE_MAX / 2) || (*bytes > 0 && !t->data)) {
        data_err(err, errlen, "%s: tensor '%s': invalid dtype, rank, shape or data", path, t->name);
        return -1;
    }
    return 0;
}

/* Validates the caller's tensors and metadata; *bytes[i] gets sizes. */
static int st_save_check(const char *path, const nnc_st_tensor *ts, int n, const nnc_st_meta *meta, int nmeta,
                         uint64_t *bytes, char *err, size_t errlen) {
    int i, j;
    if (n < 0 || nmeta < 0 || (n > 0 && !ts) || (nmeta > 0 && !meta)) {
        data_err(err, errlen, "%s: invalid tensor or metadata count", path);
        return -1;
    }
    for (i = 0; i < n; i++) {
        if (st_save_check_tensor(path, &ts[i], &bytes[i], err, errlen) != 0) return -1;
        for (j = 0; j < i; j++)
            if (strcmp(ts[i].name, ts[j].name) == 0) {
                data_err(err, errlen, "%s: tensor name '%s' used twice", path, ts[i].name);
                return -1;
            }
    }
    for (i = 0; i < nmeta; i++) {
        if (!meta[i].key || !meta[i].value || st_meta_is_crc(meta[i].key)) {
            data_err(err, errlen,
                     "%s: metadata %d: key and value must be set, and '%s' and '%s' "
                     "are reserved",
                     path, i, ST_CRC_KEY, ST_META_CRC_KEY);
            return -1;
        }
        for (j = 0; j < i; j++)
            if (strcmp(meta[i].key, meta[j].key) == 0) {
                data_err(err, errlen, "%s: metadata key '%s' used twice", path, meta[i].key);
                return -1;
            }
    }
    return 0;
}

static void st_header_tensor(st_buf *b, const nnc_st_tensor *t, uint64_t begin, uint64_t end) {
    char num[48];
    int d;
    st_buf_str(b, ",");
    st_buf_json(b, t->name);
    st_buf_str(b, ":{\"dtype\":\"");
    st_buf_str(b, st_dtype_name(t->dtype));
    st_buf_str(b, "\",\"shape\":[");
    for (d = 0; d < t->rank; d++) {
        snprintf(num, sizeof num, "%s%lld", d ? "," : "", (long long)t->dims[d]);
        st_buf_str(b, num);
    }
    snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)begin, (unsigned long long)end);
    st_buf_str(b, num);
}

/* Builds the JSON header, padded with spaces to a multiple of 8. */
static int st_header_build(st_buf *b, const nnc_st_tensor *ts, int n, const int *order, const uint64_t *bytes,
                           const nnc_st_meta *meta, int nmeta, uint32_t crc) {
    char crcs[16];
    uint64_t *begin = malloc((n ? (size_t)n : 1) * sizeof *begin), at = 0;
    uint32_t mcrc;
    int i;
    if (!begin || st_meta_crc(meta, nmeta, &mcrc) != 0) {
        free(begin);
        return -1;
    }
    for (i = 0; i < n; i++) { /* offsets follow layout order */
        begin[order[i]] = at;
        at += bytes[order[i]];
    }
    snprintf(crcs, sizeof crcs, "%08x", (unsigned)crc);
    st_buf_str(b, "{\"__metadata__\":{\"" ST_CRC_KEY "\":");
    st_buf_json(b, crcs);
    snprintf(crcs, sizeof crcs, "%08x", (unsigned)mcrc);
    st_buf_str(b, ",\"" ST_META_CRC_KEY "\":");
    st_buf_json(b, crcs);
    for (i = 0; i < nmeta; i++) {
        st_buf_str(b, ",");
        st_buf_json(b, meta[i].key);
        st_buf_str(b, ":");
        st_buf_json(b, meta[i].value);
    }
    st_buf_str(b, "}");
    for (i = 0; i < n; i++) /* header in the caller's order */
        st_header_tensor(b, &ts[i], begin[i], begin[i] + bytes[i]);
    st_buf_str(b, "}");
    while (b->n % 8 != 0) st_buf_str(b, " ");
    free(begin);
    return b->oom || b->n > ST_HEADER_MAX ? -1 : 0;
}

/* Writes length, header and data into tmp, durably, and renames it over path. */
static int st_write_file(const char *path, const char *tmp, const st_buf *hdr, const nnc_st_tensor *ts, int n,
                         const int *order, const uint64_t *bytes, char *err, size_t errlen) {
    AtomicFile f;
    unsigned char len8[8];
    int i, e = atomic_file_open(&f, AT_FDCWD, path, tmp, ATOMIC_FILE_KEEP_MODE);
    if (e != 0) {
        data_err(err, errlen, "%s: cannot create temporary file %s: %s", path, tmp, strerror(e));
        return -1;
    }
    for (i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)hdr->n >> (8 * i));
    atomic_file_write(&f, len8, 8);
    atomic_file_write(&f, hdr->s, hdr->n);
    for (i = 0; i < n; i++) atomic_file_write(&f, ts[order[i]].data, (size_t)bytes[order[i]]);
    e = atomic_file_commit(&f, ATOMIC_FILE_DURABLE);
    if (e != 0) {
        data_err(err, errlen, "%s: write failed, %s: %s%s%s", path,
                 f.replaces ? "previous file left as it was" : "nothing saved", strerror(e),
                 f.unlink_err ? "; could not remove " : "", f.unlink_err ? tmp : "");
        return -1;
    }
    return 0;
}

int nnc_st_dest_check(const char *path, char *err, size_t errlen) {
    char *target = path && *path ? atomic_file_target(path) : NULL;
    int rc;
    if (!target) {
        data_err(err, errlen, "%s: no path, or out of memory", path ? path : "(null)");
        return -1;
    }
    rc = atomic_file_target_check(path, target, err, errlen);
    free(target);
    return rc;
}

static uint32_t st_data_crc(const nnc_st_tensor *ts, int n, const int *order, const uint64_t *bytes) {
    uLong crc = crc32(0L, Z_NULL, 0);
    int i;
    for (i = 0; i < n; i++) {
        const unsigned char *p = ts[order[i]].data;
        uint64_t k = bytes[order[i]];
        while (k > 0) {
            uInt c = k > UINT_MAX ? UINT_MAX : (uInt)k;
            crc = crc32(crc, p, c);
            p += c;
            k -= c;
        }
    }
    return (uint32_t)crc;
}

static int st_save_to(const char *path, const nnc_st_tensor *ts, int n, const nnc_st_meta *meta, int nmeta, char *err,
                      size_t errlen);

int nnc_st_save(const char *path, const nnc_st_tensor *ts, int n, const nnc_st_meta *meta, int nmeta, char *err,
                size_t errlen) {
    char *target;
    int rc;
    if (!path || !*path) {
        data_err(err, errlen, "nnc_st_save: no path given");
        return -1;
    }
    target = atomic_file_target(path);
    if (!target) {
        data_err(err, errlen, "%s: out of memory", path);
        return -1;
    }
    rc = atomic_file_target_check(path, target, err, errlen);
    if (rc == 0) {
        atomic_file_tmp_sweep(target);
        rc = st_save_to(target, ts, n, meta, nmeta, err, errlen);
    }
    free(target);
    return rc;
}

/* nnc_st_save once `path` is the file to replace (no link). */
static int st_save_to(const char *path, const nnc_st_tensor *ts, int n, const nnc_st_meta *meta, int nmeta, char *err,
                      size_t errlen) {
    size_t cnt = n > 0 ? (size_t)n : 1;
    uint64_t *bytes = calloc(cnt, sizeof *bytes);
    int *order = calloc(cnt, sizeof *order);
    size_t tlen = path ? strlen(path) + 32 : 1;
    char *tmp = malloc(tlen);
    st_buf hdr = {NULL, 0, 0, 0};
    int rc = -1;
    if (!path || !*path) data_err(err, errlen, "nnc_st_save: no path given");
    else if (!bytes || !order || !tmp) data_err(err, errlen, "%s: out of memory", path);
    else if (st_save_check(path, ts, n, meta, nmeta, bytes, err, errlen) == 0) {
        st_save_order(ts, n, order);
        if (st_header_build(&hdr, ts, n, order, bytes, meta, nmeta, st_data_crc(ts, n, order, bytes)) != 0)
            data_err(err, errlen, "%s: out of memory or header over 100 MB", path);
        else {
            snprintf(tmp, tlen, "%s.tmp.%ld", path, (long)getpid());
            rc = st_write_file(path, tmp, &hdr, ts, n, order, bytes, err, errlen);
        }
    }
    free(hdr.s);
    free(bytes);
    free(order);
    free(tmp);
    return rc;
}
