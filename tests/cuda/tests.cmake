# tests/cuda/tests.cmake - tests of the CUDA target (included by codegen/cuda/cuda.cmake when the
# toolkit is found).  Label `cuda`: need no GPU (NVRTC compiles, the no-device message).  Label
# `gpu`: need a device, and exit 77 (skipped) without one.
set(NNC_CUDA_TESTS ${CMAKE_CURRENT_LIST_DIR})
file(GLOB NNC_CUDA_MODELS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/models/*.nn)
file(GLOB_RECURSE NNC_CUDA_TEST_MODELS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/*.nn)

add_executable(nvrtc_compile ${NNC_CUDA_TESTS}/nvrtc_compile.c)
target_link_libraries(nvrtc_compile PRIVATE nnc_core)
target_include_directories(nvrtc_compile PRIVATE ${NNC_CUDA_INCLUDE})

add_executable(gpu_vs_cpu ${NNC_CUDA_TESTS}/gpu_vs_cpu.c)
target_link_libraries(gpu_vs_cpu PRIVATE nnc_core)
target_compile_definitions(gpu_vs_cpu PRIVATE NNC_CUDA_OPS_DIR="${NNC_CUDA_TESTS}/ops")

# NVRTC keeps process-lifetime allocations that LeakSanitizer would report as leaks
set(_nnc_cuda_env "ASAN_OPTIONS=detect_leaks=0")
# Each variant (fused, no-fuse, f64) is three tests: PTX (compute_80, compute_90), sm_80 and
# sm_90 (cubins cost about three times a PTX), so that ctest -j runs them side by side and none
# is long.  The sanitizer build checks nnc's passes and renderer on every model but compiles for
# sm_90 only: NVRTC is not instrumented, and the normal build compiles for all four.
if(NNC_SANITIZE)
  set(_nnc_nvrtc_archs "sm90:--arch\;sm_90")
else()
  set(_nnc_nvrtc_archs "ptx:--arch\;compute_80\;--arch\;compute_90" "sm80:--arch\;sm_80" "sm90:--arch\;sm_90")
endif()
# The fused and no-fuse variants also take the model files in two halves (every other file).
set(_nnc_nvrtc_half0 "")
set(_nnc_nvrtc_half1 "")
set(_nnc_nvrtc_i 0)
foreach(model IN LISTS NNC_CUDA_MODELS NNC_CUDA_TEST_MODELS)
  math(EXPR _nnc_nvrtc_h "${_nnc_nvrtc_i} % 2")
  list(APPEND _nnc_nvrtc_half${_nnc_nvrtc_h} ${model})
  math(EXPR _nnc_nvrtc_i "${_nnc_nvrtc_i} + 1")
endforeach()
set(_nnc_nvrtc_tests "")
foreach(family IN LISTS _nnc_nvrtc_archs)
  string(REGEX REPLACE ":.*" "" tag "${family}")
  string(REGEX REPLACE "^[^:]*:" "" args "${family}")
  foreach(half 0 1)
    add_test(NAME cuda_nvrtc_models_${tag}_${half} COMMAND nvrtc_compile ${args} ${_nnc_nvrtc_half${half}})
    add_test(NAME cuda_nvrtc_models_nofuse_${tag}_${half} COMMAND nvrtc_compile ${args} --no-fuse ${_nnc_nvrtc_half${half}})
    list(APPEND _nnc_nvrtc_tests cuda_nvrtc_models_${tag}_${half} cuda_nvrtc_models_nofuse_${tag}_${half})
  endforeach()
  add_test(NAME cuda_nvrtc_models_f64_${tag} COMMAND nvrtc_compile ${args} --f64 ${NNC_CUDA_MODELS} ${NNC_CUDA_TESTS}/ops/classifier.nn)
  list(APPEND _nnc_nvrtc_tests cuda_nvrtc_models_f64_${tag})
endforeach()
add_test(NAME cuda_no_device COMMAND ${CMAKE_COMMAND} -DNNC=$<TARGET_FILE:nnc> -DSRC=${CMAKE_SOURCE_DIR}
         -P ${NNC_CUDA_TESTS}/no_device.cmake)
set_tests_properties(${_nnc_nvrtc_tests} cuda_no_device
                     PROPERTIES LABELS cuda TIMEOUT 300 SKIP_RETURN_CODE 77 ENVIRONMENT "${_nnc_cuda_env}")

add_test(NAME gpu_vs_cpu COMMAND gpu_vs_cpu)
set_tests_properties(gpu_vs_cpu PROPERTIES LABELS gpu TIMEOUT 600 SKIP_RETURN_CODE 77 ENVIRONMENT "${_nnc_cuda_env}")
