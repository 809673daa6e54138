/* nvrtc.c - the emulator's libnvrtc.so.13: the real NVRTC, plus the source after the cubin.
 *
 * Every call goes to the toolkit's libnvrtc (so every kernel is still compiled for the
 * requested sm_XX and must be valid CUDA).  The stand-in remembers each program's source and
 * makes nvrtcGetCUBIN return the real cubin followed by NNC_EMU_MARKER, a little-endian
 * uint64 length and the source: nnc caches the cubin as opaque bytes, and the emulated
 * cuModuleLoadData compiles the source for the host. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
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
FORWARD(nvrtcResult, NVRTC_ERROR_INTERNAL_ERROR, nvrtcCompileProgram, (nvrtcProgram p, int n, const char *const *o),
        (p, n, o))
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

EXPORT nvrtcResult nvrtcGetCUBINSize(nvrtcProgram p, size_t *n) {
    if (!real_cubin_size) *(void **)&real_cubin_size = real_sym("nvrtcGetCUBINSize");
    Prog *q = find(p);
    if (!real_cubin_size) return NVRTC_ERROR_INTERNAL_ERROR;
    if (!q) return NVRTC_ERROR_INVALID_PROGRAM;
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
    nvrtcResult rc = real_cubin_size(p, &n);
    if (rc == NVRTC_SUCCESS) rc = real_cubin(p, out);
    if (rc != NVRTC_SUCCESS) return rc;
    uint64_t len = strlen(q->src);
    memcpy(out + n, NNC_EMU_MARKER, 8);
    memcpy(out + n + 8, &len, 8);
    memcpy(out + n + 16, q->src, len);
    return rc;
}
