/* api.c - the library interface of include/nnc.h: the same pipeline the CLI runs, returning a
 * loaded model instead of training it.  Diagnostics are captured into the caller's buffer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../codegen/cache.h"
#include "../codegen/codegen.h"
#include "../include/nnc.h"

struct nnc_compiled {
    Arena arena;
    Model *m;
    Program p;
    Diag diag;
    LoadedModel *lm;
    const Backend *be;
    Str source;
};

nnc_options nnc_default_options(void) {
    nnc_options o = {0};
    o.fuse = 1;
    return o;
}

/* open_memstream publishes the buffer through *buf only at fflush/fclose, so the caller must
 * read *buf after closing the stream, not a copy taken here. */
static FILE *capture_begin(char **buf, size_t *len) {
    *buf = NULL;
    return open_memstream(buf, len);
}

nnc_compiled *nnc_compile(const char *file, const char *source, const nnc_options *o, char *err, size_t errlen) {
    if (!source || !o) {
        if (err && errlen) snprintf(err, errlen, "nnc_compile: %s is NULL", source ? "the options" : "the source text");
        return NULL;
    }
    char dummy[1];
    if (!err) {   /* diagnostics have nowhere to go, but the NULL result still says it failed */
        err = dummy;
        errlen = sizeof dummy;
    }
    if (!file) file = "model.nn";
    nnc_compiled *c = xcalloc(1, sizeof *c);
    size_t dlen = 0;
    char *dbuf;
    FILE *df = capture_begin(&dbuf, &dlen);
    c->diag = (Diag){.file = file, .src = source, .out = df};
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    char name[128];
    snprintf(name, sizeof name, "%s", base);
    for (char *p = name; *p; p++)
        if (*p == '.') *p = 0;
        else if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9'))) *p = '_';
    c->m = nn_load_model(&c->arena, &c->diag, file, source, arena_printf(&c->arena, "m_%s", name));
    bool ok = c->m != NULL;
    if (ok) {
        if (o->batch > 0) c->m->train.batch = o->batch;
        c->m->g->batch_max = (int)(c->m->train.present || o->batch > 0 ? c->m->train.batch : 1);
        c->p = (Program){.m = c->m, .g = c->m->g, .diag = &c->diag};
        PipelineOpts po = {.target = o->target ? DEV_CUDA : DEV_CPU, .fuse = o->fuse != 0,
                           .strict_devices = o->strict_devices != 0, .verify = true};
        ok = pipeline_run(&c->p, &po);
    }
    if (df) fclose(df);   /* sets dbuf */
    if (!ok) {
        snprintf(err, errlen, "%s", dbuf && *dbuf ? dbuf : "compilation failed\n");
        free(dbuf);
        nnc_free(c);
        return NULL;
    }
    free(dbuf);
    c->be = backend_for(o->target ? DEV_CUDA : DEV_CPU);
    if (!c->be) {
        snprintf(err, errlen, "this nnc was built without the CUDA target");
        nnc_free(c);
        return NULL;
    }
    char *cache = o->use_cache ? cache_default_dir() : NULL;   /* the CLI's choice, too */
    BuildOpts bo = {.f64 = o->f64 != 0, .cc = o->cc, .cache_dir = cache};
    c->be->render(&c->p, &bo, &c->source);
    c->lm = c->be->load(&c->p, &bo, err, errlen);
    free(cache);
    if (!c->lm) {
        nnc_free(c);
        return NULL;
    }
    return c;
}

const nnc_model_abi *nnc_abi(const nnc_compiled *c) { return c ? c->lm->abi : NULL; }
void *nnc_model(const nnc_compiled *c) { return c ? c->lm->m : NULL; }
const char *nnc_source(const nnc_compiled *c) { return c ? c->source.buf : NULL; }

void nnc_free(nnc_compiled *c) {
    if (!c) return;
    if (c->lm) c->be->unload(c->lm);
    program_free(&c->p);
    model_free(c->m);
    str_free(&c->source);
    arena_free(&c->arena);
    free(c);
}
