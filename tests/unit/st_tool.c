/*
 * st_tool.c - the C side of the safetensors cross-checks.
 *   st_tool save PATH   writes the fixed tensors below (the Python test
 *                       regenerates the same values and compares)
 *   st_tool dump PATH   prints "meta <key> <value>" and, per tensor,
 *                       "tensor <name> <DTYPE> <d0,d1|-> <crc32 of data>"
 *                       or "error <message>"
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "nnc_rng.h"
#include "safetensors.h"

static uint8_t u8[15];
static int8_t i8[7];
static int16_t i16[24];
static int32_t i32[16];
static int64_t i64[5];
static float f32[8], fc1[12], scalar = 3.5f;
static double f64[6];

/* Keep in step with expected_tensors() in tests/ref/test_runtime_py.py. */
static void fill(void)
{
    int k;
    for (k = 0; k < 15; k++)
        u8[k] = (uint8_t)((k * 37 + 11) % 256);
    for (k = 0; k < 7; k++)
        i8[k] = (int8_t)((k * 37 + 11) % 256 - 128);
    for (k = 0; k < 24; k++)
        i16[k] = (int16_t)(k * 1237 - 5000);
    for (k = 0; k < 16; k++)
        i32[k] = (k - 8) * 1000003;
    for (k = 0; k < 5; k++)
        i64[k] = (k - 2) * 3000000000123LL;
    for (k = 0; k < 8; k++)
        f32[k] = (float)((k - 3.5) * 0.25);
    for (k = 0; k < 6; k++)
        f64[k] = k * 0.375 - 0.9375; /* exact, so fused multiply-add cannot change it */
    for (k = 0; k < 12; k++)
        fc1[k] = (float)nnc_rng_uniform(7, nnc_rng_hash("fc1.weight"), (uint64_t)k);
}

static int save(const char *path)
{
    nnc_st_tensor ts[] = {
        { "u8", NNC_DT_U8, 2, { 3, 5 }, u8 },      { "i8", NNC_DT_I8, 1, { 7 }, i8 },
        { "i16", NNC_DT_I16, 3, { 2, 3, 4 }, i16 }, { "i32", NNC_DT_I32, 2, { 4, 4 }, i32 },
        { "i64", NNC_DT_I64, 1, { 5 }, i64 },       { "f32", NNC_DT_F32, 3, { 2, 2, 2 }, f32 },
        { "f64", NNC_DT_F64, 1, { 6 }, f64 },       { "scalar", NNC_DT_F32, 0, { 0 }, &scalar },
        { "empty", NNC_DT_F32, 2, { 0, 4 }, NULL }, { "fc1.weight", NNC_DT_F32, 2, { 3, 4 }, fc1 },
    };
    nnc_st_meta meta[] = { { "step", "1000" }, { "note", "h\xc3\xa9llo \"quoted\"\n" } };
    char err[512];
    fill();
    if (nnc_st_save(path, ts, (int)(sizeof ts / sizeof ts[0]), meta, 2, err, sizeof err) != 0) {
        printf("error %s\n", err);
        return 1;
    }
    printf("saved %s\n", path);
    return 0;
}

static void dump_tensor(const nnc_st_tensor *t)
{
    static const char *names[] = { "U8", "I8", "I16", "I32", "I64", "F32", "F64" };
    size_t bytes = nnc_dtype_size(t->dtype);
    uLong crc = crc32(0L, Z_NULL, 0);
    int d;
    for (d = 0; d < t->rank; d++)
        bytes *= (size_t)t->dims[d];
    printf("tensor %s %s ", t->name, names[t->dtype]);
    for (d = 0; d < t->rank; d++)
        printf("%s%lld", d ? "," : "", (long long)t->dims[d]);
    if (t->rank == 0)
        printf("-");
    if (bytes > 0)
        crc = crc32(crc, t->data, (uInt)bytes);
    printf(" %08lx\n", (unsigned long)crc);
}

static int dump(const char *path)
{
    char err[512];
    nnc_st_file *f = nnc_st_load(path, err, sizeof err);
    const char *keys[] = { "nnc_crc32", "step", "format", "origin" }; /* one-line values */
    size_t k;
    int i;
    if (!f) {
        printf("error %s\n", err);
        return 1;
    }
    for (k = 0; k < sizeof keys / sizeof keys[0]; k++)
        if (nnc_st_meta_get(f, keys[k]))
            printf("meta %s %s\n", keys[k], nnc_st_meta_get(f, keys[k]));
    for (i = 0; i < nnc_st_count(f); i++)
        dump_tensor(nnc_st_get(f, i));
    nnc_st_close(f);
    return 0;
}

int main(int argc, char **argv)
{
    int rc;
    if (argc != 3 || (strcmp(argv[1], "save") != 0 && strcmp(argv[1], "dump") != 0)) {
        fprintf(stderr, "usage: st_tool save|dump PATH\n");
        return 2;
    }
    rc = strcmp(argv[1], "save") == 0 ? save(argv[2]) : dump(argv[2]);
    return fflush(stdout) == 0 ? rc : 1;
}
