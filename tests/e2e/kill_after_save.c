/* kill_after_save.c - an LD_PRELOAD library for resume_test.sh: the process is killed (SIGKILL)
 * the moment a rename puts a file whose name ends in NNC_KILL_AFTER_RENAME in place, that is
 * just after a checkpoint is saved (io/atomic_file.c writes a temporary file and renames it),
 * before anything the run does next.  A kill there used to lose the metrics records buffered
 * since the last flush: the final save came before they were written, and resuming the finished
 * run writes none.  LD_PRELOAD is taken out of the environment at once, so the compilers nnc runs
 * never load this library. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__attribute__((constructor)) static void drop_preload(void) { unsetenv("LD_PRELOAD"); }

static int ends_with(const char *s, const char *tail) {
    size_t n = strlen(s), t = strlen(tail);
    return t > 0 && n >= t && !strcmp(s + n - t, tail);
}

static void after(const char *to, int rc) {
    const char *tail = getenv("NNC_KILL_AFTER_RENAME");
    if (rc == 0 && tail && ends_with(to, tail)) raise(SIGKILL);
}

int renameat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath) {
    int (*real)(int, const char *, int, const char *) =
        (int (*)(int, const char *, int, const char *))dlsym(RTLD_NEXT, "renameat");
    int rc = real(olddirfd, oldpath, newdirfd, newpath);
    after(newpath, rc);
    return rc;
}

int rename(const char *oldpath, const char *newpath) {
    int (*real)(const char *, const char *) = (int (*)(const char *, const char *))dlsym(RTLD_NEXT, "rename");
    int rc = real(oldpath, newpath);
    after(newpath, rc);
    return rc;
}
