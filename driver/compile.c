/* compile.c - the one compile entry (see compile.h): front end, overrides, passes, backend. */
#include "compile.h"

#include <stdlib.h>
#include <string.h>

#include "../frontend/frontend.h"
#include "../io/cache.h"

bool compile_model(Compiled *c, const CompileOpts *o, char *err, size_t n) {
    memset(c, 0, sizeof *c);
    err[0] = 0;
    const char *file = o->file ? o->file : "model.nn";
    c->diag = (Diag){.file = file, .src = o->source, .out = o->diag_out};
    c->m = nn_load_model(&c->arena, &c->diag, file, o->source, nn_model_c_name(&c->arena, file));
    int world = o->data_parallel && o->world > 1 ? o->world : 1;
    if (!c->m || !resolve_train_config(c->m, &o->over, world, o->data_dir, err, n)) return false;
    Device target = o->target ? (!strcmp(o->target, "cuda") ? DEV_CUDA : DEV_CPU) : c->m->train.device;
    if (o->target ? !strcmp(o->target, "auto") : c->m->train.device_auto)
        target = backend_auto(c->device_note, sizeof c->device_note);
    c->p = (Program){.m = c->m, .g = c->m->g, .diag = &c->diag};
    PipelineOpts po = {.target = target, .fuse = o->fuse, .strict_devices = o->strict_devices, .verify = true,
                       .data_parallel = o->data_parallel, .bucket_bytes = o->bucket_bytes,
                       .keep_values = o->keep_values, .dump_after = o->dump_after, .dump = o->dump};
    if (!pipeline_run(&c->p, &po)) return false;
    c->be = backend_for(target);
    return true;
}

LoadedModel *compile_load(Compiled *c, const BuildOpts *bo, char *err, size_t n) {
    if (!c->be) {
        snprintf(err, n, "--target cuda: this nnc was built without the CUDA toolkit (see nnc --version)");
        return NULL;
    }
    return c->be->load(&c->p, bo, err, n);
}

const nnc_model_abi *compile_tables(Compiled *c, const BuildOpts *bo) {
    return &model_desc_build(&c->p, bo->f64, NULL, &c->arena)->abi;
}

void compile_free(Compiled *c) {
    program_free(&c->p);
    if (c->m) model_free(c->m);
    arena_free(&c->arena);
    memset(c, 0, sizeof *c);
}

const char *compile_cache_dir(Arena *a, bool use_cache) {
    char *d = use_cache ? cache_default_dir() : NULL;
    const char *r = d ? arena_strdup(a, d) : NULL;
    free(d);
    return r;
}
