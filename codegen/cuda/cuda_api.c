/* cuda_api.c - the CUDA driver and cuBLAS, opened with dlopen.
 *
 * No CUDA library is linked, so a CUDA-enabled nnc runs on machines without one and says
 * plainly when there is no driver or device.  The first use opens libcuda.so.1 and cuBLAS
 * (cuda_libs.c searches the loader path, the toolkit and NVIDIA's wheels), looks up every entry
 * point the backend calls into `cu`, and initializes the driver; a missing symbol names the
 * library and the function (a driver or toolkit older than this nnc).  cuda_probe answers
 * --target auto.  NVRTC is nvrtc.c's, NCCL nccl.c's. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "cuda_model.h"

CudaApi cu;

static bool sym(void *h, void **field, const char *name, const char *lib) {
    *field = dlsym(h, name);
    if (!*field) {
        snprintf(cu.why, sizeof cu.why, "%s has no %s: a driver or toolkit too old for this nnc", lib, name);
        snprintf(cu.brief, sizeof cu.brief, "%s is too old: it has no %s", lib, name);
    }
    return *field != NULL;
}

#define SYM(h, field, name, lib) \
    if (!sym(h, (void **)&cu.field, name, lib)) return false

static bool load_driver(void) {
    static const char *const names[] = {"libcuda.so.1", "libcuda.so", NULL};
    char why[600];
    void *h = cuda_libs_open("the CUDA driver", names, NULL, 0, why, sizeof why);
    if (!h) {
        const char *broken = strstr(why, "; the last that exists failed: ");
        snprintf(cu.why, sizeof cu.why,
                 "no CUDA driver found (libcuda.so.1 is not installed or cannot be loaded%s%.300s); the cuda target "
                 "needs an NVIDIA GPU and its driver. Use --target cpu",
                 broken ? ": " : "", broken ? broken + strlen("; the last that exists failed: ") : "");
        snprintf(cu.brief, sizeof cu.brief, "%s",
                 broken ? "libcuda.so.1 does not load" : "no driver: libcuda.so.1 not found");
        return false;
    }
    const char *L = "libcuda.so.1";
    SYM(h, Init, "cuInit", L);
    SYM(h, DriverGetVersion, "cuDriverGetVersion", L);
    SYM(h, DeviceGetCount, "cuDeviceGetCount", L);
    SYM(h, DeviceGet, "cuDeviceGet", L);
    SYM(h, DeviceGetAttribute, "cuDeviceGetAttribute", L);
    SYM(h, DeviceGetName, "cuDeviceGetName", L);
    SYM(h, PrimaryCtxRetain, "cuDevicePrimaryCtxRetain", L);
    SYM(h, PrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", L);
    SYM(h, CtxSetCurrent, "cuCtxSetCurrent", L);
    SYM(h, GetErrorName, "cuGetErrorName", L);
    SYM(h, GetErrorString, "cuGetErrorString", L);
    SYM(h, ModuleLoadData, "cuModuleLoadData", L);
    SYM(h, ModuleUnload, "cuModuleUnload", L);
    SYM(h, ModuleGetFunction, "cuModuleGetFunction", L);
    SYM(h, MemAlloc, "cuMemAlloc_v2", L);
    SYM(h, MemFree, "cuMemFree_v2", L);
    SYM(h, MemGetInfo, "cuMemGetInfo_v2", L);
    SYM(h, MemAllocHost, "cuMemAllocHost_v2", L);
    SYM(h, MemFreeHost, "cuMemFreeHost", L);
    SYM(h, MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", L);
    SYM(h, MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", L);
    SYM(h, MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", L);
    SYM(h, MemsetD32Async, "cuMemsetD32Async", L);
    SYM(h, MemcpyPeerAsync, "cuMemcpyPeerAsync", L);
    SYM(h, DeviceCanAccessPeer, "cuDeviceCanAccessPeer", L);
    SYM(h, CtxEnablePeerAccess, "cuCtxEnablePeerAccess", L);
    SYM(h, EventCreate, "cuEventCreate", L);
    SYM(h, EventDestroy, "cuEventDestroy_v2", L);
    SYM(h, EventRecord, "cuEventRecord", L);
    cu.EventElapsedTime = dlsym(h, "cuEventElapsedTime_v2"); /* CUDA 12.8 and later; then the older one */
    if (!cu.EventElapsedTime) SYM(h, EventElapsedTime, "cuEventElapsedTime", L);
    SYM(h, StreamWaitEvent, "cuStreamWaitEvent", L);
    SYM(h, EventSynchronize, "cuEventSynchronize", L);
    SYM(h, StreamCreate, "cuStreamCreate", L);
    SYM(h, StreamDestroy, "cuStreamDestroy_v2", L);
    SYM(h, StreamSynchronize, "cuStreamSynchronize", L);
    SYM(h, LaunchKernel, "cuLaunchKernel", L);
    SYM(h, StreamBeginCapture, "cuStreamBeginCapture_v2", L);
    SYM(h, StreamEndCapture, "cuStreamEndCapture", L);
    SYM(h, GraphInstantiate, "cuGraphInstantiateWithFlags", L);
    SYM(h, GraphLaunch, "cuGraphLaunch", L);
    SYM(h, GraphExecDestroy, "cuGraphExecDestroy", L);
    SYM(h, GraphDestroy, "cuGraphDestroy", L);
    return true;
}

static char blas_dir[512]; /* where cuBLAS came from, when not from the loader's own search */

static bool load_blas(void) {
    static const char *const names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so", NULL};
    void *h = cuda_libs_open("cuBLAS", names, blas_dir, sizeof blas_dir, cu.why, sizeof cu.why);
    if (!h) snprintf(cu.brief, sizeof cu.brief, "cuBLAS (libcublas) not found");
    if (!h) return false;
    const char *L = "libcublas";
    SYM(h, BlasCreate, "cublasCreate_v2", L);
    SYM(h, BlasDestroy, "cublasDestroy_v2", L);
    SYM(h, BlasSetStream, "cublasSetStream_v2", L);
    SYM(h, BlasSetMathMode, "cublasSetMathMode", L);
    SYM(h, BlasSetWorkspace, "cublasSetWorkspace_v2", L);
    SYM(h, Sgemm, "cublasSgemm_v2", L);
    SYM(h, Dgemm, "cublasDgemm_v2", L);
    SYM(h, SgemmB, "cublasSgemmStridedBatched", L);
    SYM(h, DgemmB, "cublasDgemmStridedBatched", L);
    SYM(h, GemmEx, "cublasGemmEx", L);
    SYM(h, GemmExB, "cublasGemmStridedBatchedEx", L);
    return true;
}

/* cuBLASLt, for the products with an epilogue (passes/fuse.c): optional, since those fall back to
 * the cuBLAS product and a kernel for the bias (cuda_issue.c).  cuBLAS links it, so the copy cuBLAS
 * loaded comes first (the same version), then the one beside cuBLAS, then the usual search. */
static void load_blas_lt(void) {
    static const char *const names[] = {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so", NULL};
    char why[600], path[600];
    void *h = NULL;
    for (const char *const *nm = names; *nm && !h; nm++) h = dlopen(*nm, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    for (const char *const *nm = names; *nm && !h && blas_dir[0]; nm++) {
        snprintf(path, sizeof path, "%s/%s", blas_dir, *nm);
        h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    }
    if (!h) h = cuda_libs_open("cuBLASLt", names, NULL, 0, why, sizeof why);
    if (!h) return;
    struct {
        void **field;
        const char *name;
    } want[] = {
        {(void **)&cu.LtCreate, "cublasLtCreate"},
        {(void **)&cu.LtDestroy, "cublasLtDestroy"},
        {(void **)&cu.LtDescCreate, "cublasLtMatmulDescCreate"},
        {(void **)&cu.LtDescDestroy, "cublasLtMatmulDescDestroy"},
        {(void **)&cu.LtDescSet, "cublasLtMatmulDescSetAttribute"},
        {(void **)&cu.LtLayoutCreate, "cublasLtMatrixLayoutCreate"},
        {(void **)&cu.LtLayoutDestroy, "cublasLtMatrixLayoutDestroy"},
        {(void **)&cu.LtPrefCreate, "cublasLtMatmulPreferenceCreate"},
        {(void **)&cu.LtPrefDestroy, "cublasLtMatmulPreferenceDestroy"},
        {(void **)&cu.LtPrefSet, "cublasLtMatmulPreferenceSetAttribute"},
        {(void **)&cu.LtHeuristic, "cublasLtMatmulAlgoGetHeuristic"},
        {(void **)&cu.LtMatmul, "cublasLtMatmul"},
    };
    for (size_t i = 0; i < NNC_COUNTOF(want); i++)
        if (!(*want[i].field = dlsym(h, want[i].name))) return;
    cu.lt_ok = true;
}

bool cuda_open(void) {
    if (cu.tried) return cu.ok;
    cu.tried = true;
    if (!load_driver()) return false;
    CUresult rc = cu.Init(0);
    int count = 0;
    if (rc == CUDA_SUCCESS) rc = cu.DeviceGetCount(&count);
    if (rc != CUDA_SUCCESS || count == 0) {
        const char *name = "?";
        if (rc != CUDA_SUCCESS) cu.GetErrorName(rc, &name);
        snprintf(cu.why, sizeof cu.why,
                 "no CUDA device found (%s%s); the cuda target needs an NVIDIA GPU. "
                 "Use --target cpu",
                 rc != CUDA_SUCCESS ? "cuInit: " : "the driver reports 0 devices", rc != CUDA_SUCCESS ? name : "");
        snprintf(cu.brief, sizeof cu.brief, "%s%s", rc != CUDA_SUCCESS ? "cuInit: " : "the driver reports 0 devices",
                 rc != CUDA_SUCCESS ? name : "");
        return false;
    }
    if (!load_blas()) return false;
    load_blas_lt();
    cu.ok = true;
    return true;
}

/* --target auto: whether the cuda target can run here, as torch.cuda.is_available() asks (a
 * driver that loads and initializes, a device), plus the libraries the target needs (cuBLAS,
 * NVRTC).  `dev` gets device 0's name, or `why` a short reason. */
bool cuda_probe(char *dev, size_t dn, char *why, size_t wn) {
    CUdevice d;
    if (!cuda_open()) snprintf(why, wn, "%s", cu.brief);
    else if (!cuda_nvrtc_available(NULL, 0)) snprintf(why, wn, "NVRTC (libnvrtc) not found");
    else if (cu.DeviceGet(&d, 0) != CUDA_SUCCESS || cu.DeviceGetName(dev, (int)dn, d) != CUDA_SUCCESS)
        snprintf(why, wn, "device 0 does not answer");
    else return true;
    return false;
}
