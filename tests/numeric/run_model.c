/* run_model.c - compile a .nn file through include/nnc.h, run one entry on inputs read from
 * .npy files, and write every output of that entry as OUTDIR/NAME.npy (float64 or int32).
 *
 *   run_model MODEL.nn OUTDIR [--f64] [--no-fuse] [--cuda] [--precision f32|bf16|f16]
 *             [--entry eval|grad|eval,grad|accumulate,grad] [--seed N]
 *             [--load-params P0.npy,P1.npy,...] IN0.npy IN1.npy ...
 *
 * Inputs are given in the order the model declares them, already in the model's dtype
 * (float32, or float64 with --f64; int32 for labels).  The batch is the first input's
 * leading dimension.  --load-params overwrites the parameters (in declaration order) after
 * init.  --cuda runs on the CUDA target, exit 77 (skipped) where this build or machine has none.
 * Used by tests/ref/test_ops_numpy.py and test_nan_torch.py. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "nnc.h"

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (fread(s, 1, (size_t)n, f) != (size_t)n) n = 0;
    s[n] = 0;
    fclose(f);
    return s;
}

/* A version 1.0 .npy: magic, header length, a dict padded with spaces to 64 bytes, data. */
static int write_npy(const char *path, const char *descr, const nnc_tensor_info *t, int64_t batch,
                     const void *data, size_t elem) {
    char shape[128] = "";
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++) {
        int64_t d = t->dims[i] < 0 ? -t->dims[i] * batch : t->dims[i];
        n *= d;
        snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%lld,%s", (long long)d,
                 i + 1 < t->rank ? " " : "");
    }
    char hdr[256];
    int len = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, shape);
    int total = (10 + len + 1 + 63) / 64 * 64;
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    unsigned short hl = (unsigned short)(total - 10);
    fputc(hl & 0xff, f);
    fputc(hl >> 8, f);
    fwrite(hdr, 1, (size_t)len, f);
    for (int i = 10 + len; i < total - 1; i++) fputc(' ', f);
    fputc('\n', f);
    fwrite(data, elem, (size_t)n, f);
    return fclose(f);
}

/* Runs one entry and writes its outputs; grad and eval leave the parameters as they are, so
 * "--entry eval,grad" gives the forward outputs and the gradients of one compile, and
 * "accumulate,grad" the gradients with one micro-batch's accumulated before (accumulate = k). */
static int run_entry(const nnc_model_abi *abi, void *m, int entry, const void *const *in, int64_t batch,
                     const char *outdir) {
    if (abi->run(m, entry, in, batch)) {
        fprintf(stderr, "run_model: run failed: %s\n", abi->error(m));
        return 1;
    }
    abi->sync(m, NNC_SYNC_TO_HOST);
    for (int k = 0; k < abi->noutputs[entry]; k++) {
        const nnc_tensor_info *t = &abi->outputs[entry][k];
        char path[1024];
        snprintf(path, sizeof path, "%s/%s.npy", outdir, t->name);
        int is_int = t->dtype == NNC_TYPE_I32;
        const char *descr = is_int ? "<i4" : abi->real_bytes == 8 ? "<f8" : "<f4";
        size_t elem = is_int ? 4 : (size_t)abi->real_bytes;
        if (write_npy(path, descr, t, batch, abi->output(m, entry, k), elem)) {
            fprintf(stderr, "run_model: cannot write %s\n", path);
            return 1;
        }
        printf("%s\n", t->name);
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: run_model MODEL.nn OUTDIR [--f64] [--no-fuse] [--entry eval|grad|eval,grad] [--seed N] "
                        "[--load-params a.npy,b.npy] IN.npy...\n");
        return 2;
    }
    nnc_options o = nnc_default_options();
    int entries[3] = {NNC_ENTRY_EVAL}, nentries = 1;
    unsigned long long seed = 0;
    const char *load = NULL;
    const char *inputs[16];
    int nin = 0;
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "--f64")) o.f64 = 1;
        else if (!strcmp(argv[i], "--no-fuse")) o.fuse = 0;
        else if (!strcmp(argv[i], "--cuda")) o.target = 1;
        else if (!strcmp(argv[i], "--precision") && i + 1 < argc) {
            const char *v = argv[++i];
            o.precision = !strcmp(v, "f32") ? 1 : !strcmp(v, "bf16") ? 2 : !strcmp(v, "f16") ? 3 : -1;
        }
        else if (!strcmp(argv[i], "--entry") && i + 1 < argc) {
            const char *v = argv[++i];
            nentries = 0;
            if (!strncmp(v, "accumulate", 10)) entries[nentries++] = NNC_ENTRY_ACCUM;
            if (strstr(v, "eval")) entries[nentries++] = NNC_ENTRY_EVAL;
            if (strstr(v, "grad")) entries[nentries++] = NNC_ENTRY_GRAD;
            if (!nentries) entries[nentries++] = NNC_ENTRY_EVAL;
        }
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--load-params") && i + 1 < argc) load = argv[++i];
        else if (nin < 16) inputs[nin++] = argv[i];
    }
    char err[8192];
    nnc_array arr[16];
    const void *in[16];
    for (int i = 0; i < nin; i++) {
        if (nnc_load_npy_values(inputs[i], &arr[i], err, sizeof err)) {
            fprintf(stderr, "run_model: %s\n", err);
            return 1;
        }
        in[i] = arr[i].data;
    }
    int64_t batch = nin && arr[0].rank ? arr[0].dims[0] : 1;
    o.batch = (int)batch;
    char *src = read_file(argv[1]);
    if (!src) {
        fprintf(stderr, "run_model: cannot read %s\n", argv[1]);
        return 1;
    }
    nnc_compiled *c = nnc_compile(argv[1], src, &o, err, sizeof err);
    if (!c) {
        fprintf(stderr, "%s", err);
        bool no_cuda = o.target == 1 && (strstr(err, "without the CUDA target") || strstr(err, "no CUDA driver found") ||
                                         strstr(err, "no CUDA device found"));
        return no_cuda ? 77 : 1;
    }
    const nnc_model_abi *abi = nnc_abi(c);
    void *m = nnc_model(c);
    if (nin != abi->ninputs) {
        fprintf(stderr, "run_model: the model has %d inputs, got %d files\n", abi->ninputs, nin);
        return 1;
    }
    abi->init(m, seed);
    for (int p = 0; load && p < abi->nparams; p++) {
        char path[1024];
        const char *comma = strchr(load, ',');
        size_t len = comma ? (size_t)(comma - load) : strlen(load);
        snprintf(path, sizeof path, "%.*s", (int)len, load);
        load = comma ? comma + 1 : NULL;
        nnc_array a;
        if (nnc_load_npy_values(path, &a, err, sizeof err)) {
            fprintf(stderr, "run_model: %s\n", err);
            return 1;
        }
        int64_t n = 1;
        for (int k = 0; k < a.rank; k++) n *= a.dims[k];
        memcpy(abi->param(m, p), a.data, (size_t)n * (size_t)abi->real_bytes);
        nnc_array_free(&a);
    }
    abi->sync(m, NNC_SYNC_TO_DEVICE);
    for (int e = 0; e < nentries; e++)
        if (run_entry(abi, m, entries[e], in, batch, argv[2])) return 1;
    for (int i = 0; i < nin; i++) nnc_array_free(&arr[i]);
    nnc_free(c);
    free(src);
    return 0;
}
