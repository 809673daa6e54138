# no_device.cmake - a CUDA-enabled nnc on a machine without a GPU or driver:
#   --target cuda fails with a plain "no CUDA driver/device" message (no crash, no link error),
#   and the CPU target still trains.  On a machine with a GPU the first check is skipped.
#   cmake -DNNC=path/to/nnc -DSRC=source/dir -P no_device.cmake
execute_process(COMMAND ${NNC} ${SRC}/models/linreg.nn --target cuda --epochs 1 --quiet --no-cache
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(STATUS "a CUDA device is present: the no-device message is not checked here")
elseif(NOT err MATCHES "no CUDA (driver|device) found")
  message(FATAL_ERROR "--target cuda without a device: expected a plain 'no CUDA driver/device found', got rc=${rc}:\n${err}")
else()
  message(STATUS "--target cuda without a device: rc=${rc}: ${err}")
endif()

execute_process(COMMAND ${NNC} ${SRC}/models/linreg.nn --target cpu --epochs 3 --no-cache
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT "${out}${err}" MATCHES "loss")
  message(FATAL_ERROR "the CPU target no longer trains in a CUDA-enabled build: rc=${rc}\n${out}\n${err}")
endif()
if(EXISTS /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz)
  execute_process(COMMAND ${NNC} ${SRC}/models/mlp.nn --target cpu --bench 5 --no-cache
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "median_us")
    message(FATAL_ERROR "mlp.nn on the CPU failed in a CUDA-enabled build: rc=${rc}\n${out}\n${err}")
  endif()
endif()
message(STATUS "the CPU target trains in a CUDA-enabled build")
