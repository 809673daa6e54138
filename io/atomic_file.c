/* atomic_file.c - replacing a file whole or not at all (see atomic_file.h). */
#define _XOPEN_SOURCE 700 /* fsync, fchmod, openat, readlink, strndup under -std=c11 */

#include "atomic_file.h"

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

#include "data_impl.h" /* data_err */

/* Creates the temporary: a new file only (O_EXCL), never through a link planted at its name
 * (O_NOFOLLOW), so a shared directory such as /tmp cannot redirect the write.  With
 * ATOMIC_FILE_KEEP_MODE it takes the permission bits of the file it will replace exactly, so
 * that a checkpoint made private (a rescue copy: 0600) stays private, and a new file gets 0666
 * less the umask; an explicit mode is set whatever the umask. */
int atomic_file_open(AtomicFile *f, int dirfd, const char *name, const char *tmp, mode_t mode) {
    struct stat old;
    bool keep = mode == ATOMIC_FILE_KEEP_MODE, exact = !keep;
    *f = (AtomicFile){.dirfd = dirfd, .name = name, .tmp = tmp, .fd = -1};
    if (keep && fstatat(dirfd, name, &old, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(old.st_mode)) {
        f->replaces = exact = true;
        mode = old.st_mode & 0777;
    }
    f->fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, exact ? 0600 : 0666);
    if (f->fd < 0) return f->err = errno;
    if (exact && fchmod(f->fd, mode) != 0) {
        f->err = errno;
        close(f->fd);
        unlinkat(dirfd, tmp, 0);
        f->fd = -1;
    }
    return f->err;
}

void atomic_file_write(AtomicFile *f, const void *data, size_t n) {
    const char *p = data;
    while (!f->err && f->fd >= 0 && n > 0) {
        ssize_t w = write(f->fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            f->err = w < 0 ? errno : EIO;
            break;
        }
        p += w;
        n -= (size_t)w;
    }
}

/* fsync of the directory, so that the rename itself survives a power cut.  Best effort: the
 * file is complete either way, and some filesystems refuse. */
static void atomic_file_dir_sync(const AtomicFile *f) {
    int fd = f->dirfd;
    if (fd == AT_FDCWD) { /* the directory of the name */
        const char *slash = strrchr(f->name, '/');
        char *dir = slash ? strndup(f->name, slash == f->name ? 1 : (size_t)(slash - f->name)) : strdup(".");
        fd = dir ? open(dir, O_RDONLY | O_CLOEXEC) : -1;
        free(dir);
    }
    if (fd >= 0 && fsync(fd) != 0) { /* ignored on purpose: see above */
    }
    if (fd >= 0 && fd != f->dirfd) close(fd);
}

int atomic_file_commit(AtomicFile *f, int flags) {
    if (f->fd < 0) return f->err ? f->err : EBADF;
    if (!f->err && (flags & ATOMIC_FILE_DURABLE) && fsync(f->fd) != 0) f->err = errno;
    if (close(f->fd) != 0 && !f->err) f->err = errno;
    f->fd = -1;
    if (!f->err && renameat(f->dirfd, f->tmp, f->dirfd, f->name) != 0) f->err = errno;
    if (f->err) {
        f->unlink_err = unlinkat(f->dirfd, f->tmp, 0) != 0 && errno != ENOENT ? errno : 0;
        return f->err;
    }
    if (flags & ATOMIC_FILE_DURABLE) atomic_file_dir_sync(f);
    return 0;
}

/* The file a save to `path` must replace: path itself, or, when path is a symbolic link, the
 * file it leads to (which may not exist yet), so that saving through a link updates its target
 * instead of replacing the link with a regular file.  malloc'd; NULL when out of memory. */
char *atomic_file_target(const char *path) {
    char *cur = strdup(path);
    int hops;
    for (hops = 0; cur && hops < 40; hops++) {
        struct stat st;
        char link[4096], *next, *slash;
        ssize_t k;
        if (lstat(cur, &st) != 0 || !S_ISLNK(st.st_mode)) return cur;
        k = readlink(cur, link, sizeof link - 1);
        if (k < 0) return cur; /* let the write report it */
        link[k] = '\0';
        slash = strrchr(cur, '/');
        next = malloc(strlen(cur) + (size_t)k + 2);
        if (next && (link[0] == '/' || !slash)) strcpy(next, link);
        else if (next) sprintf(next, "%.*s/%s", (int)(slash - cur), cur, link);
        free(cur);
        cur = next;
    }
    return cur; /* a loop of links: the write fails with ELOOP-like errors and says so */
}

static const char *atomic_file_kind(mode_t m) {
    return S_ISDIR(m) ? "a directory"
        : S_ISFIFO(m) ? "a FIFO"
        : S_ISCHR(m)  ? "a character device"
        : S_ISBLK(m)  ? "a block device"
        : S_ISSOCK(m) ? "a socket"
                      : "not a regular file";
}

/* A save replaces what is at `target` by rename(2), which would put the checkpoint in the place
 * of a FIFO or a device (as root, /dev/null itself) and fail only after the whole write over a
 * directory: nothing but a regular file (or nothing) may be there.  `path` is what the caller
 * named, `target` where its links lead. */
int atomic_file_target_check(const char *path, const char *target, char *err, size_t errlen) {
    struct stat st;
    if (lstat(target, &st) != 0 || S_ISREG(st.st_mode)) return 0;
    if (strcmp(path, target) != 0)
        data_err(err, errlen, "%s: leads to %s, %s, not a regular file; not replaced", path, target,
                 atomic_file_kind(st.st_mode));
    else data_err(err, errlen, "%s: is %s, not a regular file; not replaced", path, atomic_file_kind(st.st_mode));
    return -1;
}

/* Removes temporary files that an earlier save to `path` left behind when it was killed
 * (SIGKILL, power cut): only names of our own pattern "<file>.tmp.<pid>", only regular files
 * owned by this user, and only when no process <pid> exists any more. */
void atomic_file_tmp_sweep(const char *path) {
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    size_t blen = strlen(base), dlen = slash ? (size_t)(slash - path) : 0;
    char *dir = malloc(dlen + 2), full[4096];
    DIR *d;
    struct dirent *e;
    if (!dir) return;
    if (slash) snprintf(dir, dlen + 2, "%.*s", (int)(dlen ? dlen : 1), dlen ? path : "/");
    else strcpy(dir, ".");
    d = opendir(dir);
    while (d && (e = readdir(d)) != NULL) {
        const char *p = e->d_name + blen + 5;
        struct stat st;
        long pid;
        char *end;
        if (strncmp(e->d_name, base, blen) != 0 || strncmp(e->d_name + blen, ".tmp.", 5) != 0 || *p < '1' || *p > '9')
            continue;
        pid = strtol(p, &end, 10);
        if (*end || pid <= 0 || pid == (long)getpid() || pid > INT_MAX || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        if (snprintf(full, sizeof full, "%s/%s", dir, e->d_name) >= (int)sizeof full) continue;
        if (lstat(full, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == getuid()) unlink(full);
    }
    if (d) closedir(d);
    free(dir);
}
