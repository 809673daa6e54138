/* tokens.c - token streams: one dimension of token ids, for tokens() (train/dataset.c); see
 * data.h.
 *
 * Two kinds of file.  llm.c's (dev/data/data_common.py write_datafile): a header of 256
 * little-endian int32 (magic, version, token count, the rest 0), then the tokens, uint16 for
 * GPT-2 (magic 20240520, version 1) or uint32 for Llama 3 (magic 20240801, version 7); the
 * file holds exactly the tokens its header counts.  And a raw array of tokens with no header,
 * as nanoGPT's prepare.py writes its train.bin (numpy uint16 .tofile()), in the width asked
 * for: uint8 makes any byte file (a text) a byte-level stream.  NNC_TOKENS_AUTO reads llm.c's
 * header when the file starts with one of its magics, else raw uint16.
 *
 * Every token becomes an i32; a uint32 token of 2^31 or more does not fit one and is refused
 * (no vocabulary is that large). */
#define _POSIX_C_SOURCE 200809L

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data_impl.h"

#define LLMC_HEADER_BYTES 1024
#define LLMC_GPT2 20240520 /* version 1: uint16 tokens */
#define LLMC_LLAMA3 20240801 /* version 7: uint32 tokens */

static const struct {
    const char *name;
    size_t width;
} token_formats[] = {[NNC_TOKENS_AUTO] = {"uint16", 2},
                     [NNC_TOKENS_U8] = {"uint8", 1},
                     [NNC_TOKENS_U16] = {"uint16", 2},
                     [NNC_TOKENS_U32] = {"uint32", 4},
                     [NNC_TOKENS_I32] = {"int32", 4}};

static int32_t le_i32(const uint8_t *p) {
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

/* Where the tokens start and their format: llm.c's header checked, or none. */
typedef struct {
    nnc_tokens_format fmt;
    size_t data_off;
    int64_t declared; /* the header's token count; -1: no header */
    int guessed; /* raw uint16 because no dtype was asked for and no header is there */
} token_layout;

static int llmc_is_magic(const uint8_t *b, size_t len) {
    return len >= 4 && (le_i32(b) == LLMC_GPT2 || le_i32(b) == LLMC_LLAMA3);
}

/* llm.c's header: its version for its magic, a token count of at least 1. */
static int llmc_header(const uint8_t *b, size_t len, const char *name, token_layout *t, char *err, size_t errlen) {
    int32_t magic = le_i32(b), want = magic == LLMC_GPT2 ? 1 : 7;
    if (len < LLMC_HEADER_BYTES) {
        data_err(err, errlen, "%s: truncated: an llm.c token file (magic %d) has a %d-byte header, found %zu bytes",
                 name, magic, LLMC_HEADER_BYTES, len);
        return -1;
    }
    if (le_i32(b + 4) != want) {
        data_err(err, errlen, "%s: offset 4: expected version %d of llm.c's token file (magic %d, %s tokens), got %d",
                 name, want, magic, want == 1 ? "uint16" : "uint32", le_i32(b + 4));
        return -1;
    }
    if (le_i32(b + 8) < 1) {
        data_err(err, errlen, "%s: offset 8: expected a token count of at least 1, got %d", name, le_i32(b + 8));
        return -1;
    }
    *t = (token_layout){want == 1 ? NNC_TOKENS_U16 : NNC_TOKENS_U32, LLMC_HEADER_BYTES, le_i32(b + 8), 0};
    return 0;
}

static int token_layout_of(const uint8_t *b, size_t len, const char *name, nnc_tokens_format fmt, token_layout *t,
                           char *err, size_t errlen) {
    if (fmt == NNC_TOKENS_AUTO && llmc_is_magic(b, len)) return llmc_header(b, len, name, t, err, errlen);
    *t = (token_layout){fmt == NNC_TOKENS_AUTO ? NNC_TOKENS_U16 : fmt, 0, -1, fmt == NNC_TOKENS_AUTO};
    return 0;
}

/* The data after the header: exactly the tokens the header counts, or a whole number of tokens. */
static int token_count(const token_layout *t, size_t len, const char *name, int64_t *n, char *err, size_t errlen) {
    size_t w = token_formats[t->fmt].width, avail = len - t->data_off;
    const char *ty = token_formats[t->fmt].name;
    if (t->declared >= 0) {
        size_t want = (size_t)t->declared * w;
        if (avail < want)
            data_err(err, errlen,
                     "%s: truncated: the header counts %lld %s tokens (%zu bytes after its %zu), found %zu", name,
                     (long long)t->declared, ty, want, t->data_off, avail);
        else if (avail > want)
            data_err(err, errlen,
                     "%s: offset %zu: expected the end of the file after the %lld tokens its header "
                     "counts, found more",
                     name, t->data_off + want, (long long)t->declared);
        *n = t->declared;
        return avail == want ? 0 : -1;
    }
    if (avail % w) {
        data_err(err, errlen, "%s: %zu bytes is not a whole number of %zu-byte %s tokens%s", name, avail, w, ty,
                 t->guessed ? " (no llm.c header, so read as raw uint16, as nanoGPT writes them; dtype = "
                              "\"uint8\" reads bytes)"
                            : "");
        return -1;
    }
    if (avail == 0) {
        data_err(err, errlen, "%s: no tokens (the file is empty)", name);
        return -1;
    }
    *n = (int64_t)(avail / w);
    return 0;
}

/* The tokens at b as i32, little-endian in the file. */
static int tokens_convert(const uint8_t *b, const token_layout *t, int64_t n, const char *name, int32_t *out, char *err,
                          size_t errlen) {
    size_t w = token_formats[t->fmt].width;
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *p = b + (size_t)i * w;
        uint32_t v = w == 1 ? p[0] : w == 2 ? (uint32_t)p[0] | (uint32_t)p[1] << 8 : (uint32_t)le_i32(p);
        if (t->fmt == NNC_TOKENS_U32 && v > INT32_MAX) {
            data_err(err, errlen, "%s: offset %zu: token %lld is %lu, beyond the ids an i32 input holds (< 2^31)", name,
                     t->data_off + (size_t)i * w, (long long)i, (unsigned long)v);
            return -1;
        }
        out[i] = (int32_t)v;
    }
    return 0;
}

int nnc_parse_tokens(const void *buf, size_t len, const char *name, nnc_tokens_format fmt, nnc_array *out,
                     nnc_tokens_layout *at, char *err, size_t errlen) {
    const uint8_t *b = buf;
    token_layout t;
    int64_t n;
    data_array_clear(out);
    name = data_name(name);
    if ((int)fmt < 0 || fmt > NNC_TOKENS_I32) {
        data_err(err, errlen, "%s: unknown token format %d", name, (int)fmt);
        return -1;
    }
    if (token_layout_of(b, len, name, fmt, &t, err, errlen) != 0 || token_count(&t, len, name, &n, err, errlen) != 0)
        return -1;
    if (data_array_alloc(out, NNC_DT_I32, 1, &n, (size_t)n * 4, name, err, errlen) != 0) return -1;
    if (at) *at = (nnc_tokens_layout){t.data_off, token_formats[t.fmt].width};
    if (tokens_convert(b + t.data_off, &t, n, name, out->data, err, errlen) != 0) {
        nnc_array_free(out);
        return -1;
    }
    return 0;
}

/* The file is read whole (up to 4 GiB from a .gz), then parsed. */
int nnc_load_tokens(const char *path, nnc_tokens_format fmt, nnc_array *out, nnc_tokens_layout *at, char *err,
                    size_t errlen) {
    data_file f;
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0;
    int rc;
    data_array_clear(out);
    if (data_file_open(&f, path, err, errlen) != 0) return -1;
    rc = data_file_read_upto(&f, &buf, &len, &cap, f.direct ? SIZE_MAX : DATA_GZ_LIMIT + 1, err, errlen);
    if (rc == 0 && !f.direct && len > DATA_GZ_LIMIT) {
        data_err(err, errlen, "%s: refusing more than 4 GiB from a gzip file", path);
        rc = -1;
    }
    rc = data_file_close(&f, rc, err, errlen);
    if (rc == 0) rc = nnc_parse_tokens(buf, len, path, fmt, out, at, err, errlen);
    free(buf);
    return rc;
}
