/* aot_app.c - trains models/mlp.nn for a few steps on fixed pseudo-random data and prints
 * one loss per line, built two ways by aot_test.sh:
 *   cc aot_app.c DIR/libmlp.a -lopenblas -lm     against the ahead-of-time mlp.h / libmlp.a
 *   -DAOT_INPROC, linked with nnc_core           compiling the same model in process (nnc.h)
 * The two outputs must agree, and the loss must go down. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef AOT_INPROC
#include "nnc.h"
#else
#include "mlp.h"
#endif

#define N 64
#define STEPS 8
#define SEED 42

/* Ten class prototypes plus noise, so that a few steps of SGD visibly lower the loss. */
static void make_data(float *x, int32_t *y) {
    uint64_t s = 12345;
    for (int i = 0; i < N; i++) {
        y[i] = i % 10;
        for (int j = 0; j < 784; j++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            float u = (float)(s >> 40) / (float)(1 << 24);
            x[i * 784 + j] = 0.5f * u + ((j % 10) == y[i] ? 0.5f : 0.0f);
        }
    }
}

int main(int argc, char **argv) {
    static float x[N * 784];
    static int32_t y[N];
    make_data(x, y);
#ifdef AOT_INPROC
    if (argc < 2) return 2;
    FILE *f = fopen(argv[1], "rb");
    if (!f) return 2;
    static char src[1 << 16];
    src[fread(src, 1, sizeof src - 1, f)] = 0;
    fclose(f);
    char err[4096];
    nnc_options o = nnc_default_options();
    /* nnc.h takes NULL arguments without crashing (a NULL result, the reason in err) */
    if (nnc_compile("x.nn", NULL, &o, err, sizeof err) || !strstr(err, "the source text is NULL") ||
        nnc_compile("x.nn", src, NULL, NULL, 0) || nnc_abi(NULL) || nnc_model(NULL) || nnc_source(NULL)) {
        fprintf(stderr, "nnc.h: a NULL argument was not refused\n");
        return 1;
    }
    nnc_free(NULL);
    nnc_compiled *c = nnc_compile("mlp.nn", src, &o, err, sizeof err);
    if (!c) {
        fputs(err, stderr);
        return 1;
    }
    const nnc_model_abi *abi = nnc_abi(c);
    void *m = nnc_model(c);
    abi->init(m, SEED);
    const void *in[] = {x, y};
    for (int s = 0; s < STEPS; s++) {
        if (abi->run(m, NNC_ENTRY_TRAIN, in, N)) {
            fprintf(stderr, "%s\n", abi->error(m));
            return 1;
        }
        printf("%.9g\n", *(const float *)abi->output(m, NNC_ENTRY_TRAIN, 0));
    }
    nnc_free(c);
#else
    (void)argc;
    (void)argv;
    mlp_t *m = mlp_create();
    mlp_init(m, SEED);
    for (int s = 0; s < STEPS; s++) {
        if (mlp_train_step(m, x, y, N) != 0) {
            fprintf(stderr, "%s\n", mlp_error_message(m));
            return 1;
        }
        printf("%.9g\n", mlp_loss(m));
    }
    mlp_free(m);
#endif
    return 0;
}
