/* cache.c - the compile cache as a security boundary (see cache.h and docs/security.md).
 *
 * A cache directory is opened once and checked through its descriptor (fstat: a directory,
 * owned by us, no group/other write bit), and every entry is then opened relative to that
 * descriptor with O_NOFOLLOW, so no other user can plant or swap what we load, and a
 * symbolic link in the cache is never followed.  An object that is then loaded as code is
 * loaded through the descriptor its checksum was read from (cache_get_fd, cache_fd_path):
 * its path is looked up again by the loader, and whoever controls a parent of the cache
 * directory can rename another directory into that path between the check and the load.
 * Entries are written to a fresh O_EXCL name and renamed into place; a checksum file beside
 * each lets a reader reject a truncated or corrupted entry.  Concurrent writers of one entry
 * write the same bytes; if they ever pair an entry with another writer's checksum, readers
 * see a mismatch and rebuild. */
#include "cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../ir/util.h"
#include "atomic_file.h"

static char *str_dup_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *str_dup_printf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = xmalloc((size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

char *cache_default_dir(void) {
    const char *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    if (x && *x) return str_dup_printf("%s/nnc", x);
    if (!h || !*h) {
        const struct passwd *pw = getpwuid(geteuid());
        h = pw && pw->pw_dir && *pw->pw_dir ? pw->pw_dir : NULL;
    }
    return h ? str_dup_printf("%s/.cache/nnc", h) : NULL;
}

char *cache_path(const Cache *c, const char *name) { return str_dup_printf("%s/%s", c->dir, name); }

/* mkdir -p with mode 0700 for every directory it creates (XDG asks 0700 for ~/.cache). */
static int mkdirs_private(const char *path) {
    char *buf = str_dup_printf("%s", path);
    int rc = 0;
    for (char *p = buf + 1; *p && rc == 0; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(buf, 0700) != 0 && errno != EEXIST) rc = -1;
            *p = '/';
        }
    if (rc == 0 && mkdir(buf, 0700) != 0 && errno != EEXIST) rc = -1;
    int saved = errno;
    free(buf);
    errno = saved;
    return rc;
}

/* Why the directory behind fd must not be trusted, or NULL when it may be. */
static const char *unsafe_reason(int fd, char *why, size_t n) {
    struct stat st;
    if (fstat(fd, &st) != 0) return strerror(errno);
    if (!S_ISDIR(st.st_mode)) return "not a directory";
    if (st.st_uid != geteuid()) {
        snprintf(why, n, "owned by uid %u, not by you (uid %u)", (unsigned)st.st_uid, (unsigned)geteuid());
        return why;
    }
    if (st.st_mode & (S_IWGRP | S_IWOTH)) {
        snprintf(why, n, "writable by %s (mode %04o; chmod 700 it)",
                 st.st_mode & S_IWOTH ? "others" : "group", (unsigned)(st.st_mode & 07777));
        return why;
    }
    if (faccessat(fd, ".", W_OK, AT_EACCESS) != 0) return "not writable";
    return NULL;
}

const char *cache_dir_unsafe(int fd, char *why, size_t n) { return unsafe_reason(fd, why, n); }

/* Once per directory and process: the CPU code, cubins and data all ask for the cache. */
static void warn_fallback(const char *dir, const char *why) {
    static char *warned;
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;   /* the train and test sets load in two threads */
    pthread_mutex_lock(&lock);
    if (!warned || strcmp(warned, dir)) {
        free(warned);
        warned = str_dup_printf("%s", dir);
        fprintf(stderr, "nnc: warning: not using the cache directory %s: %s; compiling in a private "
                        "temporary directory instead\n", dir, why);
    }
    pthread_mutex_unlock(&lock);
}

static bool open_private(Cache *c, char *err, size_t n) {
    const char *tmp = getenv("TMPDIR");
    char *templ = str_dup_printf("%s/nnc-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(templ)) {   /* mkdtemp makes it 0700 and fails rather than reuse a name */
        snprintf(err, n, "%s: cannot create a private temporary directory: %s", templ, strerror(errno));
        free(templ);
        return false;
    }
    /* and it is opened by its name: check that what opened is still the directory made */
    char why[160];
    const char *reason = NULL;
    c->dirfd = open(templ, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (c->dirfd < 0) reason = strerror(errno);
    else reason = unsafe_reason(c->dirfd, why, sizeof why);
    if (reason) {
        snprintf(err, n, "%s: cannot open the private temporary directory: %s", templ, reason);
        if (c->dirfd >= 0) close(c->dirfd);
        c->dirfd = -1;
        rmdir(templ);
        free(templ);
        return false;
    }
    c->dir = templ;
    c->temporary = true;
    return true;
}

/* Temporary files of writers that died (".tmp-PID-..." whose PID is gone) would stay forever. */
static void remove_dead_temporaries(int dirfd) {
    int fd = dup(dirfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d && fd >= 0) close(fd);
    for (struct dirent *e; d && (e = readdir(d));) {
        long pid;
        if (sscanf(e->d_name, ".tmp-%ld-", &pid) == 1 && pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH)
            unlinkat(dirfd, e->d_name, 0);
    }
    if (d) closedir(d);
}

bool cache_open(Cache *c, const char *dir, char *err, size_t n) {
    *c = (Cache){.dirfd = -1};
    if (!dir) return open_private(c, err, n);
    char why[160];
    const char *reason = NULL;
    int fd = -1;
    if (mkdirs_private(dir) != 0) reason = strerror(errno);
    else if ((fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) reason = strerror(errno);
    else reason = unsafe_reason(fd, why, sizeof why);
    if (reason) {
        warn_fallback(dir, reason);
        if (fd >= 0) close(fd);
        return open_private(c, err, n);
    }
    c->dirfd = fd;
    c->dir = str_dup_printf("%s", dir);
    remove_dead_temporaries(fd);
    return true;
}

/* Empties and removes a private directory: only this process has written there. */
static void remove_private(Cache *c) {
    int fd = dup(c->dirfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d && fd >= 0) close(fd);
    for (struct dirent *e; d && (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) unlinkat(c->dirfd, e->d_name, 0);
    if (d) closedir(d);
    rmdir(c->dir);
}

void cache_close(Cache *c) {
    if (c->dirfd < 0) return;
    if (c->temporary) remove_private(c);
    close(c->dirfd);
    free(c->dir);
    *c = (Cache){.dirfd = -1};
}

/* Entry NAME opened without following a link, if it is a regular file of ours (*st filled);
 * -1 otherwise. */
static int entry_open(const Cache *c, const char *name, struct stat *st) {
    int fd = openat(c->dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return -1;
    if (fstat(fd, st) == 0 && S_ISREG(st->st_mode) && st->st_uid == geteuid()) return fd;
    close(fd);
    return -1;
}

/* An entry that is used must stay what was checked: no one else may write to it.  (Only this
 * user's processes write in the directory, and they never rewrite an entry in place.) */
static int entry_open_closed(const Cache *c, const char *name, struct stat *st) {
    int fd = entry_open(c, name, st);
    if (fd >= 0 && (st->st_mode & (S_IWGRP | S_IWOTH))) {
        close(fd);
        return -1;
    }
    return fd;
}

/* The `size` bytes of fd from its start (heap, NUL-terminated), or NULL. */
static char *read_fd(int fd, size_t size) {
    char *buf = xmalloc(size + 1);
    size_t got = 0;
    while (got < size) {
        ssize_t r = pread(fd, buf + got, size - got, (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            free(buf);
            return NULL;
        }
        got += (size_t)r;
    }
    buf[size] = 0;
    return buf;
}

/* Entry NAME read whole, after entry_open's checks (`closed`: entry_open_closed's). */
static bool entry_read(const Cache *c, const char *name, bool closed, void **data, size_t *len) {
    struct stat st;
    int fd = closed ? entry_open_closed(c, name, &st) : entry_open(c, name, &st);
    *data = fd >= 0 ? read_fd(fd, (size_t)st.st_size) : NULL;
    *len = *data ? (size_t)st.st_size : 0;
    if (fd >= 0) close(fd);
    return *data != NULL;
}

bool cache_read(const Cache *c, const char *name, void **data, size_t *len) {
    return entry_read(c, name, false, data, len);
}

int cache_open_entry(const Cache *c, const char *name) {
    struct stat st;
    return entry_open(c, name, &st);
}

/* The entry, mapped: the same checks as cache_get; an empty file has nothing to map and is
 * refused. */
static bool cache_map_raw(const Cache *c, const char *name, void **map, size_t *len) {
    *map = NULL;
    *len = 0;
    struct stat st;
    int fd = entry_open_closed(c, name, &st);
    if (fd < 0) return false;
    void *p = st.st_size > 0 ? mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
    close(fd);
    if (p == MAP_FAILED) return false;
    *map = p;
    *len = (size_t)st.st_size;
    return true;
}

static uint64_t sum_round(uint64_t h, uint64_t w) {
    h ^= w * 0x9e3779b97f4a7c15ULL;
    h = h << 31 | h >> 33;
    return h * 0xc2b2ae3d27d4eb4fULL;
}

/* A checksum against accidents (truncation, torn or flipped bytes), not attacks: four
 * independent lanes of 64-bit words, so it runs at memory speed on cached data sets, where a
 * byte-serial hash (FNV-1a) took ~8 ns per byte; then the tail, the length and a final mix. */
static uint64_t checksum(const void *data, size_t len) {
    const unsigned char *p = data;
    uint64_t lane[4] = {1, 2, 3, 4}, w;
    size_t i = 0;
    for (; i + 32 <= len; i += 32)
        for (int k = 0; k < 4; k++) {
            memcpy(&w, p + i + 8 * k, 8);
            lane[k] = sum_round(lane[k], w);
        }
    uint64_t h = lane[0] ^ (lane[1] << 1 | lane[1] >> 63) ^ (lane[2] << 7 | lane[2] >> 57) ^ (lane[3] << 13 | lane[3] >> 51);
    for (; i < len; i++) h = sum_round(h, p[i]);
    h = sum_round(h, (uint64_t)len);
    h ^= h >> 33;   /* murmur3's finalizer: every input bit reaches every output bit */
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return h;
}

void cache_checksum_text(const void *data, size_t len, char out[64]) {
    snprintf(out, 64, "nnc-sum2 %zu %016" PRIx64 "\n", len, checksum(data, len));
}

/* Whether NAME.sum, written with the entry, matches its bytes now. */
static bool sum_matches(const Cache *c, const char *name, const void *data, size_t len) {
    void *sum;
    size_t sum_len;
    char *sum_name = str_dup_printf("%s.sum", name), want[64];
    bool ok = cache_read(c, sum_name, &sum, &sum_len);
    free(sum_name);
    if (!ok) return false;
    cache_checksum_text(data, len, want);
    ok = sum_len == strlen(want) && !memcmp(sum, want, sum_len);
    free(sum);
    return ok;
}

/* Entries are replaced by rename, never written in place: a mapped inode keeps the bytes
 * checked here for as long as it is mapped. */
bool cache_map(const Cache *c, const char *name, void **map, size_t *len) {
    if (!cache_map_raw(c, name, map, len)) return false;
    if (sum_matches(c, name, *map, *len)) return true;
    munmap(*map, *len);
    *map = NULL;
    *len = 0;
    return false;
}

bool cache_get(const Cache *c, const char *name, void **data, size_t *len) {
    if (entry_read(c, name, true, data, len) && sum_matches(c, name, *data, *len)) {
        utimensat(c->dirfd, name, NULL, AT_SYMLINK_NOFOLLOW); /* recently used: evicted last (cache_trim) */
        return true;
    }
    free(*data);
    *data = NULL;
    *len = 0;
    return false;
}

/* The checksum is computed over bytes read through the descriptor that is returned, so the
 * caller holds the very file that was checked, whatever has been renamed since. */
int cache_get_fd(const Cache *c, const char *name) {
    struct stat st;
    int fd = entry_open_closed(c, name, &st);
    char *data = fd >= 0 ? read_fd(fd, (size_t)st.st_size) : NULL;
    bool ok = data && sum_matches(c, name, data, (size_t)st.st_size);
    free(data);
    if (!ok && fd >= 0) close(fd);
    if (ok) futimens(fd, NULL); /* recently used: evicted last (cache_trim) */
    return ok ? fd : -1;
}

char *cache_fd_path(int fd, Cache *priv, const char *name) {
    char *path = str_dup_printf("/proc/self/fd/%d", fd);
    struct stat a, b;
    if (fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino) return path;
    free(path);
    char err[512];
    char *data = fstat(fd, &a) == 0 && S_ISREG(a.st_mode) ? read_fd(fd, (size_t)a.st_size) : NULL;
    bool ok = data && cache_open(priv, NULL, err, sizeof err) && cache_put(priv, name, data, (size_t)a.st_size, 0600);
    free(data);
    return ok ? cache_path(priv, name) : NULL;
}

/* Writes a fresh, never-before-existing temporary file and renames it to `name`; rename
 * replaces a symlink at `name` itself, never the file it points at.  Not fsynced: a reader
 * checks the entry against its checksum, and a torn one is rebuilt. */
static bool publish(const Cache *c, const char *name, const void *data, size_t len, mode_t mode) {
    static _Atomic unsigned counter;   /* unique per thread too: the library may compile in parallel */
    char *tmp = str_dup_printf(".tmp-%ld-%u-%s", (long)getpid(), counter++, name);
    AtomicFile f;
    if (atomic_file_open(&f, c->dirfd, name, tmp, mode) == 0) atomic_file_write(&f, data, len);
    bool ok = atomic_file_commit(&f, 0) == 0;
    free(tmp);
    return ok;
}

bool cache_put(const Cache *c, const char *name, const void *data, size_t len, mode_t mode) {
    char sum[64];
    cache_checksum_text(data, len, sum);
    char *sum_name = str_dup_printf("%s.sum", name);
    bool ok = publish(c, name, data, len, mode) && publish(c, sum_name, sum, strlen(sum), 0600);
    free(sum_name);
    if (ok) cache_trim(c, name); /* compiled code stays under NNC_CACHE_MAX */
    return ok;
}
