/* nvrtc.c - the CUDA runtime compiler, loaded with dlopen.
 *
 * nnc links no CUDA library, so a CUDA-enabled build starts (and trains on the CPU) on a
 * machine with no toolkit libraries, no driver and no GPU.  NVRTC itself needs no driver, which
 * lets the tests compile every model's kernels on a build machine without a GPU.  A failed
 * compilation reports NVRTC's log followed by the generated lines each message points at. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nvrtc.h>

#include "cuda_backend.h"

static struct {
    bool tried, ok;
    char why[1536];
    nvrtcResult (*Version)(int *, int *);
    nvrtcResult (*CreateProgram)(nvrtcProgram *, const char *, const char *, int, const char *const *, const char *const *);
    nvrtcResult (*DestroyProgram)(nvrtcProgram *);
    nvrtcResult (*CompileProgram)(nvrtcProgram, int, const char *const *);
    nvrtcResult (*GetProgramLogSize)(nvrtcProgram, size_t *);
    nvrtcResult (*GetProgramLog)(nvrtcProgram, char *);
    nvrtcResult (*GetCUBINSize)(nvrtcProgram, size_t *);
    nvrtcResult (*GetCUBIN)(nvrtcProgram, char *);
    nvrtcResult (*GetPTXSize)(nvrtcProgram, size_t *);
    nvrtcResult (*GetPTX)(nvrtcProgram, char *);
    const char *(*GetErrorString)(nvrtcResult);
} nv;

#define SYM(field, name)                                                                       \
    do {                                                                                       \
        *(void **)&nv.field = dlsym(h, name);                                                  \
        if (!nv.field) {                                                                       \
            snprintf(nv.why, sizeof nv.why, "libnvrtc has no %s (too old? CUDA 11.2+ needed)", name); \
            return false;                                                                      \
        }                                                                                      \
    } while (0)

static bool nvrtc_load(void) {
    static const char *const names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so", NULL};
    char dir[512];
    void *h = cuda_libs_open("NVRTC", names, dir, sizeof dir, nv.why, sizeof nv.why);
    if (!h) return false;
    SYM(Version, "nvrtcVersion");
    SYM(CreateProgram, "nvrtcCreateProgram");
    SYM(DestroyProgram, "nvrtcDestroyProgram");
    SYM(CompileProgram, "nvrtcCompileProgram");
    SYM(GetProgramLogSize, "nvrtcGetProgramLogSize");
    SYM(GetProgramLog, "nvrtcGetProgramLog");
    SYM(GetCUBINSize, "nvrtcGetCUBINSize");
    SYM(GetCUBIN, "nvrtcGetCUBIN");
    SYM(GetPTXSize, "nvrtcGetPTXSize");
    SYM(GetPTX, "nvrtcGetPTX");
    SYM(GetErrorString, "nvrtcGetErrorString");
    /* libnvrtc opens libnvrtc-builtins.so.MAJOR.MINOR by name when it compiles: from an absolute
     * path that name is not found unless the builtins are loaded already */
    int maj = 0, min = 0;
    char builtins[64];
    if (nv.Version(&maj, &min) == NVRTC_SUCCESS) {
        snprintf(builtins, sizeof builtins, "libnvrtc-builtins.so.%d.%d", maj, min);
        if (!cuda_libs_preload(dir, builtins)) {
            snprintf(nv.why, sizeof nv.why, "NVRTC was found in %.500s, but not its %s beside it (a partial install?)",
                     dir, builtins);
            return false;
        }
    }
    return true;
}

bool cuda_nvrtc_available(char *err, size_t n) {
    if (!nv.tried) {
        nv.tried = true;
        nv.ok = nvrtc_load();
    }
    if (!nv.ok && err) snprintf(err, n, "%s", nv.why);
    return nv.ok;
}

int cuda_nvrtc_version(void) {
    int maj = 0, min = 0;
    if (!cuda_nvrtc_available(NULL, 0) || nv.Version(&maj, &min) != NVRTC_SUCCESS) return 0;
    return maj * 1000 + min * 10;
}

/* NVRTC_CHECK: on failure, say which call failed where, and give up on this compilation. */
#define NVRTC_CHECK(call)                                                                       \
    do {                                                                                        \
        nvrtcResult rc_ = (call);                                                               \
        if (rc_ != NVRTC_SUCCESS) {                                                             \
            snprintf(err, n, "NVRTC error %d (%s) at %s:%d: %s", (int)rc_, nv.GetErrorString(rc_), \
                     __FILE__, __LINE__, #call);                                                \
            goto done;                                                                          \
        }                                                                                       \
    } while (0)

/* Appends to err the generated source line that a log line "name(LINE): ..." points at. */
static void quote_lines(const char *log, const char *name, const char *src, char *err, size_t n) {
    size_t nl = strlen(name);
    for (const char *l = log; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        size_t k = strlen(err);
        const char *e = strchr(l, '\n');
        int len = e ? (int)(e - l) : (int)strlen(l);
        snprintf(err + k, n - k, "%.*s\n", len, l);
        if (strncmp(l, name, nl) || l[nl] != '(') continue;
        long line = strtol(l + nl + 1, NULL, 10);
        const char *q = src;
        for (long i = 1; q && i < line; i++) q = strchr(q, '\n') ? strchr(q, '\n') + 1 : NULL;
        if (!q) continue;
        const char *qe = strchr(q, '\n');
        k = strlen(err);
        snprintf(err + k, n - k, "    %ld | %.*s\n", line, qe ? (int)(qe - q) : (int)strlen(q), q);
    }
}

char *cuda_nvrtc_compile(const char *src, const char *name, const char *arch, bool f64, size_t *len,
                         char *err, size_t n) {
    (void)f64;
    return cuda_nvrtc_compile_with(src, name, arch, NULL, len, err, n);
}

char *cuda_nvrtc_compile_with(const char *src, const char *name, const char *arch, const char *extra, size_t *len,
                              char *err, size_t n) {
    err[0] = 0;
    if (!cuda_nvrtc_available(err, n)) return NULL;
    char archopt[64];
    snprintf(archopt, sizeof archopt, "--gpu-architecture=%s", arch);
    const char *opts[5] = {archopt, "--std=c++17", "-default-device"};
    int nopts = 3;
    if (getenv("NNC_CUDA_LINEINFO")) opts[nopts++] = "-lineinfo";
    if (extra) opts[nopts++] = extra;
    nvrtcProgram prog = NULL;
    char *out = NULL, *log = NULL;
    NVRTC_CHECK(nv.CreateProgram(&prog, src, name, 0, NULL, NULL));
    nvrtcResult rc = nv.CompileProgram(prog, nopts, opts);
    size_t loglen = 0;
    NVRTC_CHECK(nv.GetProgramLogSize(prog, &loglen));
    log = xmalloc(loglen + 1);
    log[0] = 0;
    if (loglen) NVRTC_CHECK(nv.GetProgramLog(prog, log));
    if (rc != NVRTC_SUCCESS) {
        snprintf(err, n, "NVRTC failed to compile the generated CUDA for %s (%s); its log:\n", arch, nv.GetErrorString(rc));
        quote_lines(log, name, src, err, n);
        goto done;
    }
    bool cubin = !strncmp(arch, "sm_", 3);
    NVRTC_CHECK(cubin ? nv.GetCUBINSize(prog, len) : nv.GetPTXSize(prog, len));
    out = xmalloc(*len + 1);
    NVRTC_CHECK(cubin ? nv.GetCUBIN(prog, out) : nv.GetPTX(prog, out));
    out[*len] = 0;
done:
    if (prog) nv.DestroyProgram(&prog);
    free(log);
    if (out && err[0]) {   /* a check failed after the code was allocated */
        free(out);
        out = NULL;
    }
    return out;
}
