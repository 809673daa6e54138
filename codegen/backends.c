/* backends.c - the table of backends, looked up by target. */
#include "codegen.h"

#ifdef NNC_HAVE_CUDA
extern const Backend backend_cuda;
#endif

const Backend *backend_for(Device target) {
    if (target == DEV_CPU) return &backend_cpu;
#ifdef NNC_HAVE_CUDA
    return &backend_cuda;
#else
    return NULL;
#endif
}
