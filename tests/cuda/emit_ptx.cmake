# emit_ptx.cmake - `--emit ptx` prints PTX compiled by NVRTC (not the CUDA source), with every
# kernel's __launch_bounds__ as .maxntid (256), and the elementwise kernels' 16-byte accesses as
# vector loads and stores (ld.global.v4.f32 / st.global.v4.f32, .nc where the input is read-only);
# bf16 attention on tensor cores.
#   cmake -DNNC=path/to/nnc -DSRC=source/dir -P emit_ptx.cmake
execute_process(COMMAND ${NNC} ${SRC}/models/mlp.nn --target cuda --emit ptx
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "--emit ptx failed: rc=${rc}\n${err}")
endif()
foreach(want "\\.version [0-9]" "\\.target sm_[0-9]" "\\.entry mlp_train_step_[0-9]" "\\.maxntid 256, 1, 1"
       "ld\\.global(\\.nc)?\\.v4\\.f32" "st\\.global\\.v4\\.f32")
  if(NOT out MATCHES "${want}")
    message(FATAL_ERROR "--emit ptx: no '${want}' in its output (is it CUDA C instead of PTX?)")
  endif()
endforeach()
if(out MATCHES "__global__")
  message(FATAL_ERROR "--emit ptx printed CUDA C")
endif()
message(STATUS "--emit ptx prints PTX with launch bounds")
# bf16 attention on tensor cores: mma.sync, its B fragments through ldmatrix (transposed too),
# and (head sizes and strides multiples of 8) its tiles copied 16 bytes at a time by cp.async
execute_process(COMMAND ${NNC} ${SRC}/tests/cuda/half/sdpa_bf16.nn --target cuda --emit ptx
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "--emit ptx of sdpa_bf16.nn failed: rc=${rc}\n${err}")
endif()
# each kernel's PTX function, from its .func line to the closing brace at a line's start
foreach(fn nnc_attn_fwd_bf16_mma_64x32_d128_v128_q140_k140_v8 nnc_attn_bwd_bf16_mma_64x64_d128_v128_q140_k140_v8)
  string(REGEX MATCH "\\.func _Z[0-9]+${fn}" head "${out}")
  if(NOT head)
    message(FATAL_ERROR "--emit ptx of sdpa_bf16.nn: no function ${fn} (the tensor-core attention kernels)")
  endif()
  string(FIND "${out}" "${head}" at)
  string(SUBSTRING "${out}" ${at} -1 body)
  string(FIND "${body}" "\n}\n" end)
  string(SUBSTRING "${body}" 0 ${end} body)
  foreach(want "mma\\.sync\\.aligned\\.m16n8k16\\.row\\.col\\.f32\\.bf16\\.bf16\\.f32"
               "ldmatrix\\.sync\\.aligned\\.m8n8\\.x4\\.shared\\.b16"
               "ldmatrix\\.sync\\.aligned\\.m8n8\\.x4\\.trans\\.shared\\.b16"
               "cp\\.async\\.cg\\.shared\\.global \\[[^]]+\\], \\[[^]]+\\], 16"
               "cp\\.async\\.wait_group 1")
    if(NOT body MATCHES "${want}")
      message(FATAL_ERROR "--emit ptx of sdpa_bf16.nn: no '${want}' in ${fn}")
    endif()
  endforeach()
endforeach()
message(STATUS "bf16 attention: mma.sync, ldmatrix and cp.async")
# NNC_ATTN_MINB=3 (a variant to time on a GPU): the backward's kernels ask 3 blocks an SM
# (.minnctapersm 3), where by default none does (the column sums ask 2)
if(out MATCHES "\\.minnctapersm 3")
  message(FATAL_ERROR "--emit ptx of sdpa_bf16.nn: .minnctapersm 3 without NNC_ATTN_MINB")
endif()
set(ENV{NNC_ATTN_MINB} 3)
execute_process(COMMAND ${NNC} ${SRC}/tests/cuda/half/sdpa_bf16.nn --target cuda --emit ptx --no-cache
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
unset(ENV{NNC_ATTN_MINB})
string(REGEX MATCHALL "\\.minnctapersm 3" asked "${out}")
list(LENGTH asked n)
if(NOT rc EQUAL 0 OR n EQUAL 0)
  message(FATAL_ERROR "--emit ptx with NNC_ATTN_MINB=3: no kernel asks 3 blocks an SM (rc=${rc})\n${err}")
endif()
message(STATUS "NNC_ATTN_MINB=3: ${n} kernels ask 3 blocks an SM")
