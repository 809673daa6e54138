/* parser.y - grammar of the .nn model language (docs/language.md has the prose version).
 *
 * A pure parser with locations (jq's setup); every action is one call to an ast.c constructor.
 * Syntax errors are reported through the model's Diag as file:line:col with the source line,
 * and bison's error recovery at statement level lets one run report several of them. */
%define api.pure full
%locations
%define parse.error verbose
%lex-param {void *scanner}
%parse-param {void *scanner} {ParseCtx *ctx}

%code requires {
#include "ast.h"
}
%code {
#include <string.h>
int yylex(YYSTYPE *lval, YYLTYPE *lloc, void *scanner);
#define L(l) ((SrcLoc){ctx->file, (l).first_line, (l).first_column})
static void yyerror(YYLTYPE *l, void *scanner, ParseCtx *ctx, const char *msg);
}

%initial-action {
    @$.first_line = @$.last_line = 1;
    @$.first_column = @$.last_column = 1;
}

%union {
    double num;
    const char *str;
    Expr *expr;
    Arg *arg;
    Name *name;
    TypeAst *type;
    Stmt *stmt;
}

%token <num> NUMBER "number"
%token <str> IDENT "identifier"
%token <str> STRING "string"
%token BLOCK "'block'" INPUT "'input'" PARAM "'param'" BUFFER "'buffer'" OUTPUT "'output'" RETURN "'return'"
%token FORWARD "'forward'" TRAIN "'train'" FOR "'for'" POW "'**'" FLOORDIV "'//'" ELLIPSIS "'...'"
%token EQ_OP "'=='" NE_OP "'!='" LE_OP "'<='" GE_OP "'>='"
%token BAD_CHAR "invalid character" BAD_STRING "unterminated string"

%type <str> var
%type <expr> member expr postfix primary sub optx
%type <arg> args arglist arg dims exprlist subs
%type <name> names namelist
%type <type> type
%type <stmt> items item stmt stmts settings setting

%nonassoc '<' '>' LE_OP GE_OP EQ_OP NE_OP   /* as Python's, below arithmetic; not chained */
%left '+' '-'
%left '*' '/' '@' FLOORDIV '%'
%precedence UMINUS
%right POW

%%

program: items                      { ctx->program = $1; }
;
items: %empty                       { $$ = NULL; }
     | items item                   { $$ = ast_stmts_append($1, $2); }
;
item: BLOCK IDENT '(' names ')' '{' stmts '}'   { $$ = ast_def(ctx, S_BLOCK, L(@2), $2, $4, $7); }
    | stmt                          { $$ = $1; }
;
stmts: %empty                       { $$ = NULL; }
     | stmts stmt                   { $$ = ast_stmts_append($1, $2); }
;
stmt: INPUT IDENT ':' type          { $$ = ast_stmt(ctx, S_INPUT, L(@2), $2, $4, NULL); }
    | PARAM IDENT ':' type '=' expr { $$ = ast_stmt(ctx, S_PARAM, L(@2), $2, $4, $6); }
    | PARAM IDENT ':' type          { $$ = ast_stmt(ctx, S_PARAM, L(@2), $2, $4, NULL); }
    | BUFFER IDENT ':' type '=' expr { $$ = ast_stmt(ctx, S_BUFFER, L(@2), $2, $4, $6); }
    | BUFFER IDENT ':' type         { $$ = ast_stmt(ctx, S_BUFFER, L(@2), $2, $4, NULL); }
    | IDENT '=' expr                { $$ = ast_stmt(ctx, S_LET, L(@1), $1, NULL, $3); }
    | IDENT ',' namelist '=' expr   { $$ = ast_unpack(ctx, L(@1), ast_name(ctx, L(@1), $1), $3, $5); }
    | member '=' expr               { $$ = ast_stmt(ctx, S_TIE, L(@1), NULL, NULL, $3); $$->target = $1; }
    | OUTPUT IDENT                  { $$ = ast_stmt(ctx, S_OUTPUT, L(@2), $2, NULL, NULL); }
    | OUTPUT IDENT '=' expr         { $$ = ast_stmt(ctx, S_OUTPUT, L(@2), $2, NULL, $4); }
    | RETURN expr                   { $$ = ast_stmt(ctx, S_RETURN, L(@1), NULL, NULL, $2); }
    | FORWARD '(' names ')' '=' expr   { $$ = ast_def(ctx, S_FORWARD, L(@1), NULL, $3, ast_stmt(ctx, S_RETURN, L(@6), NULL, NULL, $6)); }
    | FORWARD '(' names ')' '{' stmts '}' { $$ = ast_def(ctx, S_FORWARD, L(@1), NULL, $3, $6); }
    | TRAIN '{' settings '}'        { $$ = ast_def(ctx, S_TRAIN, L(@1), NULL, NULL, $3); }
    | FOR var IDENT expr '{' stmts '}' { $$ = ast_for(ctx, L(@1), ast_name(ctx, L(@2), $2), $3, L(@3), $4, $6); }
    | FOR var ',' namelist IDENT expr '{' stmts '}' { $$ = ast_for(ctx, L(@1), ast_names_append(ast_name(ctx, L(@2), $2), $4), $5, L(@5), $6, $8); }
    | ';'                           { $$ = NULL; }
    | error                         { $$ = NULL; }   /* resynchronize at the next statement */
;
/* a.b.c, the target of a tie (transformer.wte.weight = lm_head.weight) */
member: IDENT '.' IDENT             { $$ = ast_member(ctx, L(@3), ast_ident(ctx, L(@1), $1), $3); }
      | member '.' IDENT            { $$ = ast_member(ctx, L(@3), $1, $3); }
;
/* A loop's variable may be `block`, as in PyTorch's `for block in self.transformer.h: x = block(x)`:
 * an expression never starts an item, which the keyword does */
var: IDENT                          { $$ = $1; }
   | BLOCK                          { $$ = "block"; }
;
names: %empty                       { $$ = NULL; }
     | namelist                     { $$ = $1; }
;
namelist: IDENT                     { $$ = ast_name(ctx, L(@1), $1); }
        | namelist ',' IDENT        { $$ = ast_names_append($1, ast_name(ctx, L(@3), $3)); }
;
type: IDENT '[' dims ']'            { $$ = ast_type(ctx, L(@1), $1, $3, 0); }
    | IDENT '[' ']'                 { $$ = ast_type(ctx, L(@1), $1, NULL, 1); }
    | IDENT                         { $$ = ast_type(ctx, L(@1), $1, NULL, 1); }
;
dims: expr                          { $$ = ast_arg(ctx, NULL, $1); }
    | dims ',' expr                 { $$ = ast_args_append($1, ast_arg(ctx, NULL, $3)); }
;
settings: %empty                    { $$ = NULL; }
        | settings setting          { $$ = ast_stmts_append($1, $2); }
;
setting: IDENT '=' expr             { $$ = ast_setting(ctx, L(@1), $1, NULL, L(@1), $3); }
       | IDENT IDENT '=' expr       { $$ = ast_setting(ctx, L(@1), $1, $2, L(@2), $4); }
       | IDENT IDENT ',' IDENT '=' expr { $$ = ast_setting_pair(ctx, L(@1), $1, $2, L(@2), $4, L(@4), $6); }
       | IDENT IDENT                { $$ = ast_setting(ctx, L(@1), $1, $2, L(@2), NULL); }
       | ';'                        { $$ = NULL; }
;
expr: expr '+' expr                 { $$ = ast_bin(ctx, L(@2), '+', $1, $3); }
    | expr '-' expr                 { $$ = ast_bin(ctx, L(@2), '-', $1, $3); }
    | expr '*' expr                 { $$ = ast_bin(ctx, L(@2), '*', $1, $3); }
    | expr '/' expr                 { $$ = ast_bin(ctx, L(@2), '/', $1, $3); }
    | expr FLOORDIV expr            { $$ = ast_bin(ctx, L(@2), 'f', $1, $3); }
    | expr '%' expr                 { $$ = ast_bin(ctx, L(@2), '%', $1, $3); }
    | expr '@' expr                 { $$ = ast_bin(ctx, L(@2), '@', $1, $3); }
    | expr POW expr                 { $$ = ast_bin(ctx, L(@2), '^', $1, $3); }
    | expr '<' expr                 { $$ = ast_bin(ctx, L(@2), '<', $1, $3); }
    | expr '>' expr                 { $$ = ast_bin(ctx, L(@2), '>', $1, $3); }
    | expr LE_OP expr               { $$ = ast_bin(ctx, L(@2), 'l', $1, $3); }
    | expr GE_OP expr               { $$ = ast_bin(ctx, L(@2), 'g', $1, $3); }
    | expr EQ_OP expr               { $$ = ast_bin(ctx, L(@2), 'e', $1, $3); }
    | expr NE_OP expr               { $$ = ast_bin(ctx, L(@2), 'n', $1, $3); }
    | '-' expr %prec UMINUS         { $$ = ast_neg(ctx, L(@1), $2); }
    | postfix                       { $$ = $1; }
;
postfix: primary                    { $$ = $1; }
       | postfix '(' args ')'       { $$ = ast_call(ctx, L(@1), $1, $3); }
       | postfix '.' IDENT          { $$ = ast_member(ctx, L(@3), $1, $3); }
       | postfix '[' subs ']'       { $$ = ast_subscript(ctx, L(@2), $1, $3); }
;
/* a[i], a[:, -1, :], a[..., 1:3], a[::2]: Python's indices and slices */
subs: sub                           { $$ = ast_arg(ctx, NULL, $1); }
    | subs ',' sub                  { $$ = ast_args_append($1, ast_arg(ctx, NULL, $3)); }
;
sub: expr                           { $$ = $1; }
   | ELLIPSIS                       { $$ = ast_ellipsis(ctx, L(@1)); }
   | optx ':' optx                  { $$ = ast_slice(ctx, L(@2), $1, $3, NULL); }
   | optx ':' optx ':' optx         { $$ = ast_slice(ctx, L(@2), $1, $3, $5); }
;
optx: %empty                        { $$ = NULL; }
    | expr                          { $$ = $1; }
;
primary: NUMBER                     { $$ = ast_num(ctx, L(@1), $1); }
       | STRING                     { $$ = ast_str(ctx, L(@1), $1); }
       | var                        { $$ = ast_ident(ctx, L(@1), $1); }
       | '(' expr ')'               { $$ = $2; }
       | '(' expr ',' ')'           { $$ = ast_tuple(ctx, L(@1), ast_arg(ctx, NULL, $2)); }
       | '(' expr ',' exprlist ')'  { $$ = ast_tuple(ctx, L(@1), ast_args_prepend(ast_arg(ctx, NULL, $2), $4)); }
       | '[' exprlist ']'           { $$ = ast_tuple(ctx, L(@1), $2); }
       | '[' expr FOR var IDENT expr ']' { $$ = ast_comp(ctx, L(@1), $2, ast_name(ctx, L(@4), $4), $5, L(@5), $6); }
;
exprlist: expr                      { $$ = ast_arg(ctx, NULL, $1); }
        | exprlist ',' expr         { $$ = ast_args_append($1, ast_arg(ctx, NULL, $3)); }
;
args: %empty                        { $$ = NULL; }
    | arglist                       { $$ = $1; }
;
arglist: arg                        { $$ = $1; }
       | arglist ',' arg            { $$ = ast_args_append($1, $3); }
;
arg: expr                           { $$ = ast_arg(ctx, NULL, $1); }
   | IDENT '=' expr                 { $$ = ast_arg(ctx, $1, $3); }
;

%%

/* Bison says "unexpected identifier, expecting '='"; we add where, and quote the line. */
static void yyerror(YYLTYPE *l, void *scanner, ParseCtx *ctx, const char *msg) {
    (void)scanner;
    const char *m = strncmp(msg, "syntax error, ", 14) == 0 ? msg + 14 : msg;
    if (!strcmp(msg, "memory exhausted"))   /* the parser's stack is bounded (YYMAXDEPTH) */
        diag_error(ctx->diag, L(*l), "the model nests too deeply here (parentheses or operators %d deep)", YYMAXDEPTH);
    else
        diag_error(ctx->diag, L(*l), "syntax error: %s", m);
}
