# emit_ptx.cmake - `--emit ptx` prints PTX compiled by NVRTC (not the CUDA source), with every
# kernel's __launch_bounds__ as .maxntid (256), and the elementwise kernels' 16-byte accesses as
# vector loads and stores (ld.global.v4.f32 / st.global.v4.f32, .nc where the input is read-only).
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
