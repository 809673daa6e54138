/* cuda_libs_test.c - where nnc looks for the CUDA libraries, and what it says when they fail.
 *
 * Builds a fake toolkit (CUDA_HOME with lib64/ and lib/) and fake CUDA 13 and cuDNN wheels
 * (VIRTUAL_ENV/lib/python3.X/site-packages/nvidia/cu13/lib, .../nvidia/cudnn/lib) in a temporary
 * folder and checks that they are searched, the toolkit first; then that a library which exists
 * but does not load is reported with the loader's complaint, and a missing one with the folders
 * searched. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../codegen/cuda/cuda_backend.h"

static int fails;
#define CHECK(cond, ...)                        \
    do {                                        \
        if (!(cond)) {                          \
            printf("FAIL: " __VA_ARGS__);       \
            printf("\n");                       \
            fails++;                            \
        }                                       \
    } while (0)

static void mk(const char *root, const char *sub) {
    char p[1024], *q;
    snprintf(p, sizeof p, "%s/%s", root, sub);
    for (q = p + strlen(root) + 1; *q; q++)
        if (*q == '/') {
            *q = 0;
            mkdir(p, 0700);
            *q = '/';
        }
    mkdir(p, 0700);
}

static int index_of(char (*dirs)[512], int n, const char *want) {
    for (int i = 0; i < n; i++)
        if (!strcmp(dirs[i], want)) return i;
    return -1;
}

int main(void) {
    char root[] = "/tmp/nnc-cudalibs-XXXXXX";
    if (!mkdtemp(root)) return 1;
    char tk[600], venv[600], wheel[700], p[1024];
    snprintf(tk, sizeof tk, "%s/toolkit", root);
    snprintf(venv, sizeof venv, "%s/venv", root);
    mk(root, "toolkit/lib64");
    mk(root, "toolkit/lib");
    mk(root, "venv/lib/python3.11/site-packages/nvidia/cu13/lib");
    mk(root, "venv/lib/python3.11/site-packages/nvidia/cudnn/lib");
    snprintf(wheel, sizeof wheel, "%s/lib/python3.11/site-packages/nvidia/cu13/lib", venv);
    setenv("CUDA_HOME", tk, 1);
    setenv("VIRTUAL_ENV", venv, 1);

    char dirs[64][512];
    int n = cuda_libs_search_dirs(dirs, 64);
    snprintf(p, sizeof p, "%s/lib64", tk);
    int i64 = index_of(dirs, n, p);
    snprintf(p, sizeof p, "%s/lib", tk);
    int ilib = index_of(dirs, n, p);
    int iwheel = index_of(dirs, n, wheel);
    CHECK(i64 >= 0, "CUDA_HOME/lib64 is not searched");
    CHECK(ilib >= 0, "CUDA_HOME/lib is not searched (only lib64 was, before)");
    CHECK(iwheel >= 0, "the CUDA 13 wheel folder %s is not searched", wheel);
    snprintf(p, sizeof p, "%s/lib/python3.11/site-packages/nvidia/cudnn/lib", venv);
    CHECK(index_of(dirs, n, p) >= 0, "cuDNN's wheel folder %s is not searched", p);
    CHECK(i64 < iwheel && ilib < iwheel, "the toolkit CUDA_HOME names must come before the wheels");

    /* a library that exists but is not one: the loader's complaint is reported */
    snprintf(p, sizeof p, "%s/lib/libnnc_test_broken.so.13", tk);
    FILE *f = fopen(p, "w");
    fputs("not an ELF file\n", f);
    fclose(f);
    static const char *const broken[] = {"libnnc_test_broken.so.13", NULL};
    char why[4096];
    void *h = cuda_libs_open("the test library", broken, NULL, 0, why, sizeof why);
    CHECK(!h, "a text file loaded as a library");
    CHECK(strstr(why, "the last that exists failed") && strstr(why, "libnnc_test_broken.so.13"),
          "a broken library is not reported as such: %s", why);
    printf("broken:  %s\n", why);

    static const char *const missing[] = {"libnnc_test_missing.so.13", NULL};
    h = cuda_libs_open("the test library", missing, NULL, 0, why, sizeof why);
    CHECK(!h && strstr(why, tk) && strstr(why, wheel) && !strstr(why, "failed:"),
          "a missing library must list the folders searched: %s", why);
    printf("missing: %s\n", why);

    /* found by path in a toolkit folder: the folder is returned for preloading helpers */
    snprintf(p, sizeof p, "%s/lib64/libnnc_test_real.so.13", tk);
    if (symlink("/lib/x86_64-linux-gnu/libz.so.1", p) == 0 || symlink("/usr/lib/x86_64-linux-gnu/libz.so.1", p) == 0) {
        static const char *const real[] = {"libnnc_test_real.so.13", NULL};
        char dir[512];
        h = cuda_libs_open("zlib under another name", real, dir, sizeof dir, why, sizeof why);
        snprintf(p, sizeof p, "%s/lib64", tk);
        CHECK(h && !strcmp(dir, p), "a library found in CUDA_HOME/lib64 does not report its folder (%s)", h ? dir : why);
        CHECK(!cuda_libs_preload(dir, "libnnc_test_absent.so.1"), "preloading a file that is not there succeeded");
    }
    snprintf(p, sizeof p, "rm -rf '%s'", root);
    if (system(p) != 0) printf("note: could not remove %s\n", root);
    printf("%s (%d failed checks)\n", fails ? "FAIL" : "ok", fails);
    return fails ? 1 : 0;
}
