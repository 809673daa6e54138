/*
 * safetensors.h - read and write checkpoints in Hugging Face's safetensors
 * format, so that `safetensors.safe_open(path, "pt")` / `safetensors.numpy.
 * load_file(path)` read what nnc saves, and nnc reads what they save.
 *
 * File layout: an 8-byte little-endian header length N, N bytes of JSON
 *   {"__metadata__": {"key": "value", ...},
 *    "fc1.weight": {"dtype": "F32", "shape": [128, 784], "data_offsets": [0, 401408]}, ...}
 * padded with spaces to a multiple of 8, then the tensors' bytes
 * (little-endian, row-major; data_offsets are relative to the data start).
 *
 * nnc_st_save writes `path.tmp.<pid>`, fsyncs it and renames it over path,
 * so a crash or a full disk mid-save leaves the previous checkpoint intact.
 * When path is a symbolic link, its target is written (atomically, in the
 * target's directory) and the link stays.  The temporary file is created
 * with O_EXCL|O_NOFOLLOW, and with the permission bits of the file it will
 * replace (a new file: 0666 less the umask); ones that killed saves left (`path.tmp.<pid>` of
 * a process that no longer exists, a regular file owned by this user) are
 * removed first.
 * It records the zlib crc32 of the data section as metadata "nnc_crc32";
 * the loaders verify it when present (files from other writers lack it).
 * "nnc_meta_crc32" likewise covers the other metadata (a checkpoint's step,
 * epoch and position matter as much as its weights).
 *
 * Usage:
 *   nnc_st_tensor t[] = { { "fc1.weight", NNC_DT_F32, 2, { 128, 784 }, w1 },
 *                         { "fc1.bias",   NNC_DT_F32, 1, { 128 },      b1 } };
 *   nnc_st_meta m[] = { { "step", "1000" } };
 *   char err[256];
 *   if (nnc_st_save("ckpt.safetensors", t, 2, m, 1, err, sizeof err)) die(err);
 *
 *   nnc_st_file *f = nnc_st_load("ckpt.safetensors", err, sizeof err);
 *   if (!f) die(err);
 *   const nnc_st_tensor *w = nnc_st_find(f, "fc1.weight");  // NULL if absent
 *   ... copy w->data (aligned to its dtype, valid until nnc_st_close) ...
 *   nnc_st_close(f);
 *
 * Only little-endian hosts are supported (as by safetensors itself).
 */
#ifndef NNC_SAFETENSORS_H
#define NNC_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "data.h" /* nnc_dtype, NNC_MAX_RANK */

typedef struct {
    const char *name;           /* NUL-terminated, unique within a file */
    nnc_dtype dtype;            /* U8 I8 I16 I32 I64 F32 F64 ("BOOL" loads as U8) */
    int rank;                   /* 0..NNC_MAX_RANK */
    int64_t dims[NNC_MAX_RANK]; /* each >= 0 */
    const void *data;           /* numel * dtype size bytes, row-major */
} nnc_st_tensor;

typedef struct {
    const char *key, *value; /* both NUL-terminated */
} nnc_st_meta;

typedef struct nnc_st_file nnc_st_file;

/* Returns 0, or -1 with err filled (and any previous file at path untouched).
 * The metadata keys "nnc_crc32" and "nnc_meta_crc32" are reserved. */
int nnc_st_save(const char *path, const nnc_st_tensor *ts, int n, const nnc_st_meta *meta, int nmeta, char *err,
                size_t errlen);

/* 0 when a save to path may replace what is there: nothing, or a regular file (a symbolic
 * link is followed, as nnc_st_save does); -1 with err filled for a FIFO, a device, a socket
 * or a directory, which nnc_st_save refuses too (it never replaces them). */
int nnc_st_dest_check(const char *path, char *err, size_t errlen);

/* Return NULL with err filled if the file is unreadable, truncated,
 * malformed or fails its checksum.  nnc_st_parse copies what it keeps. */
nnc_st_file *nnc_st_load(const char *path, char *err, size_t errlen);
nnc_st_file *nnc_st_parse(const void *buf, size_t len, const char *name, char *err, size_t errlen);

int nnc_st_count(const nnc_st_file *f);                                   /* tensors */
const nnc_st_tensor *nnc_st_get(const nnc_st_file *f, int i);             /* header order */
const nnc_st_tensor *nnc_st_find(const nnc_st_file *f, const char *name); /* NULL if absent */
const char *nnc_st_meta_get(const nnc_st_file *f, const char *key);       /* NULL if absent */
void nnc_st_close(nnc_st_file *f);                                        /* NULL ok */

#endif /* NNC_SAFETENSORS_H */
