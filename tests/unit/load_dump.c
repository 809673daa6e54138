/*
 * load_dump.c - loads data files with runtime/data.c and prints, per file,
 *   ok <dtype> <d0,d1,...> <crc32 of the data bytes, 8 hex digits>
 * or
 *   error <message>
 * for tests/ref/test_runtime_py.py to compare with what NumPy wrote.
 * Usage: load_dump idx|npy|csv FILE...
 */
#include <stdio.h>
#include <string.h>
#include <zlib.h>

#include "data.h"

static int load(const char *kind, const char *path, nnc_array *a, char *err, size_t errlen)
{
    if (strcmp(kind, "idx") == 0)
        return nnc_load_idx(path, a, err, errlen);
    if (strcmp(kind, "npy") == 0)
        return nnc_load_npy(path, a, err, errlen);
    return nnc_load_csv(path, -1, a, err, errlen);
}

static void dump(const nnc_array *a)
{
    size_t bytes = (size_t)nnc_array_numel(a) * nnc_dtype_size(a->dtype);
    uLong crc = crc32(0L, Z_NULL, 0);
    int i;
    printf("ok %s ", nnc_dtype_name(a->dtype));
    for (i = 0; i < a->rank; i++)
        printf("%s%lld", i ? "," : "", (long long)a->dims[i]);
    if (a->rank == 0)
        printf("-");
    if (bytes > 0)
        crc = crc32(crc, a->data, (uInt)bytes);
    printf(" %08lx\n", (unsigned long)crc);
}

int main(int argc, char **argv)
{
    int i;
    if (argc < 3) {
        fprintf(stderr, "usage: load_dump idx|npy|csv FILE...\n");
        return 2;
    }
    for (i = 2; i < argc; i++) {
        nnc_array a;
        char err[512];
        if (load(argv[1], argv[i], &a, err, sizeof err) == 0)
            dump(&a);
        else
            printf("error %s\n", err);
        nnc_array_free(&a);
    }
    return fflush(stdout) == 0 ? 0 : 1;
}
