/* json.c - the JSON parser of file headers (see json.h).  Strict: only the grammar of RFC 8259
 * for strings, numbers, arrays and objects (no literals: a header has none), no raw control
 * characters, no \u0000 (names are C strings), surrogates paired. */
#include "json.h"

#include <stdlib.h>
#include <string.h>

#include "data_impl.h" /* data_err */

void json_free(json_value *v) {
    size_t i;
    for (i = 0; i < v->n; i++) {
        json_free(&v->items[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->str);
    memset(v, 0, sizeof *v);
}

static void json_ws(json_parser *p) {
    while (p->pos < p->n &&
           (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' || p->s[p->pos] == '\n' || p->s[p->pos] == '\r'))
        p->pos++;
}

static int json_fail(json_parser *p, const char *expected) {
    if (p->pos >= p->n)
        data_err(p->err, p->errlen, "%s: offset %zu: header: expected %s, got end of header", p->name, p->base + p->pos,
                 expected);
    else if (p->s[p->pos] >= 0x20 && p->s[p->pos] < 0x7F)
        data_err(p->err, p->errlen, "%s: offset %zu: header: expected %s, got '%c'", p->name, p->base + p->pos,
                 expected, p->s[p->pos]);
    else
        data_err(p->err, p->errlen, "%s: offset %zu: header: expected %s, got byte 0x%02X", p->name, p->base + p->pos,
                 expected, p->s[p->pos]);
    return -1;
}

static int json_oom(json_parser *p) {
    data_err(p->err, p->errlen, "%s: out of memory parsing the header", p->name);
    return -1;
}

static int json_hex4(json_parser *p, unsigned *cp) {
    size_t i;
    *cp = 0;
    for (i = 0; i < 4; i++, p->pos++) {
        unsigned c = p->pos < p->n ? p->s[p->pos] : 0, d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f') d = (c | 0x20) - 'a' + 10;
        else return json_fail(p, "4 hex digits after \\u");
        *cp = *cp << 4 | d;
    }
    return 0;
}

/* \uXXXX (with a surrogate pair if needed) -> code point; p at the 'u'. */
static int json_unicode(json_parser *p, unsigned *cp) {
    unsigned lo;
    p->pos++;
    if (json_hex4(p, cp) != 0) return -1;
    if (*cp == 0) return json_fail(p, "no \\u0000 (names are C strings)");
    if (*cp >= 0xDC00 && *cp <= 0xDFFF) return json_fail(p, "a high surrogate before a low one");
    if (*cp < 0xD800 || *cp > 0xDBFF) return 0;
    if (p->n - p->pos < 2 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u')
        return json_fail(p, "a low surrogate \\uDC00..\\uDFFF");
    p->pos += 2;
    if (json_hex4(p, &lo) != 0) return -1;
    if (lo < 0xDC00 || lo > 0xDFFF) return json_fail(p, "a low surrogate \\uDC00..\\uDFFF");
    *cp = 0x10000 + ((*cp - 0xD800) << 10) + (lo - 0xDC00);
    return 0;
}

/* Appends code point cp as UTF-8 (at most 4 bytes). */
static size_t json_utf8(char *out, unsigned cp) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12);
        out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18);
    out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* One escape after '\'; p at the character after the backslash. */
static int json_escape(json_parser *p, char *out, size_t *k) {
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    const char *hit;
    unsigned cp;
    if (p->pos >= p->n) return json_fail(p, "an escape character");
    if (p->s[p->pos] == 'u') {
        if (json_unicode(p, &cp) != 0) return -1;
        *k += json_utf8(out + *k, cp);
        return 0;
    }
    hit = p->s[p->pos] ? strchr(from, p->s[p->pos]) : NULL;
    if (!hit) return json_fail(p, "one of \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u");
    out[(*k)++] = to[hit - from];
    p->pos++;
    return 0;
}

/* string := '"' (char | escape)* '"'.  Decoded text never outgrows the raw
 * text (\uXXXX is 6 bytes for at most 3, a pair 12 for 4), so one buffer of
 * the raw length suffices. */
static int json_string(json_parser *p, char **out) {
    size_t start, end, k = 0;
    char *s;
    if (p->pos >= p->n || p->s[p->pos] != '"') return json_fail(p, "'\"' starting a string");
    start = ++p->pos;
    for (end = start; end < p->n && p->s[end] != '"'; end++)
        if (p->s[end] == '\\' && end + 1 < p->n) end++;
    if (end >= p->n) return json_fail(p, "a closing '\"' before the end of the header");
    s = malloc(end - start + 1);
    if (!s) return json_oom(p);
    while (p->pos < end) {
        unsigned char c = p->s[p->pos];
        int rc = 0;
        if (c < 0x20) rc = json_fail(p, "no raw control characters in a string");
        else if (c == '\\') {
            p->pos++;
            rc = json_escape(p, s, &k);
        } else {
            s[k++] = (char)c;
            p->pos++;
        }
        if (rc != 0 || p->pos > end) { /* an escape must not eat the closing quote */
            free(s);
            return rc != 0 ? -1 : json_fail(p, "a complete escape before '\"'");
        }
    }
    p->pos++;
    s[k] = '\0';
    *out = s;
    return 0;
}

static size_t json_digits(json_parser *p) {
    size_t start = p->pos;
    while (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') p->pos++;
    return p->pos - start;
}

/* number := '-'? ('0' | [1-9][0-9]*) ('.' [0-9]+)? ([eE] [+-]? [0-9]+)? */
static int json_number(json_parser *p, json_value *v) {
    size_t start = p->pos, len;
    if (p->pos < p->n && p->s[p->pos] == '-') p->pos++;
    if (p->pos < p->n && p->s[p->pos] == '0') p->pos++;
    else if (json_digits(p) == 0) return json_fail(p, "a digit");
    if (p->pos < p->n && p->s[p->pos] == '.' && (p->pos++, json_digits(p) == 0))
        return json_fail(p, "a digit after '.'");
    if (p->pos < p->n && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
        p->pos++;
        if (p->pos < p->n && (p->s[p->pos] == '+' || p->s[p->pos] == '-')) p->pos++;
        if (json_digits(p) == 0) return json_fail(p, "a digit in the exponent");
    }
    len = p->pos - start;
    v->kind = JSON_NUMBER;
    v->str = malloc(len + 1);
    if (!v->str) return json_oom(p);
    memcpy(v->str, p->s + start, len);
    v->str[len] = '\0';
    return 0;
}

/* Appends *item (and key) to container v, taking ownership of both. */
static int json_push(json_parser *p, json_value *v, json_value *item, char *key) {
    if (v->n == v->cap) {
        size_t ncap = v->cap ? v->cap * 2 : 4;
        json_value *ni = realloc(v->items, ncap * sizeof *ni);
        if (ni) v->items = ni;
        if (ni && v->kind == JSON_OBJECT) {
            char **nk = realloc(v->keys, ncap * sizeof *nk);
            if (nk) v->keys = nk;
            ni = nk ? ni : NULL;
        }
        if (!ni) {
            json_free(item);
            free(key);
            return json_oom(p);
        }
        v->cap = ncap;
    }
    v->items[v->n] = *item;
    if (v->kind == JSON_OBJECT) v->keys[v->n] = key;
    v->n++;
    return 0;
}

static int json_value_parse(json_parser *p, json_value *v, int depth);

/* Parses `key: value` (objects) or `value` (arrays) and pushes it. */
static int json_member(json_parser *p, json_value *v, int depth) {
    json_value item;
    char *key = NULL;
    memset(&item, 0, sizeof item);
    json_ws(p);
    if (v->kind == JSON_OBJECT) {
        if (json_string(p, &key) != 0) return -1;
        json_ws(p);
        if (p->pos >= p->n || p->s[p->pos] != ':') {
            free(key);
            return json_fail(p, "':' after an object key");
        }
        p->pos++;
    }
    if (json_value_parse(p, &item, depth + 1) != 0) {
        free(key);
        json_free(&item);
        return -1;
    }
    return json_push(p, v, &item, key);
}

/* array := '[' (value (',' value)*)? ']' ; object likewise with key ':' value. */
static int json_container(json_parser *p, json_value *v, int depth) {
    char close = p->s[p->pos] == '[' ? ']' : '}';
    v->kind = close == ']' ? JSON_ARRAY : JSON_OBJECT;
    if (depth >= JSON_DEPTH_MAX) return json_fail(p, "a value nested less deeply (not a safetensors header)");
    p->pos++;
    json_ws(p);
    if (p->pos < p->n && p->s[p->pos] == close) {
        p->pos++;
        return 0;
    }
    for (;;) {
        if (json_member(p, v, depth) != 0) return -1;
        json_ws(p);
        if (p->pos < p->n && p->s[p->pos] == close) {
            p->pos++;
            return 0;
        }
        if (p->pos >= p->n || p->s[p->pos] != ',') return json_fail(p, close == ']' ? "',' or ']'" : "',' or '}'");
        p->pos++;
    }
}

static int json_value_parse(json_parser *p, json_value *v, int depth) {
    unsigned char c;
    json_ws(p);
    v->offset = p->base + p->pos;
    c = p->pos < p->n ? p->s[p->pos] : 0;
    if (c == '"') {
        v->kind = JSON_STRING;
        return json_string(p, &v->str);
    }
    if (c == '-' || (c >= '0' && c <= '9')) return json_number(p, v);
    if (c == '[' || c == '{') return json_container(p, v, depth);
    return json_fail(p, "a string, number, array or object");
}

/* The whole header: one object, then only padding spaces. */
int json_header_parse(json_parser *p, json_value *root) {
    memset(root, 0, sizeof *root);
    json_ws(p);
    if (p->pos >= p->n || p->s[p->pos] != '{') return json_fail(p, "'{' starting the header");
    if (json_value_parse(p, root, 0) != 0) return -1;
    json_ws(p);
    if (p->pos != p->n) return json_fail(p, "only padding after the header object");
    return 0;
}
