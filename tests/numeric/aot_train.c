/* aot_train.c - nnc's trainer over a model it did not compile: an ahead-of-time library
 * (nnc MODEL -o DIR, built as a shared library) loaded with dlopen, and a train section written
 * here as data.  train/ sees the model through nnc_model_abi alone, and this file, built like
 * train/ with NNC_NO_GRAPH, could not include the IR if it tried.
 *   aot_train LIB NAME X.npy Y.npy METRICS
 * trains NAME (LIB's NAME_abi()) on X and Y, evaluates on them each epoch, and writes the
 * metrics as `nnc --metrics` does: aot_train_test.sh compares them with the command's, and the
 * error with a bad label file with the command's error. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "../../train/train.h"

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: aot_train LIB NAME X.npy Y.npy METRICS\n");
        return 2;
    }
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    char sym[256];
    snprintf(sym, sizeof sym, "%s_abi", argv[2]);
    const nnc_model_abi *(*abi_of)(void) = lib ? (const nnc_model_abi *(*)(void))dlsym(lib, sym) : NULL;
    if (!abi_of) {
        fprintf(stderr, "aot_train: %s\n", dlerror());
        return 2;
    }
    const nnc_model_abi *abi = abi_of();
    if (abi->abi_version != NNC_ABI_VERSION) {
        fprintf(stderr, "aot_train: %s speaks ABI %u, this trainer %d\n", argv[1], abi->abi_version, NNC_ABI_VERSION);
        return 2;
    }
    /* aot_train.nn's train section */
    DataBind data[2] = {{.input = "x", .train = {.kind = SRC_NPY, .path = argv[3], .scale = 1}},
                        {.input = "y", .train = {.kind = SRC_NPY, .path = argv[4], .scale = 1}}};
    for (int i = 0; i < 2; i++) data[i].test = data[i].train;
    TrainConfig t = {.present = true,
                     .data = data,
                     .ndata = 2,
                     .batch = abi->batch_max,
                     .epochs = 2,
                     .seed = 3,
                     .shuffle = true,
                     .opt = {.kind = OPT_SGD, .lr = 0.1, .momentum = 0.9},
                     .accumulate = 1};
    TrainOpts o = {.epochs = t.epochs,
                   .seed = t.seed,
                   .shuffle = t.shuffle,
                   .quiet = true,
                   .metrics_path = argv[5],
                   .source_file = argv[1],
                   .t_process = train_now()};
    ModelRef ref = {.abi = abi, .m = abi->create(NULL)};
    if (!ref.m) return 2;
    int rc = train_run(&t, &ref, &o);
    abi->destroy(ref.m);
    dlclose(lib);
    return rc;
}
