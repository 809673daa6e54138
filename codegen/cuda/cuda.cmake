# cuda.cmake - the CUDA target, included by the top-level CMakeLists.txt.
#
# Needs only the toolkit's headers at build time: libcuda, libnvrtc, libcublas, libcudnn and libnccl
# are opened with dlopen at run time (cuDNN's and NCCL's few declarations are nnc's own, so neither
# cudnn.h nor nccl.h is needed), so a CUDA-enabled nnc still starts and trains on the CPU on a
# machine without a GPU, a driver or the toolkit's libraries.
set(NNC_CUDA_HAVE OFF)
if(NNC_CUDA)
  set(_nnc_cuda_hints ${CUDAToolkit_ROOT} $ENV{CUDAToolkit_ROOT} $ENV{CUDA_HOME} /usr/local/cuda)
  find_path(NNC_CUDA_INCLUDE NAMES nvrtc.h HINTS ${_nnc_cuda_hints} PATH_SUFFIXES include)
  if(NNC_CUDA_INCLUDE AND EXISTS ${NNC_CUDA_INCLUDE}/cuda.h AND EXISTS ${NNC_CUDA_INCLUDE}/cublas_v2.h)
    set(NNC_CUDA_HAVE ON)
  endif()
endif()

if(NNC_CUDA_HAVE)
  message(STATUS "nnc: CUDA target ON (headers in ${NNC_CUDA_INCLUDE}; driver, NVRTC, cuBLAS and cuDNN are loaded at run time)")
  target_sources(nnc_core PRIVATE codegen/cuda/dialect_cuda.c codegen/cuda/render_cuda.c codegen/cuda/nvrtc.c codegen/cuda/cuda_libs.c codegen/cuda/cuda_api.c codegen/cuda/cuda_issue.c codegen/cuda/backend_cuda.c codegen/cuda/cuda_dnn.c codegen/cuda/cuda_profile.c codegen/cuda/nccl.c)
  # the toolkit headers are for types only; as SYSTEM they do not trip -Wall -Wextra -Werror
  target_include_directories(nnc_core SYSTEM PRIVATE ${NNC_CUDA_INCLUDE})
  target_compile_definitions(nnc_core PUBLIC NNC_HAVE_CUDA)
  include(${CMAKE_CURRENT_LIST_DIR}/../../tests/cuda/tests.cmake OPTIONAL)
else()
  if(NOT NNC_CUDA)
    message(STATUS "nnc: CUDA target OFF (-DNNC_CUDA=OFF)")
  else()
    message(STATUS "nnc: CUDA target OFF (no nvrtc.h, cuda.h and cublas_v2.h under CUDAToolkit_ROOT, CUDA_HOME or /usr/local/cuda)")
  endif()
endif()
