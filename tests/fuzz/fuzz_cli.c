/* fuzz_cli.c - libFuzzer target for the command line and the train section: the input's first
 * line is split into argv words (after the model path), the rest is the model text.  It runs
 * the nnc command's own flag parsing (driver/main.c, compiled in here), the front end, the
 * flag overrides and every pass for the chosen target, with --dump-after output and the
 * rendered C discarded; nothing is trained or compiled.  Any input must end in a message or a
 * finished pipeline: never a crash, a hang, an exit or undefined behaviour.
 *
 * main.c reports a bad flag through cli_error, which here returns to the fuzzer (longjmp)
 * instead of exiting; words that print and exit by design (--help, --version) are skipped. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static jmp_buf cli_failed;
static FILE *devnull;

static _Noreturn void fuzz_cli_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfprintf(devnull, fmt, ap);   /* formats the message: catches bad format arguments */
    va_end(ap);
    longjmp(cli_failed, 1);
}

#define cli_error fuzz_cli_error
#define main nnc_command_main
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wunused-function"
#include "../../driver/main.c"
#pragma clang diagnostic pop
#undef main

enum { MAX_WORDS = 32 };

/* Splits line into at most MAX_WORDS words after argv[0] and the model path. */
static int split_words(char *line, char **argv) {
    int argc = 0;
    argv[argc++] = "nnc";
    argv[argc++] = "fuzz.nn";
    for (char *w = strtok(line, " \t"); w && argc < MAX_WORDS + 2; w = strtok(NULL, " \t")) {
        if (!strcmp(w, "--help") || !strcmp(w, "-h") || !strcmp(w, "--version")) return -1;
        argv[argc++] = w;
    }
    return argc;
}

/* The CLI's compile entry (driver/compile.c), then the C renderer for the CPU target. */
static void run_pipeline(Cli *c, const char *src) {
    CompileOpts o = {.file = "fuzz.nn", .source = src, .diag_out = devnull, .target = c->target, .over = c->over,
                     .fuse = !c->no_fuse && !c->check_numerics, .strict_devices = c->strict,
                     .dump_after = c->dump_after, .dump = devnull};
    Compiled cp;
    char err[1024];
    if (compile_model(&cp, &o, err, sizeof err) && cp.p.target == DEV_CPU) {
        BuildOpts bo = {.f64 = c->f64, .check_numerics = c->check_numerics};
        Str s = {0};
        backend_cpu.render(&cp.p, &bo, &s);
        str_free(&s);
    }
    compile_free(&cp);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 16384) return 0;
    if (!devnull) devnull = fopen("/dev/null", "w");
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    if (strlen(text) != size) {   /* the command refuses model text with NUL bytes */
        free(text);
        return 0;
    }
    char *nl = strchr(text, '\n');
    const char *src = nl ? nl + 1 : "";
    if (nl) *nl = 0;
    char *argv[MAX_WORDS + 2];
    int argc = split_words(text, argv);
    static Arena arena;   /* static: its state after a longjmp is then well defined */
    static Cli c;
    memset(&c, 0, sizeof c);
    if (argc > 0 && setjmp(cli_failed) == 0) {
        parse_args(argc, argv, &c, &arena);
        run_pipeline(&c, src);
    }
    arena_free(&arena);
    free(text);
    return 0;
}
