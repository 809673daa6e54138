/* atomic_file.h - a file replaced whole or not at all: written under a fresh temporary name in
 * the destination's directory and renamed over it, so that readers see the old file or the new
 * one, never half of one (rename(2) is atomic), and a failed write leaves the old one as it was.
 *
 *   AtomicFile f;
 *   int e = atomic_file_open(&f, AT_FDCWD, "ckpt.safetensors", "ckpt.safetensors.tmp.123",
 *                            ATOMIC_FILE_KEEP_MODE);
 *   if (e) ... nothing was created; strerror(e) ...
 *   atomic_file_write(&f, bytes, n);                        // as often as needed
 *   e = atomic_file_commit(&f, ATOMIC_FILE_DURABLE);        // 0, or the first failure's errno
 *
 * The temporary is created with O_CREAT | O_EXCL | O_NOFOLLOW: always a new file, never one
 * that a link planted at its name leads to.  rename(2) replaces a link at the destination
 * itself, never what it points at: a caller that means to write through links resolves them
 * first (atomic_file_target), and one that must not replace a FIFO or a device checks it
 * (atomic_file_target_check).  Callers name the temporaries, and sweep the ones that writers
 * killed mid-write left: the checkpoints (safetensors.c: "<file>.tmp.<pid>",
 * atomic_file_tmp_sweep) and the compile cache (cache.c: ".tmp-<pid>-<n>-<name>", relative to
 * its open directory).  Private to io/. */
#ifndef NNC_ATOMIC_FILE_H
#define NNC_ATOMIC_FILE_H
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct {
    int dirfd; /* the directory both names are relative to (AT_FDCWD: the working one) */
    const char *name; /* the destination (not owned) */
    const char *tmp; /* the temporary, in the same directory (not owned) */
    int fd; /* the temporary, open for writing; -1 once closed */
    int err; /* the errno of the first step that failed (sticky), or 0 */
    int unlink_err; /* after a failed commit: why the temporary could not be removed, or 0 */
    bool replaces; /* ATOMIC_FILE_KEEP_MODE found a regular file at name */
} AtomicFile;

/* atomic_file_open's mode: the permission bits of the regular file it replaces, or for a new
 * file 0666 less the umask.  Any other mode is set exactly, whatever the umask. */
#define ATOMIC_FILE_KEEP_MODE ((mode_t)-1)
/* atomic_file_commit's flag: fsync the file before the rename, and its directory after. */
#define ATOMIC_FILE_DURABLE 1

/* Creates tmp for writing.  0, or errno with nothing left behind. */
int atomic_file_open(AtomicFile *f, int dirfd, const char *name, const char *tmp, mode_t mode);
/* Appends n bytes; after a failure it does nothing (the commit reports it). */
void atomic_file_write(AtomicFile *f, const void *data, size_t n);
/* Closes tmp and renames it over name: 0, or the errno of the first failure of the open, a
 * write or this, the temporary then removed and name untouched. */
int atomic_file_commit(AtomicFile *f, int flags);

/* The file a write to path replaces: path, or the file its symbolic links lead to (heap). */
char *atomic_file_target(const char *path);
/* 0 when target is a regular file or nothing; -1 with err filled for anything else. */
int atomic_file_target_check(const char *path, const char *target, char *err, size_t errlen);
/* Removes the "<path>.tmp.<pid>" files of writers that died. */
void atomic_file_tmp_sweep(const char *path);
#endif
