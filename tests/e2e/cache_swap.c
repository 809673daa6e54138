/* cache_swap.c - an LD_PRELOAD library for cache_test.sh that plays a local user who controls a
 * parent of the directory nnc loads a compiled object from (the cache, or a private build
 * directory under $TMPDIR), and renames a directory of their own into its place at the worst
 * moment: after nnc has checked the object, just before the dynamic loader opens it.  Such a
 * user can do it from outside with rename(2) in a loop and wins the race often enough; here
 * it is done from inside, so that the test fails every time on a loader that opens the object
 * by its path again.
 *
 * Only files under NNC_SWAP_UNDER (the test's own directory) are touched or counted, and only
 * in nnc itself: LD_PRELOAD is taken out of the environment at once, so the compilers nnc runs
 * (whose linker dlopens its plugin) never see this library.  At the NNC_SWAP_AT-th dlopen of
 * such a file (1 = the first; 0 or unset: none), named by its path or as /proc/self/fd/N, it
 * moves the directory holding the file to DIR.aside, makes a directory DIR, mode 0777, with a
 * link to NNC_SWAP_PLANT under the file's name, lets dlopen run, and puts everything back.
 * Every such call is logged to NNC_SWAP_LOG ("dlopen PATH FILE", "swapped DIR").  The planted
 * object (cache_planted.c) leaves a marker if it is ever run. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void log_line(const char *what, const char *a, const char *b) {
    const char *log = getenv("NNC_SWAP_LOG");
    FILE *f = log ? fopen(log, "a") : NULL;
    if (!f) return;
    fprintf(f, "%s %s%s%s\n", what, a, b ? " " : "", b ? b : "");
    fclose(f);
}

/* The file `path` names: what /proc/self/fd/N links to, else path itself. */
static void file_of(const char *path, char *out, size_t n) {
    ssize_t k = strncmp(path, "/proc/self/fd/", 14) ? -1 : readlink(path, out, n - 1);
    if (k >= 0) out[k] = 0;
    else snprintf(out, n, "%s", path);
}

__attribute__((constructor)) static void swap_only_here(void) { unsetenv("LD_PRELOAD"); }

void *dlopen(const char *path, int flags) {
    static int calls;
    void *(*real)(const char *, int) = (void *(*)(const char *, int))dlsym(RTLD_NEXT, "dlopen");
    const char *at = getenv("NNC_SWAP_AT"), *plant = getenv("NNC_SWAP_PLANT"), *under = getenv("NNC_SWAP_UNDER");
    char file[PATH_MAX], aside[PATH_MAX + 8], link[PATH_MAX + 8];
    if (!path || !under || !*under) return real(path, flags);
    file_of(path, file, sizeof file);
    if (strncmp(file, under, strlen(under)) || file[strlen(under)] != '/') return real(path, flags);
    log_line("dlopen", path, file);
    char *slash = strrchr(file, '/');
    if (!at || atoi(at) != ++calls || !plant || slash == file) return real(path, flags);
    *slash = 0;   /* file is now the directory, slash + 1 the name */
    snprintf(aside, sizeof aside, "%s.aside", file);
    snprintf(link, sizeof link, "%s/%s", file, slash + 1);
    if (rename(file, aside) != 0 || mkdir(file, 0777) != 0 || chmod(file, 0777) != 0 || symlink(plant, link) != 0) {
        perror("cache_swap: swap");
        exit(99);
    }
    log_line("swapped", file, NULL);
    void *h = real(path, flags);
    if (unlink(link) != 0 || rmdir(file) != 0 || rename(aside, file) != 0) {
        perror("cache_swap: swap back");
        exit(99);
    }
    return h;
}
