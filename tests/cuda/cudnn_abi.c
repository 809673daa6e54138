/* cudnn_abi.c - nnc's own declarations of cuDNN (codegen/cuda/cudnn_api.h) agree with cudnn.h.
 *
 * nnc builds without cudnn.h: it declares the few types, enum values and the algorithm perf
 * struct of cuDNN 9's legacy convolution API itself and opens libcudnn.so.9 with dlopen.  Where
 * the toolkit does have cudnn.h this file is built (tests/cuda/tests.cmake), and a value or a
 * layout that drifted fails its compile; running it says which cudnn.h it was checked against. */
#include <stddef.h>
#include <stdio.h>

#include <cudnn.h>

#include "../../codegen/cuda/cudnn_api.h"

#define SAME(ours, theirs) _Static_assert((long)(ours) == (long)(theirs), #ours " is not " #theirs)

SAME(DNN_STATUS_SUCCESS, CUDNN_STATUS_SUCCESS);
SAME(DNN_STATUS_NOT_INITIALIZED, CUDNN_STATUS_NOT_INITIALIZED);
SAME(DNN_STATUS_BAD_PARAM, CUDNN_STATUS_BAD_PARAM);
SAME(DNN_STATUS_BAD_PARAM_NULL_POINTER, CUDNN_STATUS_BAD_PARAM_NULL_POINTER);
SAME(DNN_STATUS_BAD_PARAM_MISALIGNED_POINTER, CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER);
SAME(DNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT, CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT);
SAME(DNN_STATUS_NOT_SUPPORTED, CUDNN_STATUS_NOT_SUPPORTED);
SAME(DNN_STATUS_EXECUTION_FAILED, CUDNN_STATUS_EXECUTION_FAILED);
SAME(DNN_DATA_FLOAT, CUDNN_DATA_FLOAT);
SAME(DNN_DATA_DOUBLE, CUDNN_DATA_DOUBLE);
SAME(DNN_DATA_HALF, CUDNN_DATA_HALF);
SAME(DNN_DATA_BFLOAT16, CUDNN_DATA_BFLOAT16);
SAME(DNN_TENSOR_NCHW, CUDNN_TENSOR_NCHW);
SAME(DNN_CONVOLUTION, CUDNN_CONVOLUTION);
SAME(DNN_CROSS_CORRELATION, CUDNN_CROSS_CORRELATION);
SAME(DNN_NON_DETERMINISTIC, CUDNN_NON_DETERMINISTIC);
SAME(DNN_DETERMINISTIC, CUDNN_DETERMINISTIC);
SAME(DNN_DEFAULT_MATH, CUDNN_DEFAULT_MATH);
SAME(DNN_TENSOR_OP_MATH, CUDNN_TENSOR_OP_MATH);
SAME(DNN_TENSOR_OP_MATH_ALLOW_CONVERSION, CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION);
SAME(DNN_FMA_MATH, CUDNN_FMA_MATH);
SAME(DNN_FWD_IMPLICIT_GEMM, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM);
SAME(DNN_FWD_IMPLICIT_PRECOMP_GEMM, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM);
SAME(DNN_FWD_GEMM, CUDNN_CONVOLUTION_FWD_ALGO_GEMM);
SAME(DNN_FWD_DIRECT, CUDNN_CONVOLUTION_FWD_ALGO_DIRECT);
SAME(DNN_FWD_FFT, CUDNN_CONVOLUTION_FWD_ALGO_FFT);
SAME(DNN_FWD_FFT_TILING, CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING);
SAME(DNN_FWD_WINOGRAD, CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD);
SAME(DNN_FWD_WINOGRAD_NONFUSED, CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED);
SAME(DNN_FWD_COUNT, CUDNN_CONVOLUTION_FWD_ALGO_COUNT);
SAME(DNN_BWD_DATA_0, CUDNN_CONVOLUTION_BWD_DATA_ALGO_0);
SAME(DNN_BWD_DATA_1, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1);
SAME(DNN_BWD_DATA_FFT, CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT);
SAME(DNN_BWD_DATA_FFT_TILING, CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING);
SAME(DNN_BWD_DATA_WINOGRAD, CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD);
SAME(DNN_BWD_DATA_WINOGRAD_NONFUSED, CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED);
SAME(DNN_BWD_DATA_COUNT, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT);
SAME(DNN_BWD_FILTER_0, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0);
SAME(DNN_BWD_FILTER_1, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1);
SAME(DNN_BWD_FILTER_FFT, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT);
SAME(DNN_BWD_FILTER_3, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3);
SAME(DNN_BWD_FILTER_WINOGRAD, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD);
SAME(DNN_BWD_FILTER_WINOGRAD_NONFUSED, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED);
SAME(DNN_BWD_FILTER_FFT_TILING, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING);
SAME(DNN_BWD_FILTER_COUNT, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT);

/* The enums nnc passes as int are int-sized. */
_Static_assert(sizeof(cudnnStatus_t) == sizeof(DnnStatus), "cudnnStatus_t");
_Static_assert(sizeof(cudnnDataType_t) == sizeof(int) && sizeof(cudnnMathType_t) == sizeof(int) &&
                   sizeof(cudnnConvolutionFwdAlgo_t) == sizeof(int) && sizeof(cudnnTensorFormat_t) == sizeof(int),
               "an enum nnc passes as int is not int-sized");

/* The handle and descriptors are cuDNN's own types (nnc's names for the same struct tags). */
_Static_assert(__builtin_types_compatible_p(DnnHandle, cudnnHandle_t), "cudnnHandle_t");
_Static_assert(__builtin_types_compatible_p(DnnTensorDesc, cudnnTensorDescriptor_t), "cudnnTensorDescriptor_t");
_Static_assert(__builtin_types_compatible_p(DnnFilterDesc, cudnnFilterDescriptor_t), "cudnnFilterDescriptor_t");
_Static_assert(__builtin_types_compatible_p(DnnConvDesc, cudnnConvolutionDescriptor_t), "cudnnConvolutionDescriptor_t");

/* The three perf structs, field by field. */
#define LAYOUT(T) \
    _Static_assert(sizeof(T) == sizeof(DnnAlgoPerf), #T "'s size"); \
    _Static_assert(offsetof(T, algo) == offsetof(DnnAlgoPerf, algo), #T ".algo"); \
    _Static_assert(offsetof(T, status) == offsetof(DnnAlgoPerf, status), #T ".status"); \
    _Static_assert(offsetof(T, time) == offsetof(DnnAlgoPerf, time), #T ".time"); \
    _Static_assert(offsetof(T, memory) == offsetof(DnnAlgoPerf, memory), #T ".memory"); \
    _Static_assert(offsetof(T, determinism) == offsetof(DnnAlgoPerf, determinism), #T ".determinism"); \
    _Static_assert(offsetof(T, mathType) == offsetof(DnnAlgoPerf, mathType), #T ".mathType")
LAYOUT(cudnnConvolutionFwdAlgoPerf_t);
LAYOUT(cudnnConvolutionBwdDataAlgoPerf_t);
LAYOUT(cudnnConvolutionBwdFilterAlgoPerf_t);

int main(void) {
    printf("codegen/cuda/cudnn_api.h agrees with cudnn.h %d.%d.%d\n", CUDNN_MAJOR, CUDNN_MINOR, CUDNN_PATCHLEVEL);
    return CUDNN_MAJOR == 9 ? 0 : 1;
}
