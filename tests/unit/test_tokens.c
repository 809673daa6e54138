/*
 * test_tokens.c - nnc_load_tokens / nnc_parse_tokens: llm.c's .bin (GPT-2's uint16 and Llama
 * 3's uint32 headers), raw files of every width, plain and gzipped, and every way a file can
 * disagree with its header or its width, each with its message.
 */
#define _XOPEN_SOURCE 700

#include <stdint.h>
#include <zlib.h>

#include "check.h"
#include "data.h"

static unsigned char file[4096];

static void le32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

/* llm.c's write_datafile: 256 int32 (magic, version, count), then count tokens of `width`. */
static size_t llmc_build(uint32_t magic, uint32_t version, int32_t count, const uint32_t *tok, int n, int width) {
    memset(file, 0, 1024);
    le32(file, magic);
    le32(file + 4, version);
    le32(file + 8, (uint32_t)count);
    for (int i = 0; i < n; i++) {
        unsigned char *p = file + 1024 + (size_t)i * (size_t)width;
        if (width == 2) {
            p[0] = (unsigned char)tok[i];
            p[1] = (unsigned char)(tok[i] >> 8);
        } else le32(p, tok[i]);
    }
    return 1024 + (size_t)n * (size_t)width;
}

static void gz_write(const char *path, const void *buf, size_t len) {
    gzFile gz = gzopen(path, "wb");
    if (!gz || gzwrite(gz, buf, (unsigned)len) != (int)len || gzclose(gz) != Z_OK) check_die(path);
}

static int same(const nnc_array *a, const uint32_t *want, int n) {
    if (a->dtype != NNC_DT_I32 || a->rank != 1 || a->dims[0] != n) return 0;
    for (int i = 0; i < n; i++)
        if (((const int32_t *)a->data)[i] != (int32_t)want[i]) return 0;
    return 1;
}

static void test_llmc(void) {
    const uint32_t gpt2[] = {50256, 1, 65535, 0, 464};
    const uint32_t llama[] = {128000, 70000, 2, 2147483647u};
    char err[256] = "";
    nnc_array a;
    size_t len = llmc_build(20240520, 1, 5, gpt2, 5, 2);
    check_write(check_path("gpt2.bin"), file, len);
    gz_write(check_path("gpt2.bin.gz"), file, len);
    for (int gz = 0; gz < 2; gz++) {
        int rc =
            nnc_load_tokens(check_path(gz ? "gpt2.bin.gz" : "gpt2.bin"), NNC_TOKENS_AUTO, &a, NULL, err, sizeof err);
        CHECK(rc == 0 && same(&a, gpt2, 5), "llm.c GPT-2 file%s: 5 uint16 tokens (%s)", gz ? " gzipped" : "", err);
        nnc_array_free(&a);
    }
    len = llmc_build(20240801, 7, 4, llama, 4, 4);
    nnc_tokens_layout at = {0, 0};
    int rc = nnc_parse_tokens(file, len, "llama.bin", NNC_TOKENS_AUTO, &a, &at, err, sizeof err);
    CHECK(rc == 0 && same(&a, llama, 4), "llm.c Llama 3 file: 4 uint32 tokens (%s)", err);
    CHECK(at.data_off == 1024 && at.width == 4, "its tokens lie from byte 1024, 4 bytes each");
    nnc_array_free(&a);
}

static void test_raw(void) {
    const unsigned char bytes[] = {'G', 'P', 'L', '\n', 0xFF};
    const uint32_t as_u8[] = {'G', 'P', 'L', '\n', 0xFF}, as_u16[] = {0x5047, 0x0A4C}, as_u32[] = {0x0A4C5047u};
    char err[256] = "";
    nnc_array a;
    int rc = nnc_parse_tokens(bytes, 5, "t.txt", NNC_TOKENS_U8, &a, NULL, err, sizeof err);
    CHECK(rc == 0 && same(&a, as_u8, 5), "uint8: every byte a token (%s)", err);
    nnc_array_free(&a);
    rc = nnc_parse_tokens(bytes, 4, "t.u16", NNC_TOKENS_AUTO, &a, NULL, err, sizeof err);
    CHECK(rc == 0 && same(&a, as_u16, 2), "no header: raw little-endian uint16, as nanoGPT writes (%s)", err);
    nnc_array_free(&a);
    rc = nnc_parse_tokens(bytes, 4, "t.u16", NNC_TOKENS_U16, &a, NULL, err, sizeof err);
    CHECK(rc == 0 && same(&a, as_u16, 2), "uint16 asked for (%s)", err);
    nnc_array_free(&a);
    rc = nnc_parse_tokens(bytes, 4, "t.u32", NNC_TOKENS_U32, &a, NULL, err, sizeof err);
    CHECK(rc == 0 && same(&a, as_u32, 1), "uint32 (%s)", err);
    nnc_array_free(&a);
    const unsigned char i32[] = {0xFF, 0xFF, 0xFF, 0x7F, 7, 0, 0, 0};
    const uint32_t as_i32[] = {0x7FFFFFFF, 7};
    rc = nnc_parse_tokens(i32, 8, "t.i32", NNC_TOKENS_I32, &a, NULL, err, sizeof err);
    CHECK(rc == 0 && same(&a, as_i32, 2), "int32 (%s)", err);
    nnc_array_free(&a);
    /* an llm.c file read with a width asked for is raw: its header becomes tokens */
    const uint32_t one[] = {7};
    size_t len = llmc_build(20240520, 1, 1, one, 1, 2);
    rc = nnc_parse_tokens(file, len, "raw.bin", NNC_TOKENS_U16, &a, NULL, err, sizeof err);
    CHECK(rc == 0 && a.dims[0] == 513, "an asked-for width reads no header: %lld tokens", (long long)a.dims[0]);
    nnc_array_free(&a);
}

static void test_errors(void) {
    const uint32_t tok[] = {1, 2, 3};
    char err[512] = "";
    nnc_array a;
    size_t len = llmc_build(20240520, 1, 3, tok, 3, 2);
    CHECK_ERR(nnc_parse_tokens(file, 100, "h.bin", NNC_TOKENS_AUTO, &a, NULL, err, sizeof err), err,
              "h.bin: truncated: an llm.c token file (magic 20240520) has a 1024-byte header, found 100 bytes",
              "a cut header");
    le32(file + 4, 2);
    CHECK_ERR(nnc_parse_tokens(file, len, "v.bin", NNC_TOKENS_AUTO, &a, NULL, err, sizeof err), err,
              "v.bin: offset 4: expected version 1 of llm.c's token file (magic 20240520, uint16 tokens), got 2",
              "another version");
    len = llmc_build(20240801, 1, 3, tok, 3, 4);
    CHECK_ERR(nnc_parse_tokens(file, len, "l.bin", NNC_TOKENS_AUTO, &a, NULL, err, sizeof err), err,
              "l.bin: offset 4: expected version 7 of llm.c's token file (magic 20240801, uint32 tokens), got 1",
              "Llama 3's magic with GPT-2's version");
    len = llmc_build(20240520, 1, 0, tok, 0, 2);
    CHECK_ERR(nnc_parse_tokens(file, len, "z.bin", NNC_TOKENS_AUTO, &a, NULL, err, sizeof err), err,
              "z.bin: offset 8: expected a token count of at least 1, got 0", "no tokens counted");
    len = llmc_build(20240520, 1, 4, tok, 3, 2);
    CHECK_ERR(nnc_parse_tokens(file, len, "t.bin", NNC_TOKENS_AUTO, &a, NULL, err, sizeof err), err,
              "t.bin: truncated: the header counts 4 uint16 tokens (8 bytes after its 1024), found 6",
              "fewer tokens than counted");
    len = llmc_build(20240520, 1, 2, tok, 3, 2);
    CHECK_ERR(nnc_parse_tokens(file, len, "m.bin", NNC_TOKENS_AUTO, &a, NULL, err, sizeof err), err,
              "m.bin: offset 1028: expected the end of the file after the 2 tokens its header counts, found more",
              "more tokens than counted");
    CHECK_ERR(nnc_parse_tokens("abc", 3, "odd.bin", NNC_TOKENS_AUTO, &a, NULL, err, sizeof err), err,
              "odd.bin: 3 bytes is not a whole number of 2-byte uint16 tokens (no llm.c header, so read as raw "
              "uint16, as nanoGPT writes them; dtype = \"uint8\" reads bytes)",
              "an odd raw file, no width asked for");
    CHECK_ERR(nnc_parse_tokens("abcdef", 6, "odd.u32", NNC_TOKENS_U32, &a, NULL, err, sizeof err), err,
              "odd.u32: 6 bytes is not a whole number of 4-byte uint32 tokens", "a raw file, not whole uint32s");
    CHECK(strstr(err, "nanoGPT") == NULL, "no guess explained when the width was asked for");
    CHECK_ERR(nnc_parse_tokens("", 0, "e.bin", NNC_TOKENS_U8, &a, NULL, err, sizeof err), err,
              "e.bin: no tokens (the file is empty)", "an empty file");
    const unsigned char big[] = {1, 0, 0, 0, 0, 0, 0, 0x80};
    CHECK_ERR(nnc_parse_tokens(big, 8, "b.u32", NNC_TOKENS_U32, &a, NULL, err, sizeof err), err,
              "b.u32: offset 4: token 1 is 2147483648, beyond the ids an i32 input holds (< 2^31)",
              "a uint32 token past i32");
    CHECK(a.data == NULL, "a failed parse leaves the array empty");
    CHECK_ERR(nnc_load_tokens(check_path("missing.bin"), NNC_TOKENS_AUTO, &a, NULL, err, sizeof err), err,
              "missing.bin: cannot open: No such file or directory", "a missing file");
}

int main(void) {
    test_llmc();
    test_raw();
    test_errors();
    return check_done();
}
