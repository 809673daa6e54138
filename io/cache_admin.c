/* cache_admin.c - what is in the cache directory, seen as entries: `nnc --cache-info` counts
 * them, `nnc --cache-clear` removes them, and the compiled code's size limit evicts the least
 * recently used (cache.h).
 *
 * An entry is one of nnc's names and the files that go with it: a CPU object
 * HASH-NAME.so, a cubin HASH-NAME.cubin with its source HASH-NAME.cubin.cu, or decompressed
 * data SOURCE-VERSION-data.idx (HASH-data.idx before names had a SOURCE), each file with its
 * checksum FILE.sum.  Only regular files owned by this user count as nnc's: anything else in
 * the directory (a symbolic link named like an entry included) is left alone, and a link is
 * never followed, since every file is looked at and removed relative to the directory's
 * descriptor without following links (fstatat, unlinkat).  A writer's temporary file is
 * removed only once its process is gone, as cache_open does. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../ir/util.h"
#include "cache.h"

typedef struct {
    char name[NAME_MAX + 1];
    char base[NAME_MAX + 1]; /* the entry it belongs to: its name without .sum (and .cu) */
    CacheKind kind;
    uint64_t size;
    int64_t mtime; /* ns: entries written or used within one second keep their order */
} CacheFile;

typedef struct {
    CacheFile *f;
    size_t n;
    int others, live_temps;
} CacheScan;

static bool is_hex16(const char *s) {
    for (int i = 0; i < 16; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
    return true;
}

/* "HASH-NAME" + suffix, NAME a model's C name (names.c: letters, digits, '_'; at most 64). */
static bool is_code_name(const char *s, size_t len, const char *suffix) {
    size_t sl = strlen(suffix);
    if (len < 18 + sl || len > 17 + 64 + sl || strcmp(s + len - sl, suffix) || !is_hex16(s) || s[16] != '-')
        return false;
    for (size_t i = 17; i < len - sl; i++) {
        char ch = s[i];
        if (!(ch == '_' || (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z')))
            return false;
    }
    return true;
}

static bool is_data_name(const char *s, size_t len) {
    static const char sfx[] = "-data.idx";
    size_t sl = sizeof sfx - 1;
    if (len == 16 + sl) return is_hex16(s) && !strcmp(s + 16, sfx);
    return len == 33 + sl && is_hex16(s) && s[16] == '-' && is_hex16(s + 17) && !strcmp(s + 33, sfx);
}

CacheKind cache_entry_kind(const char *name, char base[NAME_MAX + 1]) {
    size_t len = strlen(name);
    if (len > NAME_MAX) return CACHE_NOT_OURS;
    memcpy(base, name, len + 1);
    if (len > 4 && !strcmp(base + len - 4, ".sum")) base[len -= 4] = 0;
    bool source = len > 9 && !strcmp(base + len - 9, ".cubin.cu");
    if (source) base[len -= 3] = 0;
    if (is_code_name(base, len, ".cubin")) return CACHE_CUBIN;
    if (source) return CACHE_NOT_OURS;
    if (is_code_name(base, len, ".so")) return CACHE_CPU;
    if (is_data_name(base, len)) return CACHE_DATA;
    return CACHE_NOT_OURS;
}

/* ".tmp-PID-..." of a process that is gone (cache.c's publish names them so). */
static bool dead_temporary(const char *name) {
    long pid;
    return sscanf(name, ".tmp-%ld-", &pid) == 1 && pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

/* Every file of the directory, nnc's classified by entry; the temporary files of writers that
 * died are not counted, and removed when `remove_dead`. */
static void scan(int dirfd, CacheScan *s, bool remove_dead) {
    *s = (CacheScan){0};
    int fd = dup(dirfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0) close(fd);
        return;
    }
    rewinddir(d); /* a dup shares the directory offset, which an earlier scan may have moved */
    size_t cap = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        struct stat st;
        bool mine =
            fstatat(dirfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid();
        if (mine && !strncmp(e->d_name, ".tmp-", 5)) { /* a dead writer's is garbage; a live one's, its work */
            if (!dead_temporary(e->d_name)) s->live_temps++;
            else if (remove_dead) unlinkat(dirfd, e->d_name, 0);
            continue;
        }
        char base[NAME_MAX + 1];
        CacheKind k = mine ? cache_entry_kind(e->d_name, base) : CACHE_NOT_OURS;
        if (k == CACHE_NOT_OURS) {
            s->others++;
            continue;
        }
        if (s->n == cap) s->f = xrealloc(s->f, (cap = cap ? 2 * cap : 64) * sizeof *s->f);
        CacheFile *f = &s->f[s->n++];
        snprintf(f->name, sizeof f->name, "%s", e->d_name);
        memcpy(f->base, base, sizeof f->base);
        f->kind = k;
        f->size = (uint64_t)st.st_size;
        f->mtime = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    }
    closedir(d);
}

static int by_base(const void *a, const void *b) {
    return strcmp(((const CacheFile *)a)->base, ((const CacheFile *)b)->base);
}

/* Files with one base are one entry: its size is theirs together, its time the latest. */
static size_t group(CacheScan *s, CacheFile *entries) {
    if (s->n) qsort(s->f, s->n, sizeof *s->f, by_base);
    size_t ne = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (ne && !strcmp(entries[ne - 1].base, s->f[i].base)) {
            entries[ne - 1].size += s->f[i].size;
            if (s->f[i].mtime > entries[ne - 1].mtime) entries[ne - 1].mtime = s->f[i].mtime;
        } else entries[ne++] = s->f[i];
    }
    return ne;
}

static void tally(const CacheFile *e, size_t ne, CacheReport *r) {
    for (size_t i = 0; i < ne; i++) {
        r->kind[e[i].kind].entries++;
        r->kind[e[i].kind].bytes += e[i].size;
    }
}

/* The cache directory opened for reading what is in it: -1 with *missing when it does not
 * exist (nothing cached yet), -1 with err filled when it cannot be opened; *unsafe says why
 * nnc would not use it (cache_open's reasons), or NULL. */
static int open_existing(const char *dir, bool *missing, const char **unsafe, char *why, size_t wn, char *err,
                         size_t n) {
    *missing = false;
    *unsafe = NULL;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) *missing = true;
        else snprintf(err, n, "%s: cannot open: %s", dir, strerror(errno));
        return -1;
    }
    *unsafe = cache_dir_unsafe(fd, why, wn);
    return fd;
}

bool cache_report(const char *dir, CacheReport *r, char *err, size_t n) {
    *r = (CacheReport){.code_max = cache_limit("NNC_CACHE_MAX", CACHE_CODE_MAX_DEFAULT),
                       .data_max = cache_limit("NNC_DATA_CACHE_MAX", CACHE_DATA_MAX_DEFAULT)};
    int fd = open_existing(dir, &r->missing, &r->unsafe, r->why, sizeof r->why, err, n);
    if (fd < 0) return r->missing;
    CacheScan s;
    scan(fd, &s, false);
    CacheFile *e = xmalloc((s.n + 1) * sizeof *e);
    tally(e, group(&s, e), r);
    r->others = s.others;
    r->temporaries = s.live_temps;
    free(e);
    free(s.f);
    close(fd);
    return true;
}

bool cache_clear(const char *dir, CacheReport *removed, char *err, size_t n) {
    *removed = (CacheReport){0};
    int fd = open_existing(dir, &removed->missing, &removed->unsafe, removed->why, sizeof removed->why, err, n);
    if (fd < 0) return removed->missing;
    if (removed->unsafe) { /* nnc never used it: nothing there is known to be nnc's */
        snprintf(err, n, "%s: not clearing a directory nnc does not use as its cache: %s", dir, removed->unsafe);
        close(fd);
        return false;
    }
    CacheScan s;
    scan(fd, &s, true);
    for (size_t i = 0; i < s.n; i++)
        if (unlinkat(fd, s.f[i].name, 0) != 0 && errno != ENOENT) { /* ENOENT: another nnc removed it */
            snprintf(err, n, "%s/%s: cannot remove: %s", dir, s.f[i].name, strerror(errno));
            free(s.f);
            close(fd);
            return false;
        }
    CacheFile *e = xmalloc((s.n + 1) * sizeof *e);
    tally(e, group(&s, e), removed);
    removed->others = s.others;
    removed->temporaries = s.live_temps;
    free(e);
    free(s.f);
    close(fd);
    return true;
}

static int by_time(const void *a, const void *b) {
    const CacheFile *x = a, *y = b;
    return (x->mtime > y->mtime) - (x->mtime < y->mtime);
}

void cache_trim(const Cache *c, const char *keep) {
    char kb[NAME_MAX + 1];
    CacheKind kk = cache_entry_kind(keep, kb);
    if (c->temporary || (kk != CACHE_CPU && kk != CACHE_CUBIN)) return;
    uint64_t max = cache_limit("NNC_CACHE_MAX", CACHE_CODE_MAX_DEFAULT), total = 0;
    CacheScan s;
    scan(c->dirfd, &s, false);
    CacheFile *e = xmalloc((s.n + 1) * sizeof *e);
    size_t ne = 0, ng = group(&s, e);
    for (size_t i = 0; i < ng; i++) /* the compiled code only: data has its own limit */
        if (e[i].kind == CACHE_CPU || e[i].kind == CACHE_CUBIN) total += (e[ne++] = e[i]).size;
    if (ne) qsort(e, ne, sizeof *e, by_time);
    for (size_t i = 0; i < ne && total > max; i++) {
        if (!strcmp(e[i].base, kb)) continue;
        for (size_t j = 0; j < s.n; j++) /* s.f is sorted by base */
            if (!strcmp(s.f[j].base, e[i].base)) unlinkat(c->dirfd, s.f[j].name, 0);
        total -= e[i].size;
    }
    free(e);
    free(s.f);
}

uint64_t cache_limit(const char *env, uint64_t dflt) {
    const char *v = getenv(env);
    if (!v || !*v) return dflt;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    int shift = !*end ? 0 : !strcmp(end, "K") ? 10 : !strcmp(end, "M") ? 20 : !strcmp(end, "G") ? 30 : -1;
    if (shift < 0 || errno == ERANGE || *v == '-' || !(*v >= '0' && *v <= '9') || x > (UINT64_MAX >> shift)) {
        static bool warned;
        if (!warned)
            fprintf(stderr, "nnc: warning: %s=%s is not a size (bytes, or a number with K, M or G): using %llu bytes\n",
                    env, v, (unsigned long long)dflt);
        warned = true;
        return dflt;
    }
    return (uint64_t)x << shift;
}
