/* backends.c - the table of backends, looked up by target, and --target auto's choice. */
#include "codegen.h"

#ifdef NNC_HAVE_CUDA
extern const Backend backend_cuda;
bool cuda_probe(char *dev, size_t dn, char *why, size_t wn);
#endif

const Backend *backend_for(Device target) {
    if (target == DEV_CPU) return &backend_cpu;
#ifdef NNC_HAVE_CUDA
    return &backend_cuda;
#else
    return NULL;
#endif
}

Device backend_auto(char *note, size_t n) {
#ifdef NNC_HAVE_CUDA
    char dev[128], why[192];
    if (cuda_probe(dev, sizeof dev, why, sizeof why)) {
        snprintf(note, n, "using cuda:0 (%s)", dev);
        return DEV_CUDA;
    }
#else
    const char *why = "this nnc was built without the CUDA target";
#endif
    snprintf(note, n, "no CUDA device (%s), using the CPU", why);
    return DEV_CPU;
}
