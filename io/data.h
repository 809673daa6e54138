/*
 * data.h - load training data (IDX, .npy, CSV) into plain row-major arrays.
 *
 * Every loader comes in two forms: nnc_load_* reads a file (through zlib,
 * so a gzip-compressed file works wherever a plain one does) and hands the
 * bytes to nnc_parse_*, which works on memory and is what the fuzzers and
 * unit tests drive.  All of them return 0 on success, or -1 with `err`
 * holding one line that names the file, where (byte offset, or line for
 * CSV) and what was expected versus found, e.g.
 *
 *   train.gz: offset 2: expected IDX type code 0x08..0x0E, got 0x42
 *   data.csv:17: expected 11 columns, got 10
 *
 * Float data (f32/f64 .npy and IDX, every CSV cell) must be finite: a NaN or
 * Inf is an error naming the sample (index along the first dimension), the
 * element and the byte offset (CSV: the line and column), because one NaN in
 * training data trains silently into NaN weights.
 *
 * The parsers never trust a header: the byte count a header implies is
 * overflow-checked and compared with the bytes actually present before
 * anything is allocated.  On failure *out is left empty (data == NULL), so
 * nnc_array_free() is always safe to call.
 *
 * Usage:
 *   nnc_array x, xf;
 *   char err[256];
 *   if (nnc_load_idx("train-images-idx3-ubyte.gz", &x, err, sizeof err) ||
 *       nnc_array_to_f32(&x, 1.0f / 255, &xf, err, sizeof err)) {
 *       fprintf(stderr, "%s\n", err);
 *       exit(1);
 *   }
 *   // xf.dims = {60000, 28, 28}, xf.data = float[60000*28*28]
 *   nnc_array_free(&x);
 *   nnc_array_free(&xf);
 */
#ifndef NNC_DATA_H
#define NNC_DATA_H

#include <stddef.h>
#include <stdint.h>

#define NNC_MAX_RANK 8

typedef enum {
    NNC_DT_U8,   /* uint8_t  (also numpy bool |b1, read as 0/1) */
    NNC_DT_I8,   /* int8_t */
    NNC_DT_I16,  /* int16_t */
    NNC_DT_I32,  /* int32_t */
    NNC_DT_I64,  /* int64_t */
    NNC_DT_F32,  /* float */
    NNC_DT_F64,  /* double */
    NNC_DT_BF16, /* bfloat16 bits (uint16_t): checkpoints exported with --save-dtype */
    NNC_DT_F16   /* IEEE float16 bits (uint16_t) */
} nnc_dtype;
#define NNC_DT_COUNT (NNC_DT_F16 + 1) /* for tables indexed by dtype */

typedef struct {
    nnc_dtype dtype;
    int rank;                   /* 0..NNC_MAX_RANK; rank 0 is a scalar (one element) */
    int64_t dims[NNC_MAX_RANK]; /* dims[0..rank-1], each >= 0 */
    void *data;                 /* malloc'd, row-major, host byte order; never NULL on success */
} nnc_array;

/* Files.  A .gz file is decompressed on the fly, as it streams: one that runs on past
 * what its header declares is refused at the first byte too many, and one that gives
 * more than 4 GiB of data is refused (a gzip bomb costs megabytes, not gigabytes). */
int nnc_load_idx(const char *path, nnc_array *out, char *err, size_t errlen);
int nnc_load_npy(const char *path, nnc_array *out, char *err, size_t errlen);
/* The same, with NaN and Inf read as they are (not training data: test tools feed them). */
int nnc_load_npy_values(const char *path, nnc_array *out, char *err, size_t errlen);
/* The dtype and shape a file's header declares, its data not read (out->data stays NULL; a
 * caller can refuse a file whose samples cannot fit before gigabytes of them are inflated). */
int nnc_load_idx_header(const char *path, nnc_array *out, char *err, size_t errlen);
int nnc_load_npy_header(const char *path, nnc_array *out, char *err, size_t errlen);
/* skip_header: 1 = first line is a header, 0 = it is data, -1 = auto-detect
 * (a first line with any non-numeric cell is a header).  Gives F64 [rows, cols]. */
int nnc_load_csv(const char *path, int skip_header, nnc_array *out, char *err, size_t errlen);

/* The same on memory; `name` is used only in messages. */
int nnc_parse_idx(const void *buf, size_t len, const char *name, nnc_array *out, char *err, size_t errlen);
int nnc_parse_npy(const void *buf, size_t len, const char *name, nnc_array *out, char *err, size_t errlen);
/* An 8-bit IDX in memory, checked as nnc_parse_idx checks it, without a copy: out->data points
 * into buf (never free it; it lives as long as buf).  -1 with err for anything else. */
int nnc_view_idx_u8(const void *buf, size_t len, const char *name, nnc_array *out, char *err, size_t errlen);
int nnc_parse_csv(const void *buf, size_t len, const char *name, int skip_header, nnc_array *out, char *err,
                  size_t errlen);

/* Token streams (io/tokens.c): llm.c's .bin (a 256-int32 header: magic 20240520 and version 1
 * for uint16 tokens, 20240801 and 7 for uint32, the token count; then exactly that many tokens)
 * or a raw array of tokens in the width asked for; AUTO reads llm.c's header when the file
 * starts with one of its magics, else raw uint16 (nanoGPT's train.bin).  Gives I32 [tokens]. */
typedef enum { NNC_TOKENS_AUTO, NNC_TOKENS_U8, NNC_TOKENS_U16, NNC_TOKENS_U32, NNC_TOKENS_I32 } nnc_tokens_format;
/* Where token i lies in the file: at data_off + i * width (for messages about a token). */
typedef struct {
    size_t data_off, width;
} nnc_tokens_layout;
/* `at` may be NULL. */
int nnc_load_tokens(const char *path, nnc_tokens_format fmt, nnc_array *out, nnc_tokens_layout *at, char *err,
                    size_t errlen);
int nnc_parse_tokens(const void *buf, size_t len, const char *name, nnc_tokens_format fmt, nnc_array *out,
                     nnc_tokens_layout *at, char *err, size_t errlen);

/* Conversions; `out` may be the same array as `in` (it is then replaced). */
int nnc_array_to_f32(const nnc_array *in, float scale, nnc_array *out, char *err, size_t errlen);
/* Integer dtypes in int32 range, or floats that are exact integers in range;
 * anything else is an error naming the first bad element's flat index. */
int nnc_array_to_i32(const nnc_array *in, nnc_array *out, char *err, size_t errlen);

int64_t nnc_array_numel(const nnc_array *a); /* product of dims, 1 for rank 0 */
size_t nnc_dtype_size(nnc_dtype t);          /* bytes per element, 0 if invalid */
const char *nnc_dtype_name(nnc_dtype t);     /* "u8" ... "f64", "?" if invalid */
void nnc_array_free(nnc_array *a);           /* frees data, zeroes *a; NULL ok */

#endif /* NNC_DATA_H */
