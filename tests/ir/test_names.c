/* test_names.c - what user-controlled text becomes in generated code.
 *
 *   nn_model_c_name   file name -> the prefix of every generated symbol: names whose NAME_t is a
 *                     standard type, names in a reserved name space (timer_, nnc) and leading
 *                     digits or '_' get "m_"; keywords and macros (int, INFINITY) are unchanged,
 *                     as NAME never stands alone; no "__"; idempotent
 *   render_num        every double becomes a valid C/CUDA literal or constant expression:
 *                     finite values round-trip exactly, inf and NaN are never "inf"/"-nan"
 *   render_file_name  a file name quoted in comments and strings loses '"', '%', '*', '\' */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "frontend/frontend.h"

static int failures, checks;

#define CHECK(cond, ...)                                                              \
    do {                                                                              \
        checks++;                                                                     \
        if (!(cond)) {                                                                \
            failures++;                                                               \
            printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                    \
            printf(__VA_ARGS__);                                                      \
            printf("\n");                                                             \
        }                                                                             \
    } while (0)

static void test_model_names(Arena *a) {
    static const char *cases[][2] = {
        {"models/mlp.nn", "mlp"},      {"auto.nn", "auto"},           {"int.nn", "int"},
        {"class.nn", "class"},         {"INFINITY.nn", "INFINITY"},   {"INT64_MAX.nn", "INT64_MAX"},
        {"errno.nn", "m_errno"},       {"int32.nn", "m_int32"},       {"uint_least8.nn", "m_uint_least8"},
        {"u_int8.nn", "m_u_int8"},     {"size.nn", "m_size"},         {"sigset.nn", "m_sigset"},
        {"timer.nn", "m_timer"},       {"timers.nn", "timers"},       {"thrd_pool.nn", "m_thrd_pool"},
        {"nnc_model.nn", "m_nnc_model"}, {"NNC_ABI.nn", "m_NNC_ABI"}, {"pthreads.nn", "m_pthreads"},
        {"_x.nn", "m_x"},              {"2layer.nn", "m_2layer"},     {"my-net v2.nn", "my_net_v2"},
        {"my--net_.nn", "my_net"},     {"a\"b%s*.nn", "a_b_s"},       {".nn", "m_nn"},
        {"-.nn", "m"},                 {"stdin.nn", "stdin"},         {"interp.nn", "interp"},
        {"integer.nn", "integer"},
    };
    for (size_t i = 0; i < NNC_COUNTOF(cases); i++) {
        const char *got = nn_model_c_name(a, cases[i][0]);
        CHECK(!strcmp(got, cases[i][1]), "'%s' -> '%s', expected '%s'", cases[i][0], got, cases[i][1]);
        const char *again = nn_model_c_name(a, got);
        CHECK(!strcmp(again, got), "not idempotent: '%s' -> '%s'", got, again);
    }
}

static void test_render_num(void) {
    char buf[RENDER_NUM_LEN];
    const double finite[] = {0.0, -0.0, 1.0, -2.5, 0.1, 1e-310, 1.7976931348623157e308, -1e-8, 3.0e38};
    for (size_t i = 0; i < NNC_COUNTOF(finite); i++) {
        const char *s = render_num(buf, finite[i]);
        CHECK(strtod(s, NULL) == finite[i], "%.17g rendered as '%s'", finite[i], s);
    }
    const double odd[] = {INFINITY, -INFINITY, NAN, -NAN};
    for (size_t i = 0; i < NNC_COUNTOF(odd); i++) {
        const char *s = render_num(buf, odd[i]);
        CHECK(!strstr(s, "inf") && !strstr(s, "nan"), "%g rendered as '%s'", odd[i], s);
    }
    CHECK(!strcmp(render_num(buf, INFINITY), "(1.0 / 0.0)"), "got '%s'", buf);
    CHECK(!strcmp(render_num(buf, -INFINITY), "(-1.0 / 0.0)"), "got '%s'", buf);
    CHECK(!strcmp(render_num(buf, NAN), "(0.0 / 0.0)"), "got '%s'", buf);
}

static void test_file_name(Arena *a) {
    Graph g = {.arena = a};
    Program p = {.g = &g};
    const char *s = render_file_name(&p, "dir/we\"ird%s*/\\x?.nn");
    CHECK(!strpbrk(s, "\"%*\\?"), "unsafe characters kept: '%s'", s);
    CHECK(!strcmp(render_file_name(&p, "models/mlp-2 (copy).nn"), "models/mlp-2 (copy).nn"), "ordinary name changed");
}

int main(void) {
    Arena a = {0};
    test_model_names(&a);
    test_render_num();
    test_file_name(&a);
    arena_free(&a);
    printf("names: %d checks, %d failed\n", checks, failures);
    return failures != 0;
}
