/* json.h - a strict little JSON parser for file headers (safetensors'): the text becomes a tree
 * of the four kinds a header may hold, strings, numbers, arrays and objects, nested at most
 * JSON_DEPTH_MAX deep.  Every error names the file and the byte offset, and what was expected.
 *
 *   json_parser p = {text, len, 0, offset_of_text_in_file, "ckpt.safetensors", err, errlen};
 *   json_value root;
 *   if (json_header_parse(&p, &root) != 0) ... err says why ...
 *   ... root.keys[i] -> root.items[i] ...
 *   json_free(&root);
 *
 * Private to io/. */
#ifndef NNC_JSON_H
#define NNC_JSON_H
#include <stddef.h>

#define JSON_DEPTH_MAX 8 /* a safetensors header needs three levels */

typedef enum {
    JSON_STRING, /* str: decoded bytes, NUL-terminated (no embedded NUL) */
    JSON_NUMBER, /* str: the literal text, already checked against the grammar */
    JSON_ARRAY, /* items[0..n) */
    JSON_OBJECT /* keys[i] -> items[i], in file order */
} json_kind;

typedef struct json_value {
    json_kind kind;
    char *str;
    struct json_value *items;
    char **keys;
    size_t n, cap;
    size_t offset; /* file offset where the value starts, for messages */
} json_value;

typedef struct {
    const unsigned char *s; /* header text */
    size_t n, pos;
    size_t base; /* file offset of s[0] */
    const char *name;
    char *err;
    size_t errlen;
} json_parser;

/* The whole header: one object, then only padding spaces.  0, or -1 with p->err filled; root is
 * the tree either way (json_free it). */
int json_header_parse(json_parser *p, json_value *root);
void json_free(json_value *v);
#endif
