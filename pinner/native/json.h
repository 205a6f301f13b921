/* A strict JSON parser for the hook's input (the OCI state, config.json), written by Go runtimes.
 *
 * The hook needs a few fields but parses the whole document, so a truncated or corrupt one is refused with
 * the byte where it broke, never half-read. Decoding follows Go's encoding/json where the RFC leaves room:
 * lone surrogates become U+FFFD, and of repeated member names the last one counts.
 */
#ifndef CMK_JSON_H
#define CMK_JSON_H

#include <stddef.h>

#include "error.h"
#include "strbuf.h"

enum jtype { J_NULL, J_BOOL, J_NUMBER, J_STRING, J_ARRAY, J_OBJECT };

/* "null", "a boolean", ... by enum jtype, for messages. */
extern const char *const JTYPE_NAMES[];

struct jmember;

/* A parsed JSON value. Strings are decoded (UTF-8, may hold NULs: see len); numbers keep their text. */
typedef struct jval {
    enum jtype type;
    char *text;
    size_t len;
    struct jval *items; /* J_ARRAY */
    struct jmember *members; /* J_OBJECT */
    size_t count;
} jval;

struct jmember {
    char *key;
    size_t key_len;
    jval value;
};

/* Parses the whole of text into out; 0, or -1 with "<what> is not valid JSON: expected X at byte N" in
 * err->msg (the caller picks the status). */
int j_parse(const str *text, const char *what, jval *out, cmk_error *err);
/* The member named key (the last one, as Go's decoder keeps), or NULL (also when obj is no object). */
const jval *j_get(const jval *obj, const char *key);

#endif
