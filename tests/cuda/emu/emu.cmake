# emu.cmake - the CUDA emulator (included by tests/cuda/tests.cmake when the toolkit is found):
# stand-ins for libcuda.so.1, libcublas.so.13, libcublasLt.so.13, libcudnn.so.9 and libnvrtc.so.13 in ${CMAKE_BINARY_DIR}/emu
# that the unchanged nnc loads through LD_LIBRARY_PATH, so the CUDA target runs without a GPU.
# Label `cuda-emu`.  Not in sanitizer builds: the emulator switches stacks (fibers) and catches
# SIGSEGV on its guard pages, which fights ASan's own stack and signal bookkeeping, and the
# sanitizer stage selects tests with -L '...|cuda', which would match `cuda-emu`.
if(NNC_SANITIZE OR NNC_FUZZ OR NOT CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  return()
endif()
find_program(NNC_EMU_CXX NAMES c++ g++ clang++)
find_file(NNC_EMU_REAL_NVRTC libnvrtc.so.13 HINTS ${NNC_CUDA_INCLUDE}/../lib64 /usr/local/cuda/lib64 NO_DEFAULT_PATH)
if(NOT NNC_EMU_CXX OR NOT NNC_EMU_REAL_NVRTC)
  message(STATUS "nnc: CUDA emulator OFF (needs a C++ compiler and the toolkit's libnvrtc.so.13)")
  return()
endif()
get_filename_component(_emu_nvrtc_dir ${NNC_EMU_REAL_NVRTC} DIRECTORY)
set(_emu ${CMAKE_CURRENT_LIST_DIR})
set(_emu_out ${CMAKE_BINARY_DIR}/emu)

function(nnc_emu_lib target file soname)
  add_library(${target} SHARED ${_emu}/${file})
  target_include_directories(${target} SYSTEM PRIVATE ${NNC_CUDA_INCLUDE})
  # the driver's enums (140 device attributes) are CUDA's, not ours: a default: is right there
  target_compile_options(${target} PRIVATE -fvisibility=hidden -Wno-switch-enum)
  target_link_options(${target} PRIVATE -Wl,-soname,${soname})
  set_target_properties(${target} PROPERTIES PREFIX "" OUTPUT_NAME ${soname} SUFFIX "" NO_SONAME ON
                        LIBRARY_OUTPUT_DIRECTORY ${_emu_out})
endfunction()

nnc_emu_lib(nnc_emu_cuda cuda.c libcuda.so.1)
target_compile_definitions(nnc_emu_cuda PRIVATE NNC_EMU_CXX="${NNC_EMU_CXX}" NNC_EMU_HEADER="${_emu}/emu_kernel.h")
target_link_libraries(nnc_emu_cuda PRIVATE ${CMAKE_DL_LIBS} pthread)
nnc_emu_lib(nnc_emu_cublas cublas.c libcublas.so.13)
target_link_libraries(nnc_emu_cublas PRIVATE nnc_emu_cuda ${NNC_OPENBLAS} m)
# cuBLASLt's products with an epilogue (a bias, then ReLU), by OpenBLAS too
nnc_emu_lib(nnc_emu_cublaslt cublaslt.c libcublasLt.so.13)
target_link_libraries(nnc_emu_cublaslt PRIVATE nnc_emu_cuda ${NNC_OPENBLAS} m)
# cuDNN's convolutions by reference loops (no cudnn.h needed: codegen/cuda/cudnn_api.h)
nnc_emu_lib(nnc_emu_cudnn cudnn.c libcudnn.so.9)
target_link_libraries(nnc_emu_cudnn PRIVATE nnc_emu_cuda)
nnc_emu_lib(nnc_emu_nvrtc nvrtc.c libnvrtc.so.13)
target_compile_definitions(nnc_emu_nvrtc PRIVATE NNC_EMU_REAL_NVRTC_DIR="${_emu_nvrtc_dir}")
target_link_libraries(nnc_emu_nvrtc PRIVATE ${CMAKE_DL_LIBS} pthread)

# NCCL over the MPI job nnc joins (data parallel on the cuda target), when MPI is there
if(MPI_C_FOUND)
  nnc_emu_lib(nnc_emu_nccl nccl.c libnccl.so.2)
  target_link_libraries(nnc_emu_nccl PRIVATE nnc_emu_cuda MPI::MPI_C)
endif()

add_executable(emu_selftest ${_emu}/selftest.c)
target_include_directories(emu_selftest SYSTEM PRIVATE ${NNC_CUDA_INCLUDE})
target_link_libraries(emu_selftest PRIVATE nnc_emu_cuda nnc_emu_cublas nnc_emu_cudnn nnc_emu_nvrtc)
add_dependencies(emu_selftest nnc_emu_cublaslt)

# CUDA_HOME empty: nnc would look there first and load the real libraries.  The CPU code these
# tests compare with (gpu_vs_cpu's reference, --check-against cpu) is compiled at -O0, as
# gradcheck's: the same arithmetic in the same order (no fast-math, contraction off), and the
# C compiler was half of gpu_vs_cpu's time at -O3 (60 -> 33 s at -O1, 41.6 -> 39.1 s of CPU at
# -O0); -O3's code is checked by the CPU tests.  An -O of its own also keeps the CLI from
# building -O3 in the background.  Its f32
# products are OpenBLAS's (NNC_NO_DNNL_SGEMM=1), as the emulator's cuBLAS computes them: a
# training run's per-step losses follow the products' order (two OpenBLAS kernel sets, or
# oneDNN's, differ by 1e-5 in the median over mlp.nn's first epoch), and these tests check the
# CUDA code, not which library summed a product.
set(_emu_env CUDA_HOME= LD_LIBRARY_PATH=${_emu_out} NNC_EMU_CACHE=${CMAKE_BINARY_DIR}/emu-cache
    XDG_CACHE_HOME=${CMAKE_BINARY_DIR}/emu-xdg-cache NNC_CFLAGS=-O0 NNC_NO_DNNL_SGEMM=1)
foreach(order forward reverse random:7)
  string(REPLACE ":" "_" _name ${order})
  add_test(NAME emu_selftest_${_name} COMMAND emu_selftest)
  set_tests_properties(emu_selftest_${_name} PROPERTIES LABELS cuda-emu TIMEOUT 120
                       ENVIRONMENT "${_emu_env};NNC_EMU_ORDER=${order}")
endforeach()
# Reversed, the fibers' order finds a missing barrier in the reductions and row kernels (in f32:
# the f64 kernels have the same barriers); the helpers (convolution, pooling, concat: one element
# a thread, no barriers) run forward only.
file(GLOB _emu_ops CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/cuda/ops/*.nn)
set(_emu_ops_reverse ${_emu_ops})
list(FILTER _emu_ops_reverse EXCLUDE REGEX "/(conv|concat)\\.nn$")
add_test(NAME gpu_vs_cpu_emu_forward COMMAND gpu_vs_cpu)
add_test(NAME gpu_vs_cpu_emu_reverse COMMAND gpu_vs_cpu --f32-only ${_emu_ops_reverse})
foreach(order forward reverse)
  set_tests_properties(gpu_vs_cpu_emu_${order} PROPERTIES LABELS cuda-emu TIMEOUT 400
                       ENVIRONMENT "${_emu_env};NNC_EMU_ORDER=${order}")
endforeach()
add_dependencies(gpu_vs_cpu nnc_emu_cuda nnc_emu_cublas nnc_emu_cublaslt nnc_emu_cudnn nnc_emu_nvrtc)
# the convolutions by im2col + cuBLAS (NNC_CUDNN=0), which the runs above do in cuDNN's stand-in
add_test(NAME gpu_vs_cpu_emu_im2col COMMAND gpu_vs_cpu ${CMAKE_SOURCE_DIR}/tests/cuda/ops/conv.nn)
set_tests_properties(gpu_vs_cpu_emu_im2col PROPERTIES LABELS cuda-emu TIMEOUT 120
                     ENVIRONMENT "${_emu_env};NNC_CUDNN=0")
# a train step straight after init, as `nnc train` runs: nothing has synchronized yet
add_test(NAME gpu_vs_cpu_emu_train_first COMMAND gpu_vs_cpu --train-first ${CMAKE_SOURCE_DIR}/tests/cuda/ops/classifier.nn)
set_tests_properties(gpu_vs_cpu_emu_train_first PROPERTIES LABELS cuda-emu TIMEOUT 120 ENVIRONMENT "${_emu_env}")
# the products' epilogues without cuBLASLt's (its heuristic finds nothing): the cuBLAS product and
# nnc_bias_rows, which the runs above never take
add_test(NAME gpu_vs_cpu_emu_no_lt COMMAND gpu_vs_cpu ${CMAKE_SOURCE_DIR}/tests/cuda/ops/epilogue.nn
         ${CMAKE_SOURCE_DIR}/tests/cuda/ops/classifier.nn)
set_tests_properties(gpu_vs_cpu_emu_no_lt PROPERTIES LABELS cuda-emu TIMEOUT 120
                     ENVIRONMENT "${_emu_env};NNC_EMU_LT_NONE=1")
# gpu_vs_cpu compiles through the kernel cache (emu-xdg-cache): the others run after the forward
# one, which compiles every model they run (each loads its objects and cubins: 20.6 -> 7.7 s of CPU
# for the reversed run), and it starts among the first (COST: about its seconds)
set_tests_properties(gpu_vs_cpu_emu_reverse gpu_vs_cpu_emu_im2col gpu_vs_cpu_emu_train_first gpu_vs_cpu_emu_no_lt PROPERTIES
                     DEPENDS gpu_vs_cpu_emu_forward)
set_tests_properties(gpu_vs_cpu_emu_forward PROPERTIES COST 50)
# a label or an index out of range, fed through the library, stops the step on the device
add_test(NAME index_check_emu COMMAND index_check)
set_tests_properties(index_check_emu PROPERTIES LABELS cuda-emu TIMEOUT 120 ENVIRONMENT "${_emu_env}")
add_dependencies(index_check nnc_emu_cuda nnc_emu_cublas nnc_emu_cudnn nnc_emu_nvrtc)
# pipelined calls through the ABI (queued one ahead, as the trainer does) against run()
add_test(NAME pipeline_abi_emu COMMAND pipeline_abi)
set_tests_properties(pipeline_abi_emu PROPERTIES LABELS cuda-emu TIMEOUT 120 ENVIRONMENT "${_emu_env}")
add_dependencies(pipeline_abi nnc_emu_cuda nnc_emu_cublas nnc_emu_cudnn nnc_emu_nvrtc)
# the kernel cache is a security boundary: a directory others can write to is refused
add_test(NAME emu_cache_refused COMMAND emu_selftest)
set_tests_properties(emu_cache_refused PROPERTIES LABELS cuda-emu TIMEOUT 60
                     PASS_REGULAR_EXPRESSION "refusing NNC_EMU_CACHE=/tmp"
                     ENVIRONMENT "CUDA_HOME=;LD_LIBRARY_PATH=${_emu_out};NNC_EMU_CACHE=/tmp")
