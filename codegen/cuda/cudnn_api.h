/* cudnn_api.h - the part of cuDNN 9's legacy convolution API that nnc calls, declared here.
 *
 * nnc opens libcudnn.so.9 with dlopen (cuda_dnn.c), so it needs cuDNN's types and the values of
 * a few enums, not its header: writing them out keeps cudnn.h out of the build, as nccl.c does
 * for NCCL.  The names are nnc's (Dnn*, DNN_*) so that a file may include this and cudnn.h
 * together: tests/cuda/cudnn_abi.c does, where the toolkit has cudnn.h, and checks every value
 * and the perf struct's layout against it.  The emulator's stand-in libcudnn.so.9
 * (tests/cuda/emu/cudnn.c) is written against this file too.  Values are cuDNN 9's
 * (cudnn_graph_v9.h, cudnn_ops_v9.h, cudnn_cnn_v9.h); cuda_dnn.c refuses another major version. */
#ifndef NNC_CUDNN_API_H
#define NNC_CUDNN_API_H
#include <stddef.h>

typedef struct cudnnContext *DnnHandle;
typedef struct cudnnTensorStruct *DnnTensorDesc;
typedef struct cudnnFilterStruct *DnnFilterDesc;
typedef struct cudnnConvolutionStruct *DnnConvDesc;

typedef int DnnStatus; /* cudnnStatus_t */
enum {
    DNN_STATUS_SUCCESS = 0,
    DNN_STATUS_NOT_INITIALIZED = 1001,
    DNN_STATUS_BAD_PARAM = 2000,
    DNN_STATUS_BAD_PARAM_NULL_POINTER = 2002,
    DNN_STATUS_BAD_PARAM_MISALIGNED_POINTER = 2003,
    DNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT = 2006,
    DNN_STATUS_NOT_SUPPORTED = 3000,
    DNN_STATUS_EXECUTION_FAILED = 5000,
};

enum { DNN_DATA_FLOAT = 0, DNN_DATA_DOUBLE = 1, DNN_DATA_HALF = 2, DNN_DATA_BFLOAT16 = 9 }; /* cudnnDataType_t */
enum { DNN_TENSOR_NCHW = 0 }; /* cudnnTensorFormat_t */
enum { DNN_CONVOLUTION = 0, DNN_CROSS_CORRELATION = 1 }; /* cudnnConvolutionMode_t */
enum { DNN_NON_DETERMINISTIC = 0, DNN_DETERMINISTIC = 1 }; /* cudnnDeterminism_t */
/* cudnnMathType_t: DEFAULT permits TF32 on FP32 data (Ampere and later), TENSOR_OP too, ALLOW_CONVERSION
 * rounds FP32 down to half, FMA keeps FP32 arithmetic */
enum { DNN_DEFAULT_MATH = 0, DNN_TENSOR_OP_MATH = 1, DNN_TENSOR_OP_MATH_ALLOW_CONVERSION = 2, DNN_FMA_MATH = 3 };
/* cudnnConvolutionFwdAlgo_t */
enum {
    DNN_FWD_IMPLICIT_GEMM = 0,
    DNN_FWD_IMPLICIT_PRECOMP_GEMM = 1,
    DNN_FWD_GEMM = 2,
    DNN_FWD_DIRECT = 3,
    DNN_FWD_FFT = 4,
    DNN_FWD_FFT_TILING = 5,
    DNN_FWD_WINOGRAD = 6,
    DNN_FWD_WINOGRAD_NONFUSED = 7,
    DNN_FWD_COUNT = 8
};
/* cudnnConvolutionBwdDataAlgo_t (0: atomics, non-deterministic) */
enum {
    DNN_BWD_DATA_0 = 0,
    DNN_BWD_DATA_1 = 1,
    DNN_BWD_DATA_FFT = 2,
    DNN_BWD_DATA_FFT_TILING = 3,
    DNN_BWD_DATA_WINOGRAD = 4,
    DNN_BWD_DATA_WINOGRAD_NONFUSED = 5,
    DNN_BWD_DATA_COUNT = 6
};
/* cudnnConvolutionBwdFilterAlgo_t (0 and 3: atomics, non-deterministic) */
enum {
    DNN_BWD_FILTER_0 = 0,
    DNN_BWD_FILTER_1 = 1,
    DNN_BWD_FILTER_FFT = 2,
    DNN_BWD_FILTER_3 = 3,
    DNN_BWD_FILTER_WINOGRAD = 4,
    DNN_BWD_FILTER_WINOGRAD_NONFUSED = 5,
    DNN_BWD_FILTER_FFT_TILING = 6,
    DNN_BWD_FILTER_COUNT = 7
};

/* cudnnConvolutionFwdAlgoPerf_t, and the two backward ones, which have the same layout: one
 * heuristic's answer (cudnnGet*Algorithm_v7) */
typedef struct {
    int algo;
    DnnStatus status;
    float time;
    size_t memory; /* the workspace it needs, bytes */
    int determinism;
    int mathType;
    int reserved[3];
} DnnAlgoPerf;

/* The functions, as types (cuda_dnn.c looks each up by the name in its comment; enums are ints). */
typedef size_t DnnGetVersionFn(void); /* cudnnGetVersion */
typedef const char *DnnGetErrorStringFn(DnnStatus); /* cudnnGetErrorString */
typedef DnnStatus DnnCreateFn(DnnHandle *); /* cudnnCreate */
typedef DnnStatus DnnDestroyFn(DnnHandle); /* cudnnDestroy */
typedef DnnStatus DnnSetStreamFn(DnnHandle, void *); /* cudnnSetStream (a CUstream) */
typedef DnnStatus DnnCreateTensorFn(DnnTensorDesc *); /* cudnnCreateTensorDescriptor */
/* cudnnSetTensor4dDescriptor: format, data type, n, c, h, w */
typedef DnnStatus DnnSetTensor4dFn(DnnTensorDesc, int, int, int, int, int, int);
typedef DnnStatus DnnDestroyTensorFn(DnnTensorDesc); /* cudnnDestroyTensorDescriptor */
typedef DnnStatus DnnCreateFilterFn(DnnFilterDesc *); /* cudnnCreateFilterDescriptor */
/* cudnnSetFilter4dDescriptor: data type, format, k (outputs), c (inputs per group), h, w */
typedef DnnStatus DnnSetFilter4dFn(DnnFilterDesc, int, int, int, int, int, int);
typedef DnnStatus DnnDestroyFilterFn(DnnFilterDesc); /* cudnnDestroyFilterDescriptor */
typedef DnnStatus DnnCreateConvFn(DnnConvDesc *); /* cudnnCreateConvolutionDescriptor */
/* cudnnSetConvolution2dDescriptor: padding h w, stride h w, dilation h w, mode, compute type */
typedef DnnStatus DnnSetConv2dFn(DnnConvDesc, int, int, int, int, int, int, int, int);
typedef DnnStatus DnnSetConvIntFn(DnnConvDesc, int); /* cudnnSetConvolutionGroupCount, ...MathType */
typedef DnnStatus DnnDestroyConvFn(DnnConvDesc); /* cudnnDestroyConvolutionDescriptor */
/* cudnnGetConvolution2dForwardOutputDim: n, c, h, w of the output */
typedef DnnStatus DnnOutputDimFn(DnnConvDesc, DnnTensorDesc, DnnFilterDesc, int *, int *, int *, int *);

/* cudnnGetConvolutionForwardAlgorithm_v7, ...BackwardDataAlgorithm_v7, ...BackwardFilterAlgorithm_v7:
 * the heuristics' ranking, at most `requested` answers */
typedef DnnStatus DnnFwdAlgoFn(DnnHandle, DnnTensorDesc x, DnnFilterDesc w, DnnConvDesc, DnnTensorDesc y, int requested,
                               int *returned, DnnAlgoPerf *);
typedef DnnStatus DnnDataAlgoFn(DnnHandle, DnnFilterDesc w, DnnTensorDesc dy, DnnConvDesc, DnnTensorDesc dx,
                                int requested, int *returned, DnnAlgoPerf *);
typedef DnnStatus DnnFilterAlgoFn(DnnHandle, DnnTensorDesc x, DnnTensorDesc dy, DnnConvDesc, DnnFilterDesc dw,
                                  int requested, int *returned, DnnAlgoPerf *);
/* cudnnGetConvolution{Forward,BackwardData,BackwardFilter}WorkspaceSize: one algorithm's workspace */
typedef DnnStatus DnnFwdSizeFn(DnnHandle, DnnTensorDesc x, DnnFilterDesc w, DnnConvDesc, DnnTensorDesc y, int algo,
                               size_t *);
typedef DnnStatus DnnDataSizeFn(DnnHandle, DnnFilterDesc w, DnnTensorDesc dy, DnnConvDesc, DnnTensorDesc dx, int algo,
                                size_t *);
typedef DnnStatus DnnFilterSizeFn(DnnHandle, DnnTensorDesc x, DnnTensorDesc dy, DnnConvDesc, DnnFilterDesc dw, int algo,
                                  size_t *);
/* cudnnConvolutionForward, cudnnConvolutionBackwardData, cudnnConvolutionBackwardFilter: out = alpha
 * op(a, b) + beta out, alpha and beta host floats for FLOAT data */
typedef DnnStatus DnnFwdFn(DnnHandle, const void *alpha, DnnTensorDesc, const void *x, DnnFilterDesc, const void *w,
                           DnnConvDesc, int algo, void *ws, size_t ws_bytes, const void *beta, DnnTensorDesc, void *y);
typedef DnnStatus DnnDataFn(DnnHandle, const void *alpha, DnnFilterDesc, const void *w, DnnTensorDesc, const void *dy,
                            DnnConvDesc, int algo, void *ws, size_t ws_bytes, const void *beta, DnnTensorDesc,
                            void *dx);
typedef DnnStatus DnnFilterFn(DnnHandle, const void *alpha, DnnTensorDesc, const void *x, DnnTensorDesc, const void *dy,
                              DnnConvDesc, int algo, void *ws, size_t ws_bytes, const void *beta, DnnFilterDesc,
                              void *dw);
#endif
