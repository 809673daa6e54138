/* dataset.c - turns the train section's data sources into per-input sample arrays.
 *
 * Every source is loaded through data.c (IDX, .npy, CSV) or generated from the seed (randn,
 * rand), converted to the input's dtype (f32 scaled, or exact i32 labels), and checked: a
 * sample must have as many elements as the input has per batch row, and all inputs must have
 * the same number of samples.  Errors name the file and what did not match.  A token stream
 * (tokens(), io/tokens.c) is not cut into samples: its windows are read from it per batch. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../include/nnc_rng.h"
#include "../io/cache.h"
#include "../io/data.h"
#include "dataset.h"
#include "par.h"

/* ---- the decompressed-data cache ------------------------------------------------------------
 * Decompressing a .gz IDX file costs a few hundred milliseconds at every start, so its 8-bit
 * samples are kept, uncompressed, as an entry SOURCE-VERSION-data.idx of the compile cache
 * (io/cache.c): only in a cache directory that is the user's own and closed to others,
 * with a checksum beside every entry (a truncated or corrupted entry is read from the .gz
 * again), files created O_EXCL|O_NOFOLLOW and published by rename.  No data cache at all when
 * the compile cache fell back to a private temporary directory.
 *
 * The name is SOURCE-VERSION-data.idx.  SOURCE hashes the file's real path: a source has one
 * entry, and writing one for a changed source removes those of its earlier versions, which no
 * run can hit again (a data set re-touched by a script every day kept one full copy per day).
 * VERSION hashes the path, device, inode, size, and the mtime and ctime in nanoseconds.  Not a
 * content hash: hashing would read the whole .gz at every start, much of what the cache is
 * there to save.  stat is enough because ctime cannot be set by a user (utimensat sets mtime
 * only) and every write, rename-over or chmod moves it: a file replaced by another of the same
 * size in the same second, even with its mtime put back, gets a new key.
 *
 * An entry is written only after the whole data set has loaded and passed every check (a
 * failed run leaves nothing behind), by a background thread at a lower priority: checksumming
 * and writing 47 MB took a third of the time to the first step when nothing was cached.  Data
 * entries take at most NNC_DATA_CACHE_MAX bytes (default 2 GiB): the least recently used (a
 * hit refreshes an entry's mtime) are evicted to make room, and data larger than the bound is
 * not cached. */
#define DATA_SUFFIX "-data.idx"
#define DATA_SOURCE_LEN 17   /* "0123456789abcdef-": the SOURCE part of a name */

static bool idx_cache_name(const char *path, char name[64]) {
    struct stat st;
    if (stat(path, &st) != 0) return false;
    const int64_t key[] = {(int64_t)st.st_dev, (int64_t)st.st_ino, (int64_t)st.st_size,
                           (int64_t)st.st_mtim.tv_sec, (int64_t)st.st_mtim.tv_nsec,
                           (int64_t)st.st_ctim.tv_sec, (int64_t)st.st_ctim.tv_nsec};
    uint64_t h = hash_fnv1a(path, strlen(path), HASH_FNV_INIT);
    h = hash_fnv1a(key, sizeof key, h);
    char *real = realpath(path, NULL);   /* "x.gz" and "./x.gz" are one source */
    const char *src = real ? real : path;
    uint64_t source = hash_fnv1a(src, strlen(src), HASH_FNV_INIT);
    free(real);
    snprintf(name, 64, "%016llx-%016llx" DATA_SUFFIX, (unsigned long long)source, (unsigned long long)h);
    return true;
}

static uint64_t data_cache_max(void) { return cache_limit("NNC_DATA_CACHE_MAX", CACHE_DATA_MAX_DEFAULT); }

/* The user's trusted cache, or false: data is never cached in a temporary fallback. */
static bool data_cache_open(Cache *c, const char *cache_dir) {
    char e[1024];
    if (!cache_dir || !cache_open(c, cache_dir, e, sizeof e)) return false;
    if (c->temporary) {
        cache_close(c);
        return false;
    }
    return true;
}

typedef struct {
    char name[64];
    time_t mtime;
    uint64_t size;
} CacheEntry;

static int cache_entry_older(const void *a, const void *b) {
    const CacheEntry *x = a, *y = b;
    return (x->mtime > y->mtime) - (x->mtime < y->mtime);
}

static bool cache_entry_remove(const Cache *c, const char *name) {
    char sum[NAME_MAX + 8];
    snprintf(sum, sizeof sum, "%s.sum", name);
    if (unlinkat(c->dirfd, name, 0) != 0) return false;
    unlinkat(c->dirfd, sum, 0);
    return true;
}

/* Whether data entry `entry` is dead once `incoming` is written: an earlier version of the same
 * source, or named before names had a SOURCE part (no run looks for either again). */
static bool cache_entry_stale(const char *entry, const char *incoming) {
    size_t len = strlen(entry);
    if (len == 16 + strlen(DATA_SUFFIX)) return true;
    return strcmp(entry, incoming) && !strncmp(entry, incoming, DATA_SOURCE_LEN);
}

/* Removes the stale data entries, then the least recently used ones until `incoming` more
 * bytes (the entry `name`) fit under `max`. */
static void cache_evict(const Cache *c, const char *name, uint64_t incoming, uint64_t max) {
    int fd = dup(c->dirfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0) close(fd);
        return;
    }
    rewinddir(d);   /* a dup shares the directory offset, which an earlier scan may have moved */
    CacheEntry *e = NULL;
    size_t ne = 0, cap = 0, sl = strlen(DATA_SUFFIX);
    uint64_t total = 0;
    for (struct dirent *de; (de = readdir(d)) != NULL;) {
        size_t len = strlen(de->d_name);
        struct stat st;
        if (len <= sl || len >= sizeof e->name || strcmp(de->d_name + len - sl, DATA_SUFFIX)) continue;
        if (fstatat(c->dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
        if (cache_entry_stale(de->d_name, name)) {
            cache_entry_remove(c, de->d_name);
            continue;
        }
        if (ne == cap) e = xrealloc(e, (cap = cap ? 2 * cap : 16) * sizeof *e);
        snprintf(e[ne].name, sizeof e->name, "%s", de->d_name);
        e[ne].mtime = st.st_mtime;
        e[ne].size = (uint64_t)st.st_size;
        total += e[ne++].size;
    }
    closedir(d);
    if (ne) qsort(e, ne, sizeof *e, cache_entry_older);
    for (size_t i = 0; i < ne && total + incoming > max; i++)
        if (cache_entry_remove(c, e[i].name)) total -= e[i].size;
    free(e);
}

/* Writes n samples of row bytes each as a u8 IDX entry [n, row]; best effort, silent. */
static void idx_cache_write(const char *cache_dir, const char *name, const void *data, int64_t n, int64_t row) {
    uint64_t bytes = (uint64_t)n * (uint64_t)row, max = data_cache_max();
    Cache c;
    if (n > UINT32_MAX || row > UINT32_MAX || bytes + 12 > max || !data_cache_open(&c, cache_dir)) return;
    cache_evict(&c, name, bytes + 12, max);
    unsigned char *buf = xmalloc((size_t)bytes + 12);
    unsigned char hdr[12] = {0, 0, 0x08, 2};
    for (int b = 0; b < 4; b++) {
        hdr[4 + b] = (unsigned char)((uint64_t)n >> (24 - 8 * b));
        hdr[8 + b] = (unsigned char)((uint64_t)row >> (24 - 8 * b));
    }
    memcpy(buf, hdr, sizeof hdr);
    memcpy(buf + 12, data, (size_t)bytes);
    cache_put(&c, name, buf, (size_t)bytes + 12, 0600);
    free(buf);
    cache_close(&c);
}

struct CacheWriter {
    pthread_t thread;
    const Column *cols;   /* their samples are only read, by both threads, until the join */
    int ncols;
    int64_t n;
    char *cache_dir;
};

static void *cache_writes(void *arg) {
    const struct CacheWriter *w = arg;
#ifdef SYS_gettid   /* Linux: a nice value is per thread; the training steps go first */
    id_t tid = (id_t)syscall(SYS_gettid);
    errno = 0;
    int prio = getpriority(PRIO_PROCESS, tid);
    if (errno == 0) setpriority(PRIO_PROCESS, tid, prio + 10 > 19 ? 19 : prio + 10);
#endif
    for (int c = 0; c < w->ncols; c++)
        if (w->cols[c].cache_path)
            idx_cache_write(w->cache_dir, w->cols[c].cache_path, w->cols[c].data, w->n, w->cols[c].row_elems);
    return NULL;
}

/* Writes the pending entries in a thread, or right here when no thread can be had. */
static void cache_writes_start(Dataset *d, const char *cache_dir) {
    bool any = false;
    for (int c = 0; c < d->ncols; c++) any |= d->cols[c].cache_path != NULL;
    if (!any || !cache_dir) return;
    struct CacheWriter *w = xcalloc(1, sizeof *w);
    *w = (struct CacheWriter){.cols = d->cols, .ncols = d->ncols, .n = d->n, .cache_dir = xstrdup(cache_dir)};
    if (pthread_create(&w->thread, NULL, cache_writes, w) == 0) {
        d->writer = w;
        return;
    }
    cache_writes(w);
    free(w->cache_dir);
    free(w);
}

static void cache_writes_join(Dataset *d) {
    if (!d->writer) return;
    pthread_join(d->writer->thread, NULL);
    free(d->writer->cache_dir);
    free(d->writer);
    d->writer = NULL;
}

/* A .gz IDX file from the cache when it holds it; on a miss, *pending gets the entry name to
 * write once the whole data set has been validated (NULL when there is nothing to cache). */
/* A hit is mapped, not read: its 8-bit samples stay in the page cache, shared with the next
 * run, and a 47 MB training set costs no copy (*map then holds a->data). */
static bool load_idx_cached(const DataSource *s, const char *cache_dir, nnc_array *a, char **pending, void **map,
                            size_t *map_len, char *err, size_t n) {
    char name[64];
    size_t len = strlen(s->path);
    bool gz = len > 3 && !strcmp(s->path + len - 3, ".gz");
    Cache c;
    if (gz && idx_cache_name(s->path, name) && data_cache_open(&c, cache_dir)) {
        void *data = NULL;
        size_t dlen = 0;
        bool hit = cache_map(&c, name, &data, &dlen) && nnc_view_idx_u8(data, dlen, s->path, a, err, n) == 0;
        if (hit) {
            *map = data;
            *map_len = dlen;
        } else if (data)
            munmap(data, dlen);
        if (hit) utimensat(c.dirfd, name, NULL, 0);   /* recently used: evicted last */
        cache_close(&c);
        if (hit) return true;
        if (nnc_load_idx(s->path, a, err, n) != 0) return false;
        if (a->dtype == NNC_DT_U8) *pending = strcpy(xmalloc(strlen(name) + 1), name);
        return true;
    }
    return nnc_load_idx(s->path, a, err, n) == 0;
}

static bool load_source(const DataSource *s, const char *input, uint64_t seed, const char *cache_dir, nnc_array *a,
                        char **pending, void **map, size_t *map_len, char *err, size_t n) {
    switch (s->kind) {
    case SRC_IDX: return load_idx_cached(s, cache_dir, a, pending, map, map_len, err, n);
    case SRC_NPY: return nnc_load_npy(s->path, a, err, n) == 0;
    case SRC_CSV: {
        nnc_array all;
        if (nnc_load_csv(s->path, s->header, &all, err, n) != 0) return false;
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
    case SRC_TOKENS: break; /* stream_load reads it, once for its two inputs */
    case SRC_NONE: break;
    }
    snprintf(err, n, "input '%s' has no data source", input);
    return false;
}

/* A column's samples back where they came from: a mapped cache entry, or the heap. */
static void column_release(Column *c, nnc_array *conv) {
    if (c->map) munmap(c->map, c->map_len);
    else nnc_array_free(conv);
    c->map = NULL;
    c->map_len = 0;
}

/* An input as the model's ABI describes it: its shape and type, and what its values must be. */
typedef struct {
    const nnc_tensor_info *t;
    const nnc_input_rule *rule;
    const char *batch_name;
} Input;

/* Samples are along the first axis, the batch: [B, ...]. */
static bool input_batch_first(const nnc_tensor_info *t) {
    for (int i = 0; i < t->rank; i++)
        if (t->dims[i] < 0) return i == 0;
    return false;
}

static int64_t input_row_elems(const nnc_tensor_info *t) {
    int64_t k = 1;
    for (int i = 0; i < t->rank; i++) k *= tensor_dim(t->dims[i], 1);
    return k;
}

const char *tensor_shape_str(const nnc_tensor_info *t, const char *batch, char *buf, size_t n) {
    size_t k = (size_t)snprintf(buf, n, "%s[", t->dtype == NNC_TYPE_I32 ? "i32" : "f32");
    for (int i = 0; i < t->rank && k < n; i++) {
        long long d = (long long)t->dims[i];
        if (d == -1) k += (size_t)snprintf(buf + k, n - k, "%s%s", i ? "," : "", batch);
        else if (d < 0) k += (size_t)snprintf(buf + k, n - k, "%s%s*%lld", i ? "," : "", batch, -d);
        else k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? "," : "", d);
    }
    if (k < n) snprintf(buf + k, n - k, "]");
    return buf;
}

/* "f32[B,784]", as the model declares it. */
static const char *input_shape(const Input *in, char *buf, size_t n) {
    return tensor_shape_str(in->t, in->batch_name, buf, n);
}

/* What the model needs, checked against an IDX or .npy header before the data is read: samples
 * of the input's size, as many as the inputs before it have (want_rows, or -1).  A .gz that
 * declares gigabytes of the wrong shape is refused after its header, not after inflating them.
 * load_column checks the loaded data again (a file may change in between). */
static bool header_fits(const Input *in, const DataBind *b, const DataSource *s, int64_t want_rows, const char *first,
                        char *err, size_t n) {
    nnc_array h;
    if ((s->kind != SRC_IDX && s->kind != SRC_NPY) || !input_batch_first(in->t)) return true;
    if ((s->kind == SRC_IDX ? nnc_load_idx_header : nnc_load_npy_header)(s->path, &h, err, n) != 0) return false;
    int64_t rows = h.rank ? h.dims[0] : 1, per = 1, row_elems = input_row_elems(in->t);
    for (int i = 1; i < h.rank && rows > 0; i++) per *= h.dims[i];   /* fits: so does the product with rows */
    if (rows > 0 && per != row_elems) {
        char sb[96];
        snprintf(err, n, "%s: each sample has %lld elements, but input '%s' is %s (%lld per sample)", s->path,
                 (long long)per, b->input, input_shape(in, sb, sizeof sb), (long long)row_elems);
        return false;
    }
    if (want_rows >= 0 && rows != want_rows) {
        snprintf(err, n, "input '%s' has %lld samples but '%s' has %lld", b->input, (long long)rows, first,
                 (long long)want_rows);
        return false;
    }
    return true;
}

/* The message for value v of input b, which its rule (the model's nnc_input_rule, from what
 * reads it) does not allow: `what` names the file, `where` the value in it ("sample 4, element
 * 2", "token 9 (byte offset 1042)"). */
static void index_error(const Input *in, const DataBind *b, const char *what, const char *where, int32_t v, char *err,
                        size_t n) {
    const nnc_input_rule *r = in->rule;
    char hint[96] = "";
    if (r->has_ignore && v < 0) /* nanoGPT pads with -1: say what is skipped */
        snprintf(hint, sizeof hint, "; a label equal to cross_entropy's ignore_index (%d) is skipped", (int)r->ignore);
    if (!strcmp(r->reader, "index"))
        snprintf(err, n, "%s: input '%s': %s: index %d is outside 0..%lld (it picks one of %lld places at %s%s)", what,
                 b->input, where, v, (long long)r->bound - 1, (long long)r->bound, r->at, hint);
    else if (!strcmp(r->reader, "embedding"))
        snprintf(err, n, "%s: input '%s': %s: index %d is outside 0..%lld (the %lld rows of the embedding at %s)", what,
                 b->input, where, v, (long long)r->bound - 1, (long long)r->bound, r->at);
    else
        snprintf(err, n, "%s: input '%s': %s: label %d is outside 0..%lld (%s over %lld classes at %s%s)", what,
                 b->input, where, v, (long long)r->bound - 1, r->reader, (long long)r->bound, r->at, hint);
}

static bool index_allowed(const nnc_input_rule *r, int32_t v) {
    return r->bound <= 0 || (v >= 0 && v < r->bound) || (r->has_ignore && v == r->ignore);
}

/* Labels and indices are checked once, as they load, against what reads them, so that a bad one
 * names the file and the sample in it; the kernels' own check, which can only name a row of a
 * shuffled batch, stays as the backstop (and for programs that feed a compiled model). */
static bool labels_check(const Input *in, const DataBind *b, const char *what, const Column *c, int64_t rows, char *err,
                         size_t n) {
    int64_t total = rows * c->row_elems;
    const int32_t *v = c->data;
    for (int64_t i = 0; i < total; i++) {
        if (index_allowed(in->rule, v[i])) continue;
        char where[64];
        int k = snprintf(where, sizeof where, "sample %lld", (long long)(i / c->row_elems));
        if (c->row_elems > 1)
            snprintf(where + k, sizeof where - (size_t)k, ", element %lld", (long long)(i % c->row_elems));
        index_error(in, b, what, where, v[i], err, n);
        return false;
    }
    return true;
}

/* A relative path that does not lead to a readable file: where such paths are read from, and
 * the line that wrote it (the error names the path that was tried). */
static void explain_relative(const DataSource *s, char *err, size_t n) {
    size_t k = strlen(err);
    if (!s->written || access(s->path, R_OK) == 0 || k + 1 >= n) return;
    snprintf(err + k, n - k, " (%s:%d:%d names \"%s\": %s)", s->loc.file ? s->loc.file : "the model", s->loc.line,
             s->loc.col, s->written,
             s->from_cwd ? "the model came from a pipe, so a relative path is read from the "
                           "current directory"
                         : "a relative path is read from the model file's folder");
}

/* ---- token streams (tokens()) ----------------------------------------------------------------
 * One stream feeds two inputs, x the windows and y the tokens after them, so it is loaded once,
 * by the first of them; each then checks every token against what reads it (the embedding's
 * rows, cross_entropy's classes), naming the token and its byte offset. */

static bool stream_load(const DataSource *s, const DataBind *b, int64_t T, TokenStream **out, char *err, size_t n) {
    nnc_array a;
    nnc_tokens_layout at;
    if (nnc_load_tokens(s->path, (nnc_tokens_format)s->tok_format, &a, &at, err, n) != 0) return false;
    if (a.dims[0] < T + 1) {
        snprintf(err, n,
                 "%s: holds %lld tokens, but a window needs %lld: a row of '%s' and '%s' (%lld tokens) and "
                 "the token after it",
                 s->path, (long long)a.dims[0], (long long)T + 1, s->shift ? s->pair : b->input,
                 s->shift ? b->input : s->pair, (long long)T);
        nnc_array_free(&a);
        return false;
    }
    TokenStream *ts = xcalloc(1, sizeof *ts);
    *ts = (TokenStream){a.data, a.dims[0], T, NULL, s->path, at.data_off, at.width};
    *out = ts;
    return true;
}

/* The tokens input b can read: all but the last (a window), or all but the first (the next tokens). */
static bool stream_check(const Input *in, const DataBind *b, const TokenStream *ts, int64_t shift, char *err,
                         size_t n) {
    for (int64_t i = shift; i < ts->ntok - 1 + shift; i++) {
        if (index_allowed(in->rule, ts->tokens[i])) continue;
        char where[80];
        snprintf(where, sizeof where, "token %lld (byte offset %zu)", (long long)i,
                 ts->data_off + (size_t)i * ts->width);
        index_error(in, b, ts->path, where, ts->tokens[i], err, n);
        return false;
    }
    return true;
}

/* Input b's column over the set's stream (loaded here for the first of its inputs). */
static bool stream_column(const Input *in, const DataBind *b, const DataSource *s, Dataset *d, Column *c,
                          int64_t *samples, char *err, size_t n) {
    int64_t T = input_row_elems(in->t);
    if (!d->stream && !stream_load(s, b, T, &d->stream, err, n)) {
        explain_relative(s, err, n);
        return false;
    }
    *c = (Column){
        .name = b->input, .dtype = NNC_TYPE_I32, .row_elems = T, .scale = 1, .stream = d->stream, .shift = s->shift};
    *samples = (d->stream->ntok - 1) / T;
    return stream_check(in, b, d->stream, s->shift, err, n);
}

bool dataset_windows_draw(Dataset *d, uint64_t seed, int epoch) {
    TokenStream *ts = d->stream;
    if (!ts) return false;
    int64_t windows = (ts->ntok - 1) / ts->T, span = ts->ntok - ts->T; /* starts 0 .. span - 1 */
    if (!ts->offsets) ts->offsets = xmalloc((size_t)windows * sizeof *ts->offsets);
    for (int64_t p = 0; p < windows; p++) {
        int64_t o = (int64_t)(nnc_rng_uniform(seed, DATASET_WINDOWS_KEY + (uint64_t)epoch, (uint64_t)p) * (double)span);
        ts->offsets[p] = o < span ? o : span - 1; /* u * span may round up to span */
    }
    return true;
}

static bool load_column(const Input *in, const DataBind *b, bool test, uint64_t seed, const char *cache_dir, Column *c,
                        int64_t want_rows, const char *first, int64_t *samples, char *err, size_t n) {
    const DataSource *s = test ? &b->test : &b->train;
    const int dtype = in->t->dtype == NNC_TYPE_I32 ? NNC_TYPE_I32 : NNC_TYPE_F32;
    nnc_array a, conv;
    char *pending = NULL;
    void *map = NULL;
    size_t map_len = 0;
    if (!header_fits(in, b, s, want_rows, first, err, n) ||
        !load_source(s, b->input, seed, cache_dir, &a, &pending, &map, &map_len, err, n)) {
        explain_relative(s, err, n);
        return false;
    }
    const char *what = s->path ? s->path : b->input;
    c->scale = (float)s->scale;
    c->bytes = dtype == NNC_TYPE_F32 && a.dtype == NNC_DT_U8; /* images: 4x less memory */
    if (c->bytes) c->cache_path = pending;   /* written by dataset_load once all is valid */
    else free(pending);
    bool ok = true;
    if (c->bytes) {
        conv = a;
        c->map = map;   /* the samples stay in the mapped cache entry */
        c->map_len = map_len;
    } else {
        ok = dtype == NNC_TYPE_I32 ? nnc_array_to_i32(&a, &conv, err, n) == 0
                                   : nnc_array_to_f32(&a, (float)s->scale, &conv, err, n) == 0;
        if (map) munmap(map, map_len);   /* a->data lay in it */
        else nnc_array_free(&a);
    }
    if (!ok) {   /* the converters know the element, not the file or the input */
        char why[512];
        const char *msg = strncmp(err, "to_i32: ", 8) && strncmp(err, "to_f32: ", 8) ? err : err + 8;
        snprintf(why, sizeof why, "%s", msg);
        snprintf(err, n, "%s: input '%s': %s", what, b->input, why);
        return false;
    }
    c->name = b->input;
    c->dtype = dtype;
    c->row_elems = input_row_elems(in->t);
    int64_t total = nnc_array_numel(&conv), rows = conv.rank ? conv.dims[0] : 1;
    if (!input_batch_first(in->t)) {
        snprintf(err, n, "input '%s' is fed from %s, so its first dimension must be the batch dimension", b->input, what);
        column_release(c, &conv);
        return false;
    }
    if (rows * c->row_elems != total) {
        char sb[96];
        snprintf(err, n, "%s: each sample has %lld elements, but input '%s' is %s (%lld per sample)", what,
                 (long long)(rows ? total / rows : 0), b->input, input_shape(in, sb, sizeof sb),
                 (long long)c->row_elems);
        column_release(c, &conv);
        return false;
    }
    c->data = conv.data;
    *samples = rows;
    if (c->dtype == NNC_TYPE_I32 && !labels_check(in, b, what, c, rows, err, n)) {
        column_release(c, &conv);
        c->data = NULL;
        return false;
    }
    if (rows == 0) {   /* training on nothing would "succeed" with a NaN loss */
        snprintf(err, n, "%s: input '%s' has no samples (the %s set is empty)", what, b->input,
                 test ? "test" : "training");
        column_release(c, &conv);
        c->data = NULL;
        return false;
    }
    return true;
}

bool dataset_load(const TrainConfig *t, const nnc_model_abi *model, bool test, uint64_t seed, const char *cache_dir,
                  Dataset *d, char *err, size_t n) {
    memset(d, 0, sizeof *d);
    d->cols = xcalloc((size_t)t->ndata + 1, sizeof *d->cols);
    const char *first = NULL;
    for (int i = 0; i < model->ninputs; i++) {
        const Input in = {&model->inputs[i], &model->input_rules[i], model->batch_name};
        const DataBind *b = NULL;
        for (int j = 0; j < t->ndata; j++)
            if (!strcmp(t->data[j].input, in.t->name)) b = &t->data[j];
        if (!b || (test && b->test.kind == SRC_NONE)) {
            if (!test) snprintf(err, n, "input '%s' has no training data", in.t->name);
            else snprintf(err, n, "no test data for input '%s'", in.t->name);
            dataset_free(d);
            return false;
        }
        int64_t rows;
        const DataSource *s = test ? &b->test : &b->train;
        bool ok = s->kind == SRC_TOKENS
            ? stream_column(&in, b, s, d, &d->cols[d->ncols], &rows, err, n)
            : load_column(&in, b, test, seed, cache_dir, &d->cols[d->ncols], first ? d->n : -1, first, &rows, err, n);
        if (!ok) {
            free(d->cols[d->ncols].cache_path);   /* the column is not counted yet */
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
    cache_writes_start(d, cache_dir);
    return true;
}

void dataset_free(Dataset *d) {
    cache_writes_join(d);
    if (d->stream) {
        free(d->stream->tokens);
        free(d->stream->offsets);
        free(d->stream);
    }
    for (int i = 0; i < d->ncols; i++) {
        if (d->cols[i].map) munmap(d->cols[i].map, d->cols[i].map_len);
        else free(d->cols[i].data);
        free(d->cols[i].cache_path);
    }
    free(d->cols);
    memset(d, 0, sizeof *d);
}

/* A shuffled batch's rows lie anywhere in the set: each row's first line is a miss the hardware's
 * prefetchers cannot foresee, and one row at a time they came one after the other (784-byte
 * images at batch 64 from Fashion-MNIST's 47 MB: 21-28 us a batch).  So each row's lines are
 * asked for GATHER_AHEAD rows before the row is copied (11-15 us); 2 to 8 rows measured alike. */
#define GATHER_AHEAD 4

static void prefetch_row(const void *p, size_t bytes) {
    for (size_t b = 0; b < bytes; b += 64) __builtin_prefetch((const char *)p + b);
    if (bytes) __builtin_prefetch((const char *)p + bytes - 1);
}

/* Where sample `i`'s row of a column starts, and its bytes. */
static const void *row_at(const Column *col, int64_t i, size_t *bytes) {
    const TokenStream *ts = col->stream;
    if (ts) {
        *bytes = (size_t)ts->T * sizeof(int32_t);
        return ts->tokens + (ts->offsets ? ts->offsets[i] : i * ts->T) + col->shift;
    }
    *bytes = (size_t)col->row_elems * (col->bytes ? 1 : 4);
    return (const char *)col->data + (size_t)i * *bytes;
}

/* Rows idx[0..rows) of a column, the later ones' lines asked for ahead. */
static void column_gather(const Column *col, const int64_t *idx, int64_t rows, void *dst) {
    size_t rb;
    for (int64_t r = 0; r < rows && r < GATHER_AHEAD; r++) {
        const void *p = row_at(col, idx[r], &rb);
        prefetch_row(p, rb);
    }
    const int64_t re = col->row_elems;
    for (int64_t r = 0; r < rows; r++) {
        if (r + GATHER_AHEAD < rows) {
            const void *p = row_at(col, idx[r + GATHER_AHEAD], &rb);
            prefetch_row(p, rb);
        }
        const void *src = row_at(col, idx[r], &rb);
        if (col->bytes) {
            const unsigned char *b = src;
            const float k = col->scale;
            float *d = (float *)dst + r * re;
            for (int64_t j = 0; j < re; j++) d[j] = (float)b[j] * k;
        } else memcpy((char *)dst + (size_t)r * rb, src, rb);
    }
}

typedef struct {
    const Dataset *d;
    const int64_t *idx;
    void **bufs;
} Gather;

/* Rows [lo, hi) of the batch, every column (a row of a column: row_elems values, 4 bytes each
 * in the batch). */
static void gather_rows(void *ctx, int64_t lo, int64_t hi) {
    const Gather *g = ctx;
    const Dataset *d = g->d;
    for (int c = 0; c < d->ncols; c++)
        column_gather(&d->cols[c], g->idx + lo, hi - lo, (char *)g->bufs[c] + (size_t)(lo * d->cols[c].row_elems) * 4);
}

/* The batch's rows into bufs, in parts across cores when it is large (par.h). */
void dataset_gather(const Dataset *d, const int64_t *idx, int64_t rows, void **bufs) {
    int64_t bytes = 0;
    for (int c = 0; c < d->ncols; c++) bytes += rows * d->cols[c].row_elems * 4;
    Gather g = {d, idx, bufs};
    par_for(gather_rows, &g, rows, bytes);
}

/* Windows in file order lie one after the other, so a batch of them is a [rows, T] block of the
 * stream from its first window's start (plus the column's shift). */
bool dataset_direct(const Dataset *d, int64_t first, void **ptrs) {
    for (int c = 0; c < d->ncols; c++)
        if (d->cols[c].bytes || (d->cols[c].stream && d->cols[c].stream->offsets)) return false;
    for (int c = 0; c < d->ncols; c++) {
        const Column *col = &d->cols[c];
        ptrs[c] = col->stream ? (void *)(col->stream->tokens + first * col->row_elems + col->shift)
                              : (char *)col->data + (size_t)(first * col->row_elems) * 4;
    }
    return true;
}
