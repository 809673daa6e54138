# tests/cuda/tests.cmake - tests of the CUDA target (included by codegen/cuda/cuda.cmake when the
# toolkit is found).  Label `cuda`: need no GPU (NVRTC compiles, the no-device message).  Label
# `gpu`: need a device, and exit 77 (skipped) without one.
set(NNC_CUDA_TESTS ${CMAKE_CURRENT_LIST_DIR})
file(GLOB NNC_CUDA_MODELS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/models/*.nn)
# GPT-2 small's kernels are gpt.nn's at other sizes, three times as many (a minute of NVRTC per
# compile, gpt.nn's 18 s); golden_model_gpt2_small_cuda runs the passes on it
list(FILTER NNC_CUDA_MODELS EXCLUDE REGEX "/gpt2_small\\.nn$")
file(GLOB_RECURSE NNC_CUDA_TEST_MODELS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/*.nn)
# tests/cuda/check/ (--check-against's false-alarm family) runs on the emulator, whose NVRTC
# compiles it there; its ops are the other models' (about 17 s of CPU less for the NVRTC tests).
# tests/golden/errors/ holds models the front end rejects, each a golden test: nvrtc_compile
# skipped all 87, three times over (blocks_steps.nn took 0.7 s to reject).
list(FILTER NNC_CUDA_TEST_MODELS EXCLUDE REGEX "/tests/cuda/check/|/tests/golden/errors/")

add_executable(nvrtc_compile ${NNC_CUDA_TESTS}/nvrtc_compile.c)
target_link_libraries(nvrtc_compile PRIVATE nnc_core)
target_include_directories(nvrtc_compile PRIVATE ${NNC_CUDA_INCLUDE})

# nnc's declarations of cuDNN against cudnn.h, where there is one (nnc itself builds without it)
find_path(NNC_CUDNN_INCLUDE NAMES cudnn.h HINTS ${NNC_CUDA_INCLUDE})
if(NNC_CUDNN_INCLUDE)
  add_executable(cudnn_abi ${NNC_CUDA_TESTS}/cudnn_abi.c)
  target_include_directories(cudnn_abi SYSTEM PRIVATE ${NNC_CUDNN_INCLUDE} ${NNC_CUDA_INCLUDE})
  add_test(NAME cudnn_abi COMMAND cudnn_abi)
  set_tests_properties(cudnn_abi PROPERTIES LABELS cuda TIMEOUT 30)
endif()

# every kernel launch's grid and block, at batch sizes up to 2^22 (no device needed)
add_executable(launch_dims ${NNC_CUDA_TESTS}/launch_dims.c)
target_link_libraries(launch_dims PRIVATE nnc_core)
target_include_directories(launch_dims PRIVATE ${NNC_CUDA_INCLUDE})
file(GLOB _nnc_shape_models CONFIGURE_DEPENDS ${NNC_CUDA_TESTS}/ops/*.nn ${NNC_CUDA_TESTS}/shapes/*.nn)
add_test(NAME cuda_launch_dims COMMAND launch_dims ${NNC_CUDA_MODELS} ${_nnc_shape_models})
set_tests_properties(cuda_launch_dims PROPERTIES LABELS cuda TIMEOUT 120)

add_executable(cuda_libs_test ${NNC_CUDA_TESTS}/cuda_libs_test.c)
target_link_libraries(cuda_libs_test PRIVATE nnc_core)
add_test(NAME cuda_libs COMMAND cuda_libs_test)
set_tests_properties(cuda_libs PROPERTIES LABELS cuda TIMEOUT 60)

# the kernels' check of labels and indices, which the command line's data loader never reaches
add_executable(index_check ${NNC_CUDA_TESTS}/index_check.c)
target_link_libraries(index_check PRIVATE nnc_core)

# the ABI's pipelined calls (submit, finish) against run()
add_executable(pipeline_abi ${NNC_CUDA_TESTS}/pipeline_abi.c)
target_link_libraries(pipeline_abi PRIVATE nnc_core)

add_executable(gpu_vs_cpu ${NNC_CUDA_TESTS}/gpu_vs_cpu.c)
target_link_libraries(gpu_vs_cpu PRIVATE nnc_core)
target_compile_definitions(gpu_vs_cpu PRIVATE NNC_CUDA_OPS_DIR="${NNC_CUDA_TESTS}/ops")

# NVRTC keeps process-lifetime allocations that LeakSanitizer would report as leaks
set(_nnc_cuda_env "ASAN_OPTIONS=detect_leaks=0")
# Each variant (fused, f64) is two tests, one per architecture, so that ctest -j runs them side
# by side and none is long.  sm_90 is compiled to a cubin (NVRTC's front end, NVVM optimizing,
# then ptxas, whose limits -- static shared memory, registers under __launch_bounds__ -- a
# kernel's shape decides); sm_80 to compute_80's PTX only (the front end and NVVM's lowering,
# where the source's errors show): ptxas was more than half of each compile and the kernels'
# shapes do not depend on the architecture.  The no-fuse variant (one kernel per op) is
# compute_90's PTX: its op expressions are the fused kernels', which sm_90 takes through NVVM's
# optimizer and ptxas.  Those PTX compiles ask for NVVM's quickest code (--Ofast-compile=max,
# as the emulator's): the optimizer was ~90% of them, and what they add to sm_90's is the source
# as another architecture's front end sees it (its overloads and built-ins: the same errors
# either way) and the unfused kernels lowered, neither of which the optimizer checks.  The
# sanitizer build checks nnc's passes and renderer on every model and renders only
# (--render-only): NVRTC is not instrumented, the source is the same as the normal build's, and
# the compiles were 200 s of that stage.
if(NNC_SANITIZE)
  set(_nnc_nvrtc_archs "render:--render-only")
else()
  set(_nnc_nvrtc_archs "compute80:--arch\;compute_80\;--nvrtc-opt\;--Ofast-compile=max" "sm90:--arch\;sm_90")
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
    list(APPEND _nnc_nvrtc_tests cuda_nvrtc_models_${tag}_${half})
    if(tag STREQUAL "compute80")
      continue()
    endif()
    # unfused, the convnets are a hundred kernels each: tests/cuda/ops/conv.nn covers their ops;
    # gpt.nn's two thousand take a test of their own (below)
    set(_nofuse ${_nnc_nvrtc_half${half}})
    list(FILTER _nofuse EXCLUDE REGEX "/convnet[^/]*\\.nn$|/models/gpt\\.nn$")
    string(REPLACE "sm_90" "compute_90;--nvrtc-opt;--Ofast-compile=max" _ptx_args "${args}")
    string(REPLACE "sm90" "compute90" _ptx_tag "${tag}")
    add_test(NAME cuda_nvrtc_models_nofuse_${_ptx_tag}_${half} COMMAND nvrtc_compile ${_ptx_args} --no-fuse ${_nofuse})
    list(APPEND _nnc_nvrtc_tests cuda_nvrtc_models_nofuse_${_ptx_tag}_${half})
  endforeach()
  if(NOT tag STREQUAL "compute80")
    add_test(NAME cuda_nvrtc_models_nofuse_${_ptx_tag}_gpt COMMAND nvrtc_compile ${_ptx_args} --no-fuse
             ${CMAKE_SOURCE_DIR}/models/gpt.nn)
    list(APPEND _nnc_nvrtc_tests cuda_nvrtc_models_nofuse_${_ptx_tag}_gpt)
  endif()
  add_test(NAME cuda_nvrtc_models_f64_${tag} COMMAND nvrtc_compile ${args} --f64 ${NNC_CUDA_MODELS} ${NNC_CUDA_TESTS}/ops/classifier.nn)
  list(APPEND _nnc_nvrtc_tests cuda_nvrtc_models_f64_${tag})
endforeach()
add_test(NAME cuda_no_device COMMAND ${CMAKE_COMMAND} -DNNC=$<TARGET_FILE:nnc> -DSRC=${CMAKE_SOURCE_DIR}
         -P ${NNC_CUDA_TESTS}/no_device.cmake)
add_test(NAME cuda_shared_kernels COMMAND bash ${NNC_CUDA_TESTS}/shared_kernels.sh $<TARGET_FILE:nnc> ${CMAKE_SOURCE_DIR})
set_tests_properties(cuda_shared_kernels PROPERTIES LABELS cuda TIMEOUT 120)
add_test(NAME cuda_emit_ptx COMMAND ${CMAKE_COMMAND} -DNNC=$<TARGET_FILE:nnc> -DSRC=${CMAKE_SOURCE_DIR}
         -P ${NNC_CUDA_TESTS}/emit_ptx.cmake)
set_tests_properties(${_nnc_nvrtc_tests} cuda_no_device cuda_emit_ptx
                     PROPERTIES LABELS cuda TIMEOUT 300 SKIP_RETURN_CODE 77 ENVIRONMENT "${_nnc_cuda_env}")
set_tests_properties(${_nnc_nvrtc_tests} PROPERTIES COST 40)   # among the longest: started first under -j

# its comparison's two tests (relative, and against the f64 reference) on made-up values
add_test(NAME gpu_vs_cpu_self_test COMMAND gpu_vs_cpu --self-test)
set_tests_properties(gpu_vs_cpu_self_test PROPERTIES LABELS cuda TIMEOUT 30)
add_test(NAME gpu_vs_cpu COMMAND gpu_vs_cpu)
set_tests_properties(gpu_vs_cpu PROPERTIES LABELS gpu TIMEOUT 600 SKIP_RETURN_CODE 77 ENVIRONMENT "${_nnc_cuda_env}")
add_test(NAME index_check COMMAND index_check)
set_tests_properties(index_check PROPERTIES LABELS gpu TIMEOUT 120 SKIP_RETURN_CODE 77 ENVIRONMENT "${_nnc_cuda_env}")
add_test(NAME pipeline_abi COMMAND pipeline_abi)
set_tests_properties(pipeline_abi PROPERTIES LABELS gpu TIMEOUT 120 SKIP_RETURN_CODE 77 ENVIRONMENT "${_nnc_cuda_env}")

# the CUDA emulator: runs the cuda target's kernels on the host (label cuda-emu)
include(${NNC_CUDA_TESTS}/emu/emu.cmake)
# with no models to compare, gpu_vs_cpu fails (it used to pass having compared nothing)
file(MAKE_DIRECTORY ${CMAKE_BINARY_DIR}/empty-ops)
add_test(NAME gpu_vs_cpu_no_models COMMAND gpu_vs_cpu)
set_tests_properties(gpu_vs_cpu_no_models PROPERTIES LABELS cuda TIMEOUT 60
                     PASS_REGULAR_EXPRESSION "FAIL: no models to compare"
                     ENVIRONMENT "NNC_CUDA_OPS_DIR=${CMAKE_BINARY_DIR}/empty-ops;${_nnc_cuda_env}")

# Whole runs on the emulator: training on --target cuda against --target cpu, step by step,
# and the CUDA command-line checks (--check-against, --check-numerics, placement).
if(TARGET nnc_emu_cuda)
  # the CPU runs they compare with at -O0, as tests/cuda/emu/emu.cmake's _emu_env says why
  set(_emu_run_env CUDA_HOME= LD_LIBRARY_PATH=${CMAKE_BINARY_DIR}/emu NNC_EMU_CACHE=${CMAKE_BINARY_DIR}/emu-cache
      XDG_CACHE_HOME=${CMAKE_BINARY_DIR}/emu-xdg-cache NNC_CFLAGS=-O0 NNC_NO_DNNL_SGEMM=1)
  add_test(NAME emu_train_mlp COMMAND /usr/bin/python3 ${NNC_CUDA_TESTS}/emu_train.py $<TARGET_FILE:nnc>
           ${CMAKE_SOURCE_DIR}/models/mlp.nn --epochs 1)
  add_test(NAME emu_train_linreg COMMAND /usr/bin/python3 ${NNC_CUDA_TESTS}/emu_train.py $<TARGET_FILE:nnc>
           ${CMAKE_SOURCE_DIR}/models/linreg.nn --epochs 50)
  # a learning-rate schedule: the rate is device state the trainer rewrites each epoch
  add_test(NAME emu_train_linsched COMMAND /usr/bin/python3 ${NNC_CUDA_TESTS}/emu_train.py $<TARGET_FILE:nnc>
           ${CMAKE_SOURCE_DIR}/tests/numeric/linsched.nn --epochs 30)
  # per-step schedules, parameter groups and gradient accumulation on the CUDA target, against
  # the same torch.optim loop as on the CPU
  add_test(NAME train_settings_torch_emu COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/ref/test_train_settings.py
           --nnc $<TARGET_FILE:nnc> --target cuda)
  # precision = bf16 | f16: half products through GemmEx (plain and strided batched), the half
  # kernels; rounding and gradients against torch as on the CPU
  add_test(NAME emu_train_half_bf16 COMMAND /usr/bin/python3 ${NNC_CUDA_TESTS}/emu_train.py $<TARGET_FILE:nnc>
           ${NNC_CUDA_TESTS}/half/attention_bf16.nn)
  add_test(NAME emu_train_half_f16 COMMAND /usr/bin/python3 ${NNC_CUDA_TESTS}/emu_train.py $<TARGET_FILE:nnc>
           ${NNC_CUDA_TESTS}/half/attention_f16.nn --tol 2e-3)
  # bf16 column sums (bias gradients) over 4133 rows: several row ranges, a short last round
  add_test(NAME emu_train_half_cols COMMAND /usr/bin/python3 ${NNC_CUDA_TESTS}/emu_train.py $<TARGET_FILE:nnc>
           ${NNC_CUDA_TESTS}/half/cols_bf16.nn --epochs 2)
  add_test(NAME half_torch_emu COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/ref/test_half.py
           --run-model $<TARGET_FILE:run_model> --nnc $<TARGET_FILE:nnc> --cuda --parts abdfg)
  # clip_grad_norm: a reduction over every gradient, then one scale for all of them
  add_test(NAME emu_train_clip COMMAND /usr/bin/python3 ${NNC_CUDA_TESTS}/emu_train.py $<TARGET_FILE:nnc>
           ${NNC_CUDA_TESTS}/clip.nn)
  # a model with many parameter tensors, AdamW (with and without weight decay) and clip_grad_norm:
  # the update's sums of squares and steps as grouped kernels (passes/horizontal.c's runs)
  add_test(NAME emu_train_many COMMAND /usr/bin/python3 ${NNC_CUDA_TESTS}/emu_train.py $<TARGET_FILE:nnc>
           ${NNC_CUDA_TESTS}/many_params.nn)
  # ... and their launches: as many with 8 layers as with 2, grids covering their segments
  add_test(NAME multi_tensor_emu COMMAND /usr/bin/python3 ${NNC_CUDA_TESTS}/multi_tensor_test.py $<TARGET_FILE:nnc>
           ${NNC_CUDA_TESTS}/many_params.nn)
  add_test(NAME emu_train_explicit COMMAND /usr/bin/python3 ${NNC_CUDA_TESTS}/emu_train.py $<TARGET_FILE:nnc>
           ${NNC_CUDA_TESTS}/explicit.nn --strict-devices)
  add_test(NAME emu_cli COMMAND ${NNC_CUDA_TESTS}/emu_cli_test.sh $<TARGET_FILE:nnc>)
  # --profile on the cuda target: events around every launch, the copies, no CUDA graph
  add_test(NAME emu_profile COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/e2e/profile_test.py $<TARGET_FILE:nnc>
           --cuda)
  # --target auto / device = auto with an emulated GPU and with none
  add_test(NAME emu_target_auto COMMAND ${NNC_CUDA_TESTS}/emu_auto_test.sh $<TARGET_FILE:nnc>)
  # --check-against cpu on models built to provoke false alarms (tests/cuda/check/), with the
  # kernels contracted into FMAs as NVRTC does (NNC_EMU_FMA=1), so they round as a GPU's do
  add_test(NAME emu_check_family COMMAND ${NNC_CUDA_TESTS}/check/check_family.sh $<TARGET_FILE:nnc>)
  set_tests_properties(emu_check_family PROPERTIES LABELS cuda-emu TIMEOUT 400
                       ENVIRONMENT "${_emu_run_env};NNC_EMU_FMA=1")
  # NaN and Inf through every op on the CUDA kernels, against torch (as nan_torch on the CPU)
  add_test(NAME nan_torch_emu COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/ref/test_nan_torch.py
           --run-model $<TARGET_FILE:run_model> --cuda)
  # conv2d and pooling on the CUDA target (cuDNN's stand-in, the helpers, cuBLAS), against torch:
  # forward and both gradients
  add_test(NAME conv_torch_emu COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/ref/test_conv_torch.py
           --run-model $<TARGET_FILE:run_model> --cuda)
  # the same, the convolutions by im2col + cuBLAS (NNC_CUDNN=0): their CUDA path where there is no
  # cuDNN, and the chunked cases (a batch in several chunks of columns), which cuDNN does not need;
  # the convolutions' cases only (-k conv): the pooling cases run no convolution, so NNC_CUDNN
  # changes nothing of theirs, and conv_torch_emu runs them
  add_test(NAME conv_torch_emu_im2col COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/ref/test_conv_torch.py
           --run-model $<TARGET_FILE:run_model> --cuda -k conv)
  set_tests_properties(conv_torch_emu_im2col PROPERTIES LABELS cuda-emu TIMEOUT 400
                       ENVIRONMENT "${_emu_run_env};NNC_CUDNN=0")
  # convolutions through cuDNN (the emulator's stand-in records what it ran), and every fallback
  add_test(NAME emu_cudnn COMMAND ${NNC_CUDA_TESTS}/cudnn_test.sh $<TARGET_FILE:nnc>)
  set_tests_properties(emu_cudnn PROPERTIES LABELS cuda-emu TIMEOUT 400 ENVIRONMENT "${_emu_run_env}")

  # the shapes the kernels reach the GPU in (grid, block, 16-byte accesses, copies), from the
  # emulator's trace of a training step: the 1000 x 1000 loss, a wide MLP, the two models, the
  # layer norm and softmax rows a warp holds in registers (and rows of 70 and 7 that it does not),
  # column sums over 4133 rows (f32 and bf16), short rows' sums in lane groups
  add_test(NAME launch_shape_emu COMMAND /usr/bin/python3 ${NNC_CUDA_TESTS}/launch_shape_test.py $<TARGET_FILE:nnc>
           ${NNC_CUDA_TESTS}/shapes/square_1000.nn ${NNC_CUDA_TESTS}/shapes/mlp_1024.nn ${CMAKE_SOURCE_DIR}/models/mlp.nn
           ${NNC_CUDA_TESTS}/ops/reduce_cols.nn ${NNC_CUDA_TESTS}/half/cols_bf16.nn
           ${CMAKE_SOURCE_DIR}/models/convnet.nn:16 ${NNC_CUDA_TESTS}/ops/warp_rows.nn ${NNC_CUDA_TESTS}/ops/reduce_rows.nn
           ${NNC_CUDA_TESTS}/ops/rowwise.nn ce:1032:bf16 ce:1028:bf16 ce:1030:f32 ce:1032:f32)
  set_tests_properties(launch_shape_emu PROPERTIES SKIP_RETURN_CODE 77)
  add_test(NAME matmul_torch_emu COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/ref/test_matmul_torch.py
           --run-model $<TARGET_FILE:run_model> --cuda)
  add_test(NAME ce_torch_emu COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/ref/test_ce_torch.py
           --run-model $<TARGET_FILE:run_model> --cuda)
  add_test(NAME tensor_ops_torch_emu COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/ref/test_tensor_ops_torch.py
           --run-model $<TARGET_FILE:run_model> --cuda)
  add_test(NAME random_torch_emu COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/ref/test_random.py
           --run-model $<TARGET_FILE:run_model> --nnc $<TARGET_FILE:nnc> --cuda)
  # gpt.nn (2 layers, n_embd 32) on the CUDA target against nanoGPT's model in torch, 20 AdamW steps:
  # the fused attention kernels in a model
  add_test(NAME gpt_torch_emu COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/ref/test_gpt_torch.py
           --nnc $<TARGET_FILE:nnc> --target cuda --tiny)
  # llama.nn (2 layers, dim 32) on the CUDA target against a LLaMA in torch, 20 AdamW steps
  add_test(NAME llama_torch_emu COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/ref/test_llama_torch.py
           --nnc $<TARGET_FILE:nnc> --target cuda --tiny --batch 4)
  # ... with its attention composed (products, the mask, softmax)
  add_test(NAME gpt_torch_composed_emu COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/ref/test_gpt_torch.py
           --nnc $<TARGET_FILE:nnc> --target cuda --tiny --composed)
  add_test(NAME dropout_philox_emu COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/ref/test_dropout.py
           --run-model $<TARGET_FILE:run_model> --nnc $<TARGET_FILE:nnc> --cuda)
  # the fused attention kernels (forward, backward, dropout's mask) against torch
  add_test(NAME attention_torch_emu COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/ref/test_attention_torch.py
           --run-model $<TARGET_FILE:run_model> --nnc $<TARGET_FILE:nnc> --cuda)
  # model parallel: one model over two emulated GPUs, against the cpu target
  add_test(NAME emu_train_split COMMAND /usr/bin/python3 ${NNC_CUDA_TESTS}/emu_train.py $<TARGET_FILE:nnc>
           ${NNC_CUDA_TESTS}/split.nn --strict-devices)
  set_tests_properties(emu_train_split PROPERTIES LABELS cuda-emu TIMEOUT 400
                       ENVIRONMENT "${_emu_run_env};NNC_EMU_DEVICES=2")
  # the trainer's pipelined calls: the next batch's copy queued on the copy stream before the
  # host waits for a step, no host sync per step but that wait (the emulator's trace), and
  # records, checkpoints, stops and --resume byte for byte as with NNC_NO_PIPELINE=1
  add_test(NAME emu_pipeline COMMAND /usr/bin/python3 ${NNC_CUDA_TESTS}/pipeline_test.py $<TARGET_FILE:nnc>)
  # data parallel on the cuda target: 2 processes, each with an emulated GPU
  add_test(NAME emu_mpi COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/e2e/mpi_test.py $<TARGET_FILE:nnc> --cuda)
  set_tests_properties(emu_mpi PROPERTIES SKIP_RETURN_CODE 77)
  set_tests_properties(emu_train_mlp emu_train_clip emu_train_many multi_tensor_emu emu_train_linreg emu_train_linsched emu_train_half_bf16 emu_train_half_f16
                       emu_train_half_cols
                       train_settings_torch_emu
                       half_torch_emu emu_train_explicit emu_cli emu_profile emu_target_auto nan_torch_emu
                       conv_torch_emu launch_shape_emu matmul_torch_emu ce_torch_emu tensor_ops_torch_emu random_torch_emu
                       dropout_philox_emu gpt_torch_emu gpt_torch_composed_emu llama_torch_emu attention_torch_emu emu_mpi emu_pipeline
                       PROPERTIES
                       LABELS cuda-emu TIMEOUT 400 ENVIRONMENT "${_emu_run_env}")
  set_tests_properties(emu_train_mlp gpt_torch_emu gpt_torch_composed_emu llama_torch_emu PROPERTIES SKIP_RETURN_CODE 77)
  set_tests_properties(launch_shape_emu emu_cudnn PROPERTIES COST 20)   # about their seconds: started early
endif()
