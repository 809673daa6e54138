/* names.c - the model's name as it appears in generated C and CUDA.
 *
 * The model name prefixes every symbol of the generated code and of an ahead-of-time library
 * (struct NAME, NAME_t, NAME_create, NAME_train_step, ...), so it must be a C identifier that
 * cannot collide with the language or the headers the generated code includes.  The rule,
 * documented in docs/language.md: take the file's base name without its extension, replace
 * every character that is not a letter, digit or '_' by '_', prefix "m_" if it then starts
 * with a digit, with '_' or with a prefix the generated code or its libraries use (nnc, omp,
 * cblas, cuda, ...), or is empty; else append '_' if it is a C, C++ or CUDA keyword or would
 * make NAME_t a standard type (int32 -> int32_t).  So "mlp.nn" stays "mlp", "int.nn" becomes
 * "int_", "2layer.nn" "m_2layer" and "nnc.nn" "m_nnc".  The result maps to itself.
 *
 * User names inside the model (inputs, parameters) never become C identifiers on their own:
 * the renderers prefix them (an input x is the parameter in_x of NAME_train_step) or quote
 * them in strings. */
#include <ctype.h>
#include <string.h>

#include "frontend.h"

static const char *const reserved_words[] = {
    /* C11 */
    "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else", "enum",
    "extern", "float", "for", "goto", "if", "inline", "int", "long", "register", "restrict", "return",
    "short", "signed", "sizeof", "static", "struct", "switch", "typedef", "union", "unsigned", "void",
    "volatile", "while", "bool", "true", "false", "complex", "imaginary", "noreturn", "alignas",
    "alignof", "static_assert", "thread_local",
    /* C++ (NVRTC compiles C++) */
    "asm", "catch", "class", "const_cast", "constexpr", "consteval", "constinit", "decltype", "delete",
    "dynamic_cast", "explicit", "export", "friend", "mutable", "namespace", "new", "noexcept",
    "nullptr", "operator", "private", "protected", "public", "reinterpret_cast", "static_cast",
    "template", "this", "throw", "try", "typeid", "typename", "using", "virtual", "wchar_t", "char8_t",
    "char16_t", "char32_t", "concept", "requires", "co_await", "co_return", "co_yield", "and", "or",
    "not", "xor", "bitand", "bitor", "compl", "and_eq", "or_eq", "xor_eq", "not_eq",
    /* names of the generated code and its headers used whole */
    "real", "main", "errno", "assert", "offsetof", "NULL", "EOF", "FILE", "std",
};

/* Prefixes of the generated code's own symbols and of the libraries it calls. */
static const char *const reserved_prefixes[] = {"nnc", "omp", "cblas", "cuda", "cublas", "nvrtc", "pthread"};

/* NAME_t must not be a standard type: size_t, int32_t, uint_least8_t, ... */
static const char *const standard_t_types[] = {
    "size", "ssize", "ptrdiff", "wchar", "wint", "intptr", "uintptr", "intmax", "uintmax", "off", "time",
    "clock", "pid", "uid", "gid", "mode", "dev", "ino", "nlink", "blksize", "blkcnt", "fpos", "mbstate",
    "sig_atomic", "max_align", "div", "ldiv", "lldiv", "char16", "char32", "errno", "rsize", "va_list",
    "float", "double", "locale", "timer", "clockid", "key", "id", "useconds", "suseconds", "socklen",
};

static bool has_reserved_prefix(const char *s) {
    if (s[0] == '_') return true;
    for (size_t i = 0; i < NNC_COUNTOF(reserved_prefixes); i++)
        if (!strncmp(s, reserved_prefixes[i], strlen(reserved_prefixes[i]))) return true;
    return false;
}

static bool is_reserved(const char *s) {
    for (size_t i = 0; i < NNC_COUNTOF(reserved_words); i++)
        if (!strcmp(s, reserved_words[i])) return true;
    for (size_t i = 0; i < NNC_COUNTOF(standard_t_types); i++)
        if (!strcmp(s, standard_t_types[i])) return true;
    /* int8, uint64, int_least16, uint_fast32, ...: <stdint.h> names with _t */
    const char *p = s + (s[0] == 'u');
    if (!strncmp(p, "int", 3)) {
        p += 3;
        if (!strncmp(p, "_least", 6)) p += 6;
        else if (!strncmp(p, "_fast", 5)) p += 5;
        while (isdigit((unsigned char)*p)) p++;
        if (!*p) return true;
    }
    return false;
}

const char *nn_model_c_name(Arena *a, const char *path) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    char *s = arena_strdup(a, base);
    char *dot = strrchr(s, '.');
    if (dot && dot != s) *dot = 0;
    for (char *p = s; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '_') *p = '_';
    if (!*s || isdigit((unsigned char)*s) || has_reserved_prefix(s)) s = arena_printf(a, "m_%s", s);
    else if (is_reserved(s)) s = arena_printf(a, "%s_", s);
    return s;
}
