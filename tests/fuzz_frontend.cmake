# The front-end fuzz target: .nn text through every pass to rendered C (tests/fuzz/fuzz_frontend.c).
# Seeds: every model and every golden test's .nn file.  Label fuzz, NNC_FUZZ_SECONDS long.
add_executable(fuzz_frontend ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_frontend.c)
target_link_libraries(fuzz_frontend PRIVATE nnc_core)
target_link_options(fuzz_frontend PRIVATE -fsanitize=fuzzer)
set(fe_work ${CMAKE_CURRENT_BINARY_DIR}/fuzz_frontend_work)
file(MAKE_DIRECTORY ${fe_work}/corpus ${fe_work}/seeds)
file(GLOB_RECURSE fe_seeds ${CMAKE_SOURCE_DIR}/models/*.nn ${CMAKE_CURRENT_SOURCE_DIR}/golden/*.nn
     ${CMAKE_CURRENT_SOURCE_DIR}/e2e/*.nn)
file(COPY ${fe_seeds} DESTINATION ${fe_work}/seeds)
add_test(NAME fuzz_frontend
  COMMAND fuzz_frontend -max_total_time=${NNC_FUZZ_SECONDS} -timeout=10 -rss_limit_mb=2048 -max_len=4096
          -print_final_stats=1 -artifact_prefix=${fe_work}/ ${fe_work}/corpus ${fe_work}/seeds)
math(EXPR fe_limit "${NNC_FUZZ_SECONDS} + 120")
set_tests_properties(fuzz_frontend PROPERTIES LABELS fuzz TIMEOUT ${fe_limit})
