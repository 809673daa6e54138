/* cuda_libs.c - finds and opens the CUDA libraries nnc loads at run time (driver, NVRTC, cuBLAS,
 * cuDNN, NCCL).
 *
 * nnc links no CUDA library, so it must find them the way a user's machine has them:
 *   1. the loader's own search (LD_LIBRARY_PATH, the ldconfig cache): what the user set wins;
 *   2. the toolkit named by CUDA_HOME, CUDA_PATH or CUDA_ROOT, then /usr/local/cuda, in each of
 *      lib64/, lib/ and targets/<arch>-linux/lib/ (layouts differ between installers);
 *   3. NVIDIA's Python wheels (what `pip install torch` brings): site-packages/nvidia/cu13/lib
 *      (CUDA 13), nvidia/<component>/lib (CUDA 12, and cuDNN's nvidia/cudnn/lib on both), in the
 *      active virtual environment, the conda prefix, the user's site and the system's;
 *   4. for the driver, the WSL folder.
 * A library opened by absolute path cannot find its own helpers by name unless they are already
 * loaded (libnvrtc dlopens libnvrtc-builtins.so.MAJOR.MINOR at compile time), so callers preload
 * those from the directory the library came from (cuda_libs_preload).  libcudnn.so.9 needs none:
 * it finds its sublibraries (libcudnn_cnn.so.9, ...) through its own RUNPATH, $ORIGIN.  When nothing loads, the
 * message lists every directory searched and the loader's last complaint about a file that
 * exists, so "not installed" and "installed but broken" read differently. */
#include <dlfcn.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cuda_backend.h"

#if defined(__aarch64__)
#define TARGET_DIR "targets/sbsa-linux/lib"
#else
#define TARGET_DIR "targets/x86_64-linux/lib"
#endif

typedef struct {
    char dirs[48][512];
    int n;
} DirList;

static void dir_add(DirList *d, const char *path) {
    struct stat st;
    if (d->n == (int)NNC_COUNTOF(d->dirs) || stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) return;
    for (int i = 0; i < d->n; i++)
        if (!strcmp(d->dirs[i], path)) return;
    snprintf(d->dirs[d->n++], sizeof d->dirs[0], "%s", path);
}

static void toolkit_dirs(DirList *d, const char *root) {
    static const char *const sub[] = {"lib64", "lib", TARGET_DIR};
    char p[512];
    if (!root || !*root) return;
    for (size_t i = 0; i < NNC_COUNTOF(sub); i++) {
        snprintf(p, sizeof p, "%s/%s", root, sub[i]);
        dir_add(d, p);
    }
}

/* site-packages/nvidia/{cu13,cu12,cuda_nvrtc,cublas,nccl,cudnn}/lib under one prefix pattern (cuDNN's
 * wheels, nvidia-cudnn-cu12 and -cu13, keep their own folder) */
static void wheel_dirs(DirList *d, const char *site_glob) {
    static const char *const sub[] = {"nvidia/cu13/lib",   "nvidia/cu12/lib", "nvidia/cuda_nvrtc/lib",
                                      "nvidia/cublas/lib", "nvidia/nccl/lib", "nvidia/cudnn/lib"};
    char pat[600];
    for (size_t i = 0; i < NNC_COUNTOF(sub); i++) {
        glob_t gl;
        snprintf(pat, sizeof pat, "%s/%s", site_glob, sub[i]);
        if (glob(pat, 0, NULL, &gl) == 0)
            for (size_t k = 0; k < gl.gl_pathc; k++) dir_add(d, gl.gl_pathv[k]);
        globfree(&gl);
    }
}

static void search_dirs(DirList *d) {
    static const char *const envs[] = {"CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"};
    char p[512];
    for (size_t i = 0; i < NNC_COUNTOF(envs); i++) toolkit_dirs(d, getenv(envs[i]));
    toolkit_dirs(d, "/usr/local/cuda");
    const char *venv = getenv("VIRTUAL_ENV"), *conda = getenv("CONDA_PREFIX"), *home = getenv("HOME");
    if (venv && *venv) {
        snprintf(p, sizeof p, "%s/lib/python3*/site-packages", venv);
        wheel_dirs(d, p);
    }
    if (conda && *conda) {
        snprintf(p, sizeof p, "%s/lib", conda);
        dir_add(d, p);
        snprintf(p, sizeof p, "%s/lib/python3*/site-packages", conda);
        wheel_dirs(d, p);
    }
    if (home && *home) {
        snprintf(p, sizeof p, "%s/.local/lib/python3*/site-packages", home);
        wheel_dirs(d, p);
    }
    wheel_dirs(d, "/usr/local/lib/python3*/dist-packages");
    wheel_dirs(d, "/usr/local/lib/python3*/site-packages");
    wheel_dirs(d, "/usr/lib/python3/dist-packages");
    dir_add(d, "/usr/lib/wsl/lib");
}

int cuda_libs_search_dirs(char (*out)[512], int max) {
    DirList d = {.n = 0};
    search_dirs(&d);
    int n = d.n < max ? d.n : max;
    for (int i = 0; i < n; i++) memcpy(out[i], d.dirs[i], sizeof d.dirs[0]);
    return n;
}

void *cuda_libs_open(const char *what, const char *const *names, char *dir, size_t dirlen, char *why, size_t n) {
    DirList d = {.n = 0};
    search_dirs(&d);
    char path[1100], last[512] = "";
    if (dir && dirlen) dir[0] = 0;
    for (const char *const *nm = names; *nm; nm++) {   /* 1. the loader's own search */
        void *h = dlopen(*nm, RTLD_NOW | RTLD_LOCAL);
        if (h) return h;
    }
    for (int i = 0; i < d.n; i++)
        for (const char *const *nm = names; *nm; nm++) {
            snprintf(path, sizeof path, "%s/%s", d.dirs[i], *nm);
            struct stat st;
            if (stat(path, &st) != 0) continue;
            void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
            if (h) {
                if (dir && dirlen) snprintf(dir, dirlen, "%s", d.dirs[i]);
                return h;
            }
            snprintf(last, sizeof last, "%s", dlerror());   /* it exists but does not load */
        }
    int k = snprintf(why, n, "cannot load %s: looked for", what);
    for (const char *const *nm = names; *nm && k >= 0 && (size_t)k < n; nm++)
        k += snprintf(why + k, n - (size_t)k, "%s %s", nm == names ? "" : ",", *nm);
    if (k >= 0 && (size_t)k < n) k += snprintf(why + k, n - (size_t)k, " on the loader path (LD_LIBRARY_PATH, ldconfig)");
    for (int i = 0; i < d.n && k >= 0 && (size_t)k < n; i++)
        k += snprintf(why + k, n - (size_t)k, "%s%s", i ? ", " : " and in ", d.dirs[i]);
    if (last[0] && k >= 0 && (size_t)k < n) k += snprintf(why + k, n - (size_t)k, "; the last that exists failed: %s", last);
    if (k >= 0 && (size_t)k < n)
        snprintf(why + k, n - (size_t)k, ". Set CUDA_HOME to the toolkit, or add its library folder to LD_LIBRARY_PATH");
    return NULL;
}

bool cuda_libs_preload(const char *dir, const char *file) {
    char path[1100];
    if (!dir || !*dir) return true;   /* found by the loader: it finds the helpers the same way */
    snprintf(path, sizeof path, "%s/%s", dir, file);
    struct stat st;
    if (stat(path, &st) != 0) return false;
    return dlopen(path, RTLD_NOW | RTLD_GLOBAL) != NULL;
}
