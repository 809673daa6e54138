/* data_impl.h - what the format readers of io/ share (io/data.c defines it): errors, dims,
 * array allocation, byte order, the finite check, and reading (possibly gzip'd) files.
 * Private to io/: the public contract is data.h. */
#ifndef NNC_DATA_IMPL_H
#define NNC_DATA_IMPL_H
#include <stdint.h>
#include <zlib.h>

#include "data.h"

#define DATA_GZ_LIMIT ((size_t)4 << 30) /* most bytes a .gz may inflate to */
#define DATA_READ_CHUNK ((size_t)1 << 20)

typedef struct {
    gzFile gz;
    const char *path;
    int direct; /* 1 if the file is not gzip-compressed */
    int shown;  /* 1 if others may read the file, so that messages may quote a few of its bytes */
} data_file;

#define DATA_EXCERPT_MAX 8 /* most characters of a file's content a message quotes */

__attribute__((format(printf, 3, 4))) void data_err(char *err, size_t errlen, const char *fmt, ...);
const char *data_name(const char *name);
const char *data_excerpt(char *out, size_t n, const void *s, size_t len, size_t max, int shown);
int data_dims_bytes(const int64_t *dims, int rank, size_t esize, size_t *bytes);
const char *data_dims_str(const int64_t *dims, int rank, char *buf, size_t n);
void data_array_clear(nnc_array *a);
int data_array_alloc(nnc_array *out, nnc_dtype t, int rank, const int64_t *dims, size_t bytes, const char *name,
                     char *err, size_t errlen);
int data_host_is_big_endian(void);
void *data_buf_adopt(uint8_t *buf, size_t off, size_t bytes, size_t esize, int src_big);
void data_elems_copy(void *dst, const uint8_t *src, size_t n, size_t esize, int src_big);
int data_array_finite_check(const nnc_array *a, const char *name, size_t data_off, char *err, size_t errlen);
int data_file_open(data_file *f, const char *path, char *err, size_t errlen);
int data_file_open_buffered(data_file *f, const char *path, unsigned buffer, char *err, size_t errlen);
int data_file_close(data_file *f, int rc, char *err, size_t errlen);
int data_file_read_upto(data_file *f, uint8_t **buf, size_t *len, size_t *cap, size_t want, char *err, size_t errlen);
#endif
