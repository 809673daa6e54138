/* dataset.c - turns the train section's data sources into per-input sample arrays.
 *
 * Every source is loaded through data.c (IDX, .npy, CSV) or generated from the seed (randn,
 * rand), converted to the input's dtype (f32 scaled, or exact i32 labels), and checked: a
 * sample must have as many elements as the input has per batch row, and all inputs must have
 * the same number of samples.  Errors name the file and what did not match. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../codegen/cache.h"
#include "data.h"
#include "dataset.h"
#include "rng.h"

/* Decompressing a .gz IDX file costs a few hundred milliseconds at every start; the bytes it
 * holds are kept, uncompressed, in the compile cache (codegen/cache.c: our own 0700
 * directory, no symlinks followed, checksummed), keyed by the file's path, size and mtime.
 * The entry is an IDX file of u8 samples, named "HASH-data.idx". */
static bool idx_cache_name(const char *path, char name[64]) {
    struct stat st;
    if (stat(path, &st) != 0) return false;
    uint64_t h = hash_fnv1a(path, strlen(path), HASH_FNV_INIT);
    h = hash_fnv1a(&st.st_size, sizeof st.st_size, h);
    h = hash_fnv1a(&st.st_mtime, sizeof st.st_mtime, h);
    snprintf(name, 64, "%016llx-data.idx", (unsigned long long)h);
    return true;
}

static void idx_cache_write(const Cache *c, const char *name, const nnc_array *a) {
    size_t hlen = (size_t)(4 + 4 * a->rank), n = (size_t)nnc_array_numel(a);
    unsigned char *buf = xmalloc(hlen + n);
    unsigned char hdr[4] = {0, 0, 0x08, (unsigned char)a->rank};
    memcpy(buf, hdr, 4);
    for (int i = 0; i < a->rank; i++)
        for (int b = 0; b < 4; b++) buf[4 + 4 * i + b] = (unsigned char)(a->dims[i] >> (24 - 8 * b));
    memcpy(buf + hlen, a->data, n);
    cache_put(c, name, buf, hlen + n, 0600);   /* best effort: the next run decompresses again */
    free(buf);
}

static bool load_idx_cached(const DataSource *s, const char *cache_dir, nnc_array *a, char *err, size_t n) {
    size_t len = strlen(s->path);
    bool gz = len > 3 && !strcmp(s->path + len - 3, ".gz");
    char name[64];
    Cache c = {.dirfd = -1};
    if (gz && cache_dir && idx_cache_name(s->path, name) && cache_open(&c, cache_dir, err, n) && !c.temporary) {
        void *data;
        size_t dlen;
        bool hit = cache_get(&c, name, &data, &dlen) && nnc_parse_idx(data, dlen, s->path, a, err, n) == 0;
        free(data);   /* nnc_parse_idx copied what it keeps */
        if (hit) {
            cache_close(&c);
            return true;
        }
    }
    bool ok = nnc_load_idx(s->path, a, err, n) == 0;
    if (ok && c.dirfd >= 0 && !c.temporary && a->dtype == NNC_DT_U8) idx_cache_write(&c, name, a);
    cache_close(&c);
    return ok;
}

static bool load_source(const DataSource *s, const char *input, uint64_t seed, const char *cache_dir, nnc_array *a,
                        char *err, size_t n) {
    switch (s->kind) {
    case SRC_IDX: return load_idx_cached(s, cache_dir, a, err, n);
    case SRC_NPY: return nnc_load_npy(s->path, a, err, n) == 0;
    case SRC_CSV: {
        nnc_array all;
        if (nnc_load_csv(s->path, -1, &all, err, n) != 0) return false;
        int64_t cols = all.rank == 2 ? all.dims[1] : 1, rows = all.dims[0];
        int64_t cnt = s->count < 0 ? cols - s->first : s->count;
        if (s->first < 0 || cnt < 1 || s->first + cnt > cols) {
            snprintf(err, n, "%s: asked for columns [%lld, %lld) but the file has %lld", s->path,
                     (long long)s->first, (long long)(s->first + cnt), (long long)cols);
            nnc_array_free(&all);
            return false;
        }
        memset(a, 0, sizeof *a);
        a->dtype = NNC_DT_F64;
        a->rank = 2;
        a->dims[0] = rows;
        a->dims[1] = cnt;
        double *dst = xmalloc((size_t)(rows * cnt) * sizeof(double)), *src = all.data;
        for (int64_t r = 0; r < rows; r++)
            memcpy(dst + r * cnt, src + r * cols + s->first, (size_t)cnt * sizeof(double));
        a->data = dst;
        nnc_array_free(&all);
        return true;
    }
    case SRC_RANDN:
    case SRC_RAND: {
        memset(a, 0, sizeof *a);
        a->dtype = NNC_DT_F64;
        a->rank = s->rank;
        int64_t cnt = 1;
        for (int i = 0; i < s->rank; i++) cnt *= (a->dims[i] = s->dims[i]);
        double *d = xmalloc((size_t)cnt * sizeof(double));
        char key[300];
        snprintf(key, sizeof key, "data.%s", input);
        uint64_t h = nnc_rng_hash(key);
        for (int64_t i = 0; i < cnt; i++)
            d[i] = s->kind == SRC_RANDN ? nnc_rng_normal(seed, h, (uint64_t)i) : nnc_rng_uniform(seed, h, (uint64_t)i);
        a->data = d;
        return true;
    }
    default:
        snprintf(err, n, "input '%s' has no data source", input);
        return false;
    }
}

static bool load_column(const Model *m, const DataBind *b, bool test, uint64_t seed, const char *cache_dir, Column *c,
                        int64_t *samples, char *err, size_t n) {
    const DataSource *s = test ? &b->test : &b->train;
    const Node *in = &m->g->nodes[b->node];
    nnc_array a, conv;
    if (!load_source(s, b->input, seed, cache_dir, &a, err, n)) return false;
    const char *what = s->path ? s->path : b->input;
    c->scale = (float)s->scale;
    c->bytes = in->dtype == DT_F32 && a.dtype == NNC_DT_U8;   /* images: 4x less memory */
    bool ok = true;
    if (c->bytes) conv = a;
    else {
        ok = in->dtype == DT_I32 ? nnc_array_to_i32(&a, &conv, err, n) == 0
                                 : nnc_array_to_f32(&a, (float)s->scale, &conv, err, n) == 0;
        nnc_array_free(&a);
    }
    if (!ok) return false;
    c->name = b->input;
    c->dtype = in->dtype;
    c->row_elems = shape_numel(in->shape, 1);
    int64_t total = nnc_array_numel(&conv), rows = conv.rank ? conv.dims[0] : 1;
    if (shape_batch_axis(in->shape) != 0) {
        snprintf(err, n, "input '%s' is fed from %s, so its first dimension must be the batch dimension", b->input, what);
        nnc_array_free(&conv);
        return false;
    }
    if (rows * c->row_elems != total) {
        char sb[96];
        snprintf(err, n, "%s: each sample has %lld elements, but input '%s' is %s (%lld per sample)", what,
                 (long long)(rows ? total / rows : 0), b->input,
                 shape_str(in->shape, in->dtype, m->g->batch_name, sb, sizeof sb), (long long)c->row_elems);
        nnc_array_free(&conv);
        return false;
    }
    c->data = conv.data;
    *samples = rows;
    return true;
}

bool dataset_load(const Model *m, bool test, uint64_t seed, const char *cache_dir, Dataset *d, char *err, size_t n) {
    memset(d, 0, sizeof *d);
    const TrainConfig *t = &m->train;
    d->cols = xcalloc((size_t)t->ndata + 1, sizeof *d->cols);
    const char *first = NULL;
    for (int i = 0; i < m->g->n; i++) {
        if (m->g->nodes[i].op != OP_INPUT) continue;
        const DataBind *b = NULL;
        for (int j = 0; j < t->ndata; j++)
            if (t->data[j].node == i) b = &t->data[j];
        if (!b || (test && b->test.kind == SRC_NONE)) {
            if (!test) snprintf(err, n, "input '%s' has no training data", m->g->nodes[i].name);
            else snprintf(err, n, "no test data for input '%s'", m->g->nodes[i].name);
            dataset_free(d);
            return false;
        }
        int64_t rows;
        if (!load_column(m, b, test, seed, cache_dir, &d->cols[d->ncols], &rows, err, n)) {
            dataset_free(d);
            return false;
        }
        d->ncols++;
        if (first && rows != d->n) {
            snprintf(err, n, "input '%s' has %lld samples but '%s' has %lld", b->input, (long long)rows, first, (long long)d->n);
            dataset_free(d);
            return false;
        }
        first = b->input;
        d->n = rows;
    }
    return true;
}

void dataset_free(Dataset *d) {
    for (int i = 0; i < d->ncols; i++) free(d->cols[i].data);
    free(d->cols);
    memset(d, 0, sizeof *d);
}

void dataset_gather(const Dataset *d, const int64_t *idx, int64_t rows, void **bufs) {
    for (int c = 0; c < d->ncols; c++) {
        if (d->cols[c].bytes) {
            const int64_t re = d->cols[c].row_elems;
            const float k = d->cols[c].scale;
            float *dst = bufs[c];
            for (int64_t r = 0; r < rows; r++) {
                const unsigned char *src = (const unsigned char *)d->cols[c].data + idx[r] * re;
                for (int64_t j = 0; j < re; j++) dst[r * re + j] = (float)src[j] * k;
            }
            continue;
        }
        size_t rb = (size_t)d->cols[c].row_elems * 4;
        const char *src = d->cols[c].data;
        char *dst = bufs[c];
        for (int64_t r = 0; r < rows; r++) memcpy(dst + (size_t)r * rb, src + (size_t)idx[r] * rb, rb);
    }
}

bool dataset_direct(const Dataset *d, int64_t first, void **ptrs) {
    for (int c = 0; c < d->ncols; c++)
        if (d->cols[c].bytes) return false;
    for (int c = 0; c < d->ncols; c++) ptrs[c] = (char *)d->cols[c].data + (size_t)(first * d->cols[c].row_elems) * 4;
    return true;
}
