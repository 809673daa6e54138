/* nvrtc.c - the emulator's libnvrtc.so.13: the real NVRTC, plus the source after the cubin.
 *
 * Every call goes to the toolkit's libnvrtc, so every kernel must be valid CUDA.  The stand-in
 * remembers each program's source and makes nvrtcGetCUBIN return a cubin followed by
 * NNC_EMU_MARKER, a little-endian uint64 length and the source: nnc caches the cubin as opaque
 * bytes, and the emulated cuModuleLoadData compiles the source for the host.
 *
 * A compile for sm_XX is made for compute_XX: NVRTC's front end and NVVM check the source as
 * for the GPU, but ptxas, which made the compile 2.4 times as long and whose cubin the host
 * never runs, is left out (the cuda_nvrtc_models tests compile every model to an sm_90 cubin and
 * compute_80 PTX with the real NVRTC).  The cubin is then a bare 64-bit ELF header.  That compile is
 * also asked for NVVM's quickest code (--Ofast-compile=max): the optimizer was ~90% of it, and its
 * PTX is never run either; the front end, where a source's errors show, and NVVM's lowering still
 * see every kernel.  NNC_EMU_CUBIN=1 compiles for sm_XX and returns the real cubin, as the first
 * emulator did. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nvrtc.h>

#include "emu.h"

#define EXPORT __attribute__((visibility("default")))
#ifndef NNC_EMU_REAL_NVRTC_DIR
#define NNC_EMU_REAL_NVRTC_DIR "/usr/local/cuda/lib64"
#endif

typedef struct Prog {
    nvrtcProgram p;
    char *src;
    bool ptx;   /* compiled for compute_XX in place of the sm_XX asked for: no real cubin */
    struct Prog *next;
} Prog;

static Prog *progs;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static void *real;

/* The real library's function `name`, or NULL (with a message) if it cannot be loaded. */
static void *real_sym(const char *name) {
    pthread_mutex_lock(&lock);
    if (!real) {
        /* the real libnvrtc loads its builtins by soname: have them loaded, by absolute path */
        dlopen(NNC_EMU_REAL_NVRTC_DIR "/libnvrtc-builtins.so.13.0", RTLD_NOW | RTLD_GLOBAL);
        /* DEEPBIND: its calls to its own nvrtc* functions must not come back to these wrappers */
        real = dlopen(NNC_EMU_REAL_NVRTC_DIR "/libnvrtc.so.13", RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
        if (!real) fprintf(stderr, "nnc-emu: cannot load the real NVRTC: %s\n", dlerror());
    }
    pthread_mutex_unlock(&lock);
    void *f = real ? dlsym(real, name) : NULL;
    if (real && !f) fprintf(stderr, "nnc-emu: the real NVRTC has no %s\n", name);
    return f;
}

#define FORWARD(ret, fail, name, params, args)            \
    EXPORT ret name params {                               \
        static ret(*f) params;                             \
        if (!f) *(void **)&f = real_sym(#name);            \
        return f ? f args : fail;                          \
    }

FORWARD(nvrtcResult, NVRTC_ERROR_INTERNAL_ERROR, nvrtcVersion, (int *a, int *b), (a, b))
FORWARD(nvrtcResult, NVRTC_ERROR_INTERNAL_ERROR, nvrtcGetNumSupportedArchs, (int *n), (n))
FORWARD(nvrtcResult, NVRTC_ERROR_INTERNAL_ERROR, nvrtcGetSupportedArchs, (int *a), (a))
FORWARD(nvrtcResult, NVRTC_ERROR_INTERNAL_ERROR, nvrtcGetProgramLogSize, (nvrtcProgram p, size_t *n), (p, n))
FORWARD(nvrtcResult, NVRTC_ERROR_INTERNAL_ERROR, nvrtcGetProgramLog, (nvrtcProgram p, char *s), (p, s))
FORWARD(nvrtcResult, NVRTC_ERROR_INTERNAL_ERROR, nvrtcGetPTXSize, (nvrtcProgram p, size_t *n), (p, n))
FORWARD(nvrtcResult, NVRTC_ERROR_INTERNAL_ERROR, nvrtcGetPTX, (nvrtcProgram p, char *s), (p, s))
FORWARD(nvrtcResult, NVRTC_ERROR_INTERNAL_ERROR, nvrtcGetLTOIRSize, (nvrtcProgram p, size_t *n), (p, n))
FORWARD(nvrtcResult, NVRTC_ERROR_INTERNAL_ERROR, nvrtcGetLTOIR, (nvrtcProgram p, char *s), (p, s))
FORWARD(nvrtcResult, NVRTC_ERROR_INTERNAL_ERROR, nvrtcAddNameExpression, (nvrtcProgram p, const char *s), (p, s))
FORWARD(nvrtcResult, NVRTC_ERROR_INTERNAL_ERROR, nvrtcGetLoweredName, (nvrtcProgram p, const char *s, const char **l),
        (p, s, l))
FORWARD(const char *, "NVRTC_ERROR (the real NVRTC cannot be loaded)", nvrtcGetErrorString, (nvrtcResult r), (r))

static nvrtcResult (*real_create)(nvrtcProgram *, const char *, const char *, int, const char *const *,
                                  const char *const *);
static nvrtcResult (*real_destroy)(nvrtcProgram *);
static nvrtcResult (*real_cubin_size)(nvrtcProgram, size_t *);
static nvrtcResult (*real_cubin)(nvrtcProgram, char *);

static Prog *find(nvrtcProgram p) {
    Prog *r = NULL;
    pthread_mutex_lock(&lock);
    for (Prog *q = progs; q; q = q->next)
        if (q->p == p) r = q;
    pthread_mutex_unlock(&lock);
    return r;
}

EXPORT nvrtcResult nvrtcCreateProgram(nvrtcProgram *p, const char *src, const char *name, int nh,
                                      const char *const *headers, const char *const *include_names) {
    if (!real_create) *(void **)&real_create = real_sym("nvrtcCreateProgram");
    if (!real_create) return NVRTC_ERROR_INTERNAL_ERROR;
    if (nh) return NVRTC_ERROR_INVALID_INPUT;   /* headers would have to travel with the source */
    nvrtcResult rc = real_create(p, src, name, nh, headers, include_names);
    if (rc != NVRTC_SUCCESS) return rc;
    Prog *q = calloc(1, sizeof *q);
    if (!q || !(q->src = strdup(src))) abort();
    q->p = *p;
    pthread_mutex_lock(&lock);
    q->next = progs;
    progs = q;
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT nvrtcResult nvrtcDestroyProgram(nvrtcProgram *p) {
    if (!real_destroy) *(void **)&real_destroy = real_sym("nvrtcDestroyProgram");
    if (!real_destroy) return NVRTC_ERROR_INTERNAL_ERROR;
    if (p) {
        pthread_mutex_lock(&lock);
        for (Prog **q = &progs; *q; q = &(*q)->next)
            if ((*q)->p == *p) {
                Prog *d = *q;
                *q = d->next;
                free(d->src);
                free(d);
                break;
            }
        pthread_mutex_unlock(&lock);
    }
    return real_destroy(p);
}

/* "--gpu-architecture=sm_90", "-arch=sm_90", or "sm_90" after "-arch": "compute_90" in buf. */
static const char *as_virtual(const char *opt, const char *prev, char *buf, size_t n) {
    static const char *const keys[] = {"--gpu-architecture=", "-arch="};
    for (int k = 0; k < 2; k++) {
        size_t len = strlen(keys[k]);
        if (!strncmp(opt, keys[k], len) && !strncmp(opt + len, "sm_", 3)) {
            snprintf(buf, n, "%scompute_%s", keys[k], opt + len + 3);
            return buf;
        }
    }
    if (prev && (!strcmp(prev, "-arch") || !strcmp(prev, "--gpu-architecture")) && !strncmp(opt, "sm_", 3)) {
        snprintf(buf, n, "compute_%s", opt + 3);
        return buf;
    }
    return NULL;
}

EXPORT nvrtcResult nvrtcCompileProgram(nvrtcProgram p, int n, const char *const *opts) {
    static nvrtcResult (*f)(nvrtcProgram, int, const char *const *);
    if (!f) *(void **)&f = real_sym("nvrtcCompileProgram");
    if (!f) return NVRTC_ERROR_INTERNAL_ERROR;
    Prog *q = find(p);
    const char *cubin = getenv("NNC_EMU_CUBIN");
    if (!q || n <= 0 || n > 64 || (cubin && !strcmp(cubin, "1"))) return f(p, n, opts);
    const char *o[65];
    char buf[64][64];
    bool ptx = false;
    for (int i = 0; i < n; i++) {
        const char *v = as_virtual(opts[i], i ? opts[i - 1] : NULL, buf[i], sizeof buf[i]);
        o[i] = v ? v : opts[i];
        ptx |= v != NULL;
    }
    if (ptx) o[n++] = "--Ofast-compile=max"; /* the PTX is never run: NVVM's optimizer left out */
    nvrtcResult rc = f(p, n, o);
    q->ptx = ptx;
    return rc;
}

/* What stands for the cubin of a compute_XX compile: an ELF header with nothing after it. */
static void bare_elf(Elf64_Ehdr *e) {
    memset(e, 0, sizeof *e);
    memcpy(e->e_ident, ELFMAG, SELFMAG);
    e->e_ident[EI_CLASS] = ELFCLASS64;
    e->e_ident[EI_DATA] = ELFDATA2LSB;
    e->e_ident[EI_VERSION] = EV_CURRENT;
    e->e_type = ET_EXEC;
    e->e_machine = 190;   /* EM_CUDA */
    e->e_version = EV_CURRENT;
    e->e_ehsize = sizeof *e;
}

EXPORT nvrtcResult nvrtcGetCUBINSize(nvrtcProgram p, size_t *n) {
    if (!real_cubin_size) *(void **)&real_cubin_size = real_sym("nvrtcGetCUBINSize");
    Prog *q = find(p);
    if (!real_cubin_size) return NVRTC_ERROR_INTERNAL_ERROR;
    if (!q) return NVRTC_ERROR_INVALID_PROGRAM;
    if (q->ptx) {
        *n = sizeof(Elf64_Ehdr) + 16 + strlen(q->src);
        return NVRTC_SUCCESS;
    }
    nvrtcResult rc = real_cubin_size(p, n);
    if (rc == NVRTC_SUCCESS) *n += 16 + strlen(q->src);
    return rc;
}

EXPORT nvrtcResult nvrtcGetCUBIN(nvrtcProgram p, char *out) {
    if (!real_cubin_size) *(void **)&real_cubin_size = real_sym("nvrtcGetCUBINSize");
    if (!real_cubin) *(void **)&real_cubin = real_sym("nvrtcGetCUBIN");
    Prog *q = find(p);
    if (!real_cubin || !real_cubin_size) return NVRTC_ERROR_INTERNAL_ERROR;
    if (!q) return NVRTC_ERROR_INVALID_PROGRAM;
    size_t n = 0;
    nvrtcResult rc = NVRTC_SUCCESS;
    if (q->ptx) {
        Elf64_Ehdr e;
        bare_elf(&e);
        memcpy(out, &e, sizeof e);
        n = sizeof e;
    } else {
        rc = real_cubin_size(p, &n);
        if (rc == NVRTC_SUCCESS) rc = real_cubin(p, out);
        if (rc != NVRTC_SUCCESS) return rc;
    }
    uint64_t len = strlen(q->src);
    memcpy(out + n, NNC_EMU_MARKER, 8);
    memcpy(out + n + 8, &len, 8);
    memcpy(out + n + 16, q->src, len);
    return rc;
}
