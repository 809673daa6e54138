/* api.c - the library interface of include/nnc.h: the CLI's compile entry (compile.c),
 * returning a loaded model instead of training it.  Diagnostics are captured into the
 * caller's buffer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../include/nnc.h"
#include "compile.h"

struct nnc_compiled {
    Compiled c;
    LoadedModel *lm;
    Str source;
};

nnc_options nnc_default_options(void) {
    nnc_options o = {0};
    o.fuse = 1;
    return o;
}

/* Compiles into c, with diagnostics captured in err; false on failure. */
static bool compile_captured(nnc_compiled *c, const char *file, const char *source, const nnc_options *o, char *err,
                             size_t errlen) {
    if (o->precision < 0 || o->precision > 3 || (o->f64 && o->precision > 1)) {
        snprintf(err, errlen, "nnc_compile: precision %d is not 0..3, or is half precision with f64\n", o->precision);
        return false;
    }
    char *dbuf = NULL;   /* open_memstream publishes it at fclose, so read it only after */
    size_t dlen = 0;
    FILE *df = open_memstream(&dbuf, &dlen);
    CompileOpts co = {.file = file, .source = source, .diag_out = df, .target = o->target ? "cuda" : "cpu",
                      .over = {.has_batch = o->batch > 0, .batch = o->batch, .has_precision = o->precision > 0,
                               .precision = o->precision > 0 ? (Precision)(o->precision - 1) : PREC_F32},
                      .fuse = o->fuse != 0,
                      .strict_devices = o->strict_devices != 0};
    char msg[1024];
    bool ok = compile_model(&c->c, &co, msg, sizeof msg);
    if (df) fclose(df);
    if (!ok) snprintf(err, errlen, "%s", msg[0] ? msg : dbuf && *dbuf ? dbuf : "compilation failed\n");
    free(dbuf);
    return ok;
}

nnc_compiled *nnc_compile(const char *file, const char *source, const nnc_options *o, char *err, size_t errlen) {
    if (!source || !o) {
        if (err && errlen) snprintf(err, errlen, "nnc_compile: %s is NULL", source ? "the options" : "the source text");
        return NULL;
    }
    char dummy[1];
    if (!err || !errlen) {   /* diagnostics have nowhere to go, but the NULL result still says it failed */
        err = dummy;
        errlen = sizeof dummy;
    }
    nnc_compiled *c = xcalloc(1, sizeof *c);
    if (!compile_captured(c, file, source, o, err, errlen)) {
        nnc_free(c);
        return NULL;
    }
    BuildOpts bo = {.f64 = o->f64 != 0, .cc = o->cc, .cache_dir = compile_cache_dir(&c->c.arena, o->use_cache != 0)};
    if (c->c.be) c->c.be->render(&c->c.p, &bo, &c->source);
    c->lm = compile_load(&c->c, &bo, err, errlen);
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
    if (c->lm) c->c.be->unload(c->lm);
    compile_free(&c->c);
    str_free(&c->source);
    free(c);
}
