/*
 * test_convert.c - nnc_array_to_f32 / nnc_array_to_i32 and the small array
 * helpers: values, aliasing (out == in), and errors naming the element.
 */
#define _XOPEN_SOURCE 700

#include <math.h>

#include "check.h"
#include "data.h"

static nnc_array make(nnc_dtype t, int64_t n, const void *src)
{
    nnc_array a;
    memset(&a, 0, sizeof a);
    a.dtype = t;
    a.rank = 1;
    a.dims[0] = n;
    a.data = malloc((size_t)n * nnc_dtype_size(t) + 1);
    if (!a.data)
        check_die("malloc");
    memcpy(a.data, src, (size_t)n * nnc_dtype_size(t));
    return a;
}

static void test_to_f32(void)
{
    static const uint8_t u8[3] = { 0, 51, 255 };
    static const int64_t i64[2] = { -3, 1 << 20 };
    nnc_array a = make(NNC_DT_U8, 3, u8), b = make(NNC_DT_I64, 2, i64), f;
    char err[256] = "";
    int rc = nnc_array_to_f32(&a, 1.0f / 255, &f, err, sizeof err);
    float *v = f.data;
    CHECK(rc == 0 && f.dtype == NNC_DT_F32 && f.rank == 1 && f.dims[0] == 3 && v[0] == 0 &&
              fabsf(v[1] - 0.2f) < 1e-7f && v[2] == 1.0f,
          "u8 -> f32 with scale 1/255 %s", err);
    nnc_array_free(&f);
    rc = nnc_array_to_f32(&b, 2.0f, &b, err, sizeof err);
    v = b.data;
    CHECK(rc == 0 && b.dtype == NNC_DT_F32 && v[0] == -6 && v[1] == 2097152,
          "i64 -> f32 in place (out == in) %s", err);
    nnc_array_free(&a);
    nnc_array_free(&b);
}

/* A finite value that scaling pushes past the f32 range is refused, naming the sample and
 * element (the error a NaN check at load time cannot see). */
static void test_to_f32_overflow(void)
{
    static const double big[4] = { 1, 2, 3, 1e300 };
    nnc_array a = make(NNC_DT_F64, 4, big), f;
    char err[256] = "";
    int rc;
    a.rank = 2;
    a.dims[0] = 2;
    a.dims[1] = 2;
    rc = nnc_array_to_f32(&a, 1.0f, &f, err, sizeof err);
    CHECK_ERR(rc, err, "to_f32: element 3 (sample 1, element 1) is 1.0000000000000001e+300 (f64), "
              "which times 1 is outside the f32 range", "f64 past the f32 range");
    CHECK(f.data == NULL, "output left empty");
    nnc_array_free(&a);
}

/* Labels: the sample is counted along the first dimension. */
static void test_to_i32_sample(void)
{
    static const double lab[6] = { 0, 1, 2, 3, 4.5, 5 };
    nnc_array a = make(NNC_DT_F64, 6, lab), r;
    char err[256] = "";
    int rc;
    a.rank = 2;
    a.dims[0] = 3;
    a.dims[1] = 2;
    rc = nnc_array_to_i32(&a, &r, err, sizeof err);
    CHECK_ERR(rc, err, "element 4 (sample 2, element 0) is 4.5", "fractional label names its sample");
    nnc_array_free(&a);
}

static void test_to_i32(void)
{
    static const double ok[3] = { -7, 0, 2147483647 };
    static const double frac[4] = { 1, 2, 2.5, 3 };
    static const float nan1[2] = { 0, NAN };
    static const int64_t big[3] = { 1, -2147483648LL, 3000000000LL };
    static const int16_t i16[2] = { -300, 300 };
    nnc_array a = make(NNC_DT_F64, 3, ok), b = make(NNC_DT_F64, 4, frac),
              c = make(NNC_DT_F32, 2, nan1), d = make(NNC_DT_I64, 3, big),
              e = make(NNC_DT_I16, 2, i16), r;
    char err[256] = "";
    int rc = nnc_array_to_i32(&a, &r, err, sizeof err);
    CHECK(rc == 0 && r.dtype == NNC_DT_I32 && ((int32_t *)r.data)[0] == -7 &&
              ((int32_t *)r.data)[2] == 2147483647,
          "f64 holding exact integers -> i32 %s", err);
    nnc_array_free(&r);
    rc = nnc_array_to_i32(&b, &r, err, sizeof err);
    CHECK_ERR(rc, err, "to_i32: element 2 (sample 2, element 0) is 2.5 (f64), not an integer in the int32 range",
              "fractional float names element 2");
    CHECK(r.data == NULL, "output left empty");
    rc = nnc_array_to_i32(&c, &r, err, sizeof err);
    CHECK_ERR(rc, err, "element 1 (sample 1, element 0) is nan (f32)", "NaN");
    rc = nnc_array_to_i32(&d, &r, err, sizeof err);
    CHECK_ERR(rc, err, "to_i32: element 2 (sample 2, element 0) is 3000000000 (i64), outside the int32 range",
              "i64 out of range");
    rc = nnc_array_to_i32(&e, &e, err, sizeof err);
    CHECK(rc == 0 && e.dtype == NNC_DT_I32 && ((int32_t *)e.data)[0] == -300 &&
              ((int32_t *)e.data)[1] == 300,
          "i16 -> i32 in place %s", err);
    rc = nnc_array_to_i32(&b, &b, err, sizeof err);
    CHECK(rc == -1 && b.dtype == NNC_DT_F64 && ((double *)b.data)[2] == 2.5,
          "a failed in-place conversion leaves the input intact");
    nnc_array_free(&a);
    nnc_array_free(&b);
    nnc_array_free(&c);
    nnc_array_free(&d);
    nnc_array_free(&e);
}

static void test_helpers(void)
{
    nnc_array a, r;
    char err[256] = "";
    int rc;
    memset(&a, 0, sizeof a);
    CHECK(nnc_array_numel(&a) == 1, "rank 0 has one element");
    a.rank = 2;
    a.dims[0] = INT64_MAX / 2;
    a.dims[1] = 3;
    CHECK(nnc_array_numel(&a) == -1, "numel reports overflow as -1");
    rc = nnc_array_to_f32(&a, 1, &r, err, sizeof err);
    CHECK_ERR(rc, err, "to_f32: invalid input array", "overflowing dims are refused");
    a.dtype = (nnc_dtype)99;
    a.rank = 0;
    rc = nnc_array_to_i32(&a, &r, err, sizeof err);
    CHECK_ERR(rc, err, "to_i32: invalid input array", "invalid dtype is refused");
    CHECK(nnc_dtype_size(NNC_DT_I16) == 2 && nnc_dtype_size(NNC_DT_F64) == 8 &&
              nnc_dtype_size((nnc_dtype)99) == 0,
          "dtype sizes");
    CHECK(strcmp(nnc_dtype_name(NNC_DT_U8), "u8") == 0 &&
              strcmp(nnc_dtype_name((nnc_dtype)-1), "?") == 0,
          "dtype names");
    nnc_array_free(NULL);
    CHECK(1, "nnc_array_free(NULL) is harmless");
}

int main(void)
{
    test_to_f32();
    test_to_i32();
    test_to_i32_sample();
    test_to_f32_overflow();
    test_helpers();
    return check_done();
}
