/* parse.c - runs the scanner and the parser over one model text. */
#include "ast.h"
#include "parser.h"
#include "lexer.h"

Stmt *nn_parse(Arena *a, Diag *d, const char *file, const char *src) {
    ParseCtx ctx = {.arena = a, .file = file, .diag = d};
    yyscan_t scanner;
    if (yylex_init_extra(&ctx, &scanner) != 0) nnc_fatal("cannot start the scanner");
    YY_BUFFER_STATE buf = yy_scan_string(src, scanner);
    int rc = yyparse(scanner, &ctx);
    yy_delete_buffer(buf, scanner);
    yylex_destroy(scanner);
    if (rc != 0 || d->errors) return NULL;
    return ctx.program;
}
