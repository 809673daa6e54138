/* cache.h - the on-disk cache of compiled code (CPU shared objects, CUDA cubins, decompressed
 * data), and the private temporary directory used when there is no cache.
 *
 *   char *dir = cache_default_dir();          // $XDG_CACHE_HOME/nnc, ~/.cache/nnc or NULL
 *   Cache c;
 *   if (!cache_open(&c, dir, err, n)) ...     // dir refused or NULL: a private mkdtemp dir
 *   void *data; size_t len;
 *   if (!cache_get(&c, "0123abcd-mlp.so", &data, &len)) {
 *       ... build it ...
 *       cache_put(&c, "0123abcd-mlp.so", bytes, nbytes, 0644);
 *   }
 *   cache_close(&c);                          // removes the private directory, if any
 *
 * What is trusted: only a directory that is the user's own and not writable by group or
 * others (as ssh treats ~/.ssh); anything else gets a warning and the private fallback.  Every
 * entry NAME has a checksum file NAME.sum written by the same process; an entry is used only
 * when both agree, so a truncated or corrupted file is rebuilt, never loaded.  Files are
 * created with O_EXCL | O_NOFOLLOW and explicit modes under a temporary name and published by
 * rename(2), so readers see whole files, and a symbolic link planted in the cache is replaced,
 * never followed.  What is loaded as code is loaded through the descriptor it was checked on
 * (cache_get_fd, cache_fd_path), never again by its path.  See docs/security.md. */
#ifndef NNC_CACHE_H
#define NNC_CACHE_H
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct {
    int dirfd;      /* the verified directory; every entry is opened relative to it */
    char *dir;      /* its path (heap), for messages and dlopen */
    bool temporary; /* a private mkdtemp directory, emptied and removed by cache_close */
} Cache;

/* The user's cache directory: $XDG_CACHE_HOME/nnc, else $HOME/.cache/nnc, else the home
 * directory from the password database; NULL when there is none (heap string). */
char *cache_default_dir(void);

/* Opens `dir` (created 0700 with its parents) as the cache.  When dir is NULL, cannot be
 * created or written, or is not safe, opens a private temporary directory instead, printing
 * a warning that says why for the last two.  False (err filled) only if that fails too. */
bool cache_open(Cache *c, const char *dir, char *err, size_t n);
void cache_close(Cache *c);

/* "DIR/NAME" (heap). */
char *cache_path(const Cache *c, const char *name);

/* Reads entry NAME into *data (heap, NUL-terminated) if it is a regular file of ours, not
 * writable by group or others, whose checksum matches NAME.sum; false otherwise (missing,
 * corrupted, truncated, a symlink, open to others). */
bool cache_get(const Cache *c, const char *name, void **data, size_t *len);
/* The same checks, for a loader that maps the file itself (dlopen): entry NAME open read-only
 * (O_CLOEXEC), the checksum computed over bytes read through that descriptor; -1 if the
 * checks fail.  Load through the descriptor (cache_fd_path), never by the entry's path: a
 * name can be made to lead elsewhere after the check, an open file cannot. */
int cache_get_fd(const Cache *c, const char *name);
/* Entry NAME open read-only if it is a regular file of ours (no checksum: a private build
 * directory's own output); -1 otherwise. */
int cache_open_entry(const Cache *c, const char *name);
/* A path that opens the file open as fd, for loaders that take only a path: /proc/self/fd/N,
 * the open file itself, when /proc shows it there; else (no /proc) a copy of fd's bytes as
 * NAME in `priv`, a fresh private directory (mkdtemp) that is then opened into *priv: the
 * caller closes it (cache_close) after loading.  Heap; NULL if neither works.  glibc's dlopen
 * takes a name it already loaded for that object, without opening anything: a /proc/self/fd/N
 * given to dlopen must name that file for as long as the object stays loaded (keep fd open). */
char *cache_fd_path(int fd, Cache *priv, const char *name);
/* The same without a copy: the entry mapped read-only (munmap(*map, *len) when done), for the
 * large decompressed data sets, whose pages then come straight from the page cache. */
bool cache_map(const Cache *c, const char *name, void **map, size_t *len);

/* Publishes NAME (with mode `mode`, whatever the umask) and its checksum, atomically. */
bool cache_put(const Cache *c, const char *name, const void *data, size_t len, mode_t mode);

/* Reads NAME from the directory without following a symlink; false if missing or not ours.
 * No checksum: for files this process just wrote (a private build). */
bool cache_read(const Cache *c, const char *name, void **data, size_t *len);

/* The checksum line stored beside every entry: the byte count and a 64-bit hash of the bytes. */
void cache_checksum_text(const void *data, size_t len, char out[64]);
/* Why nnc must not use the directory open as fd (cache_open's checks: a directory of ours, not
 * writable by group or others, writable by us), or NULL. */
const char *cache_dir_unsafe(int fd, char *why, size_t n);

/* ---- cache_admin.c: the directory as entries (nnc --cache-info, --cache-clear, the limit) ----
 * An entry is a CPU object (HASH-NAME.so), a cubin (HASH-NAME.cubin and its .cu source) or a
 * decompressed data set (SOURCE-VERSION-data.idx), each file with its .sum. */
typedef enum { CACHE_CPU, CACHE_CUBIN, CACHE_DATA, CACHE_KINDS, CACHE_NOT_OURS = -1 } CacheKind;
#define CACHE_CODE_MAX_DEFAULT ((uint64_t)1 << 30) /* NNC_CACHE_MAX: CPU objects and cubins */
#define CACHE_DATA_MAX_DEFAULT ((uint64_t)2 << 30) /* NNC_DATA_CACHE_MAX: decompressed data */

typedef struct {
    struct {
        int entries;
        uint64_t bytes; /* every file of the entries, checksums included */
    } kind[CACHE_KINDS];
    int others; /* files that are not nnc's entries: left alone */
    int temporaries; /* files a running nnc is writing */
    bool missing; /* the directory does not exist: nothing cached yet */
    const char *unsafe; /* why nnc does not use the directory (then it is never cleared) */
    char why[160];
    uint64_t code_max, data_max; /* the limits: NNC_CACHE_MAX, NNC_DATA_CACHE_MAX */
} CacheReport;

/* Which entry the file NAME belongs to (`base`: its entry's main file), or CACHE_NOT_OURS. */
CacheKind cache_entry_kind(const char *name, char base[NAME_MAX + 1]);
/* What directory `dir` holds (nothing is created); false with err filled if it cannot be read. */
bool cache_report(const char *dir, CacheReport *r, char *err, size_t n);
/* Removes nnc's entries from `dir` (and its dead writers' temporary files), and nothing else;
 * `removed` counts what went.  Refuses a directory nnc would not use (cache_open's checks). */
bool cache_clear(const char *dir, CacheReport *removed, char *err, size_t n);
/* After the entry `keep` was written: while the compiled code (CPU objects and cubins) takes more
 * than NNC_CACHE_MAX bytes (default 1 GiB), removes the least recently used entry, never `keep`.
 * Data entries have their own limit (train/dataset.c, NNC_DATA_CACHE_MAX). */
void cache_trim(const Cache *c, const char *keep);
/* The size in environment variable `env` (bytes, or with a K, M or G suffix), else `dflt` (with
 * a warning when it is set but not a size). */
uint64_t cache_limit(const char *env, uint64_t dflt);
#endif
