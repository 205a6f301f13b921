/* The strict JSON parser (json.h).
 *
 * Built with -DTEST_PROGRAM_JSON it is a unit-test driver (util-linux's TEST_PROGRAM): see the end.
 */
#define _GNU_SOURCE
#include "json.h"

#include <stdlib.h>
#include <string.h>

#include "cmk_generated.h"

#define STR_(x) #x
#define STR(x) STR_(x)

struct jparser {
    const char *start, *p, *end;
    const char *error; /* what is wrong, for the message */
    int depth;
};

const char *const JTYPE_NAMES[] = {"null", "a boolean", "a number", "a string", "an array", "an object"};

static int j_fail(struct jparser *jp, const char *what)
{
    jp->error = what;
    return -1;
}

static void j_space(struct jparser *jp)
{
    while (jp->p < jp->end && (*jp->p == ' ' || *jp->p == '\t' || *jp->p == '\n' || *jp->p == '\r'))
        jp->p++;
}

static void utf8_put(str *s, unsigned long cp)
{
    char b[4];
    size_t n;
    if (cp < 0x80) {
        b[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        b[0] = (char)(0xc0 | (cp >> 6));
        b[1] = (char)(0x80 | (cp & 0x3f));
        n = 2;
    } else if (cp < 0x10000) {
        b[0] = (char)(0xe0 | (cp >> 12));
        b[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        b[2] = (char)(0x80 | (cp & 0x3f));
        n = 3;
    } else {
        b[0] = (char)(0xf0 | (cp >> 18));
        b[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
        b[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
        b[3] = (char)(0x80 | (cp & 0x3f));
        n = 4;
    }
    s_addn(s, b, n);
}

static int j_hex4(struct jparser *jp, unsigned long *out)
{
    unsigned long v = 0;
    if (jp->end - jp->p < 4)
        return j_fail(jp, "expected four hex digits after \\u");
    for (int i = 0; i < 4; i++) {
        char c = *jp->p;
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return j_fail(jp, "expected four hex digits after \\u");
        v = v * 16 + (unsigned long)d;
        jp->p++;
    }
    *out = v;
    return 0;
}

/* A string at jp->p (the opening quote); lone surrogates become U+FFFD, as Go's decoder does. */
static int j_string(struct jparser *jp, char **text, size_t *len)
{
    str s = {0};
    jp->p++;
    for (;;) {
        if (jp->p >= jp->end)
            return j_fail(jp, "expected a closing '\"'");
        unsigned char c = (unsigned char)*jp->p;
        if (c == '"') {
            jp->p++;
            break;
        }
        if (c < 0x20)
            return j_fail(jp, "a raw control character inside a string");
        if (c != '\\') {
            s_addn(&s, jp->p++, 1);
            continue;
        }
        jp->p++;
        if (jp->p >= jp->end)
            return j_fail(jp, "expected an escape after '\\'");
        char e = *jp->p++;
        const char *simple = strchr("\"\\/bfnrt", e);
        if (e && simple) {
            static const char decoded[] = "\"\\/\b\f\n\r\t";
            s_addn(&s, &decoded[simple - "\"\\/bfnrt"], 1);
            continue;
        }
        if (e != 'u') {
            jp->p--;
            return j_fail(jp, "expected one of \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX");
        }
        unsigned long cp;
        if (j_hex4(jp, &cp))
            return -1;
        if (cp >= 0xd800 && cp < 0xdc00 && jp->end - jp->p >= 6 && jp->p[0] == '\\' && jp->p[1] == 'u') {
            const char *back = jp->p;
            unsigned long low;
            jp->p += 2;
            if (j_hex4(jp, &low))
                return -1;
            if (low >= 0xdc00 && low < 0xe000)
                cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
            else
                jp->p = back; /* not a pair: decode the next escape on its own */
        }
        if (cp >= 0xd800 && cp < 0xe000)
            cp = 0xfffd;
        utf8_put(&s, cp);
    }
    if (!s.p)
        s_addn(&s, "", 0);
    *text = s.p;
    *len = s.len;
    return 0;
}

static int j_digits(struct jparser *jp)
{
    const char *from = jp->p;
    while (jp->p < jp->end && *jp->p >= '0' && *jp->p <= '9')
        jp->p++;
    return jp->p > from;
}

static int j_number(struct jparser *jp, jval *v)
{
    const char *from = jp->p;
    if (*jp->p == '-')
        jp->p++;
    if (jp->p < jp->end && *jp->p == '0')
        jp->p++;
    else if (!j_digits(jp))
        return j_fail(jp, "expected a digit");
    if (jp->p < jp->end && *jp->p == '.') {
        jp->p++;
        if (!j_digits(jp))
            return j_fail(jp, "expected a digit after '.'");
    }
    if (jp->p < jp->end && (*jp->p == 'e' || *jp->p == 'E')) {
        jp->p++;
        if (jp->p < jp->end && (*jp->p == '+' || *jp->p == '-'))
            jp->p++;
        if (!j_digits(jp))
            return j_fail(jp, "expected a digit in the exponent");
    }
    str s = {0};
    s_addn(&s, from, (size_t)(jp->p - from));
    v->type = J_NUMBER;
    v->text = s.p;
    v->len = s.len;
    return 0;
}

static int j_value(struct jparser *jp, jval *v);

static int j_container(struct jparser *jp, jval *v, char close)
{
    size_t cap = 0;
    if (++jp->depth > HOOK_MAX_JSON_DEPTH)
        return j_fail(jp, "nesting deeper than " STR(HOOK_MAX_JSON_DEPTH) " levels");
    v->type = close == '}' ? J_OBJECT : J_ARRAY;
    jp->p++;
    j_space(jp);
    if (jp->p < jp->end && *jp->p == close) {
        jp->p++;
        jp->depth--;
        return 0;
    }
    for (;;) {
        if (v->count == cap) {
            cap = cap ? cap * 2 : 8;
            void *grown = close == '}' ? realloc(v->members, cap * sizeof *v->members)
                                       : realloc(v->items, cap * sizeof *v->items);
            if (!grown)
                out_of_memory();
            if (close == '}')
                v->members = grown;
            else
                v->items = grown;
        }
        jval *slot;
        j_space(jp);
        if (close == '}') {
            struct jmember *m = &v->members[v->count];
            memset(m, 0, sizeof *m);
            if (jp->p >= jp->end || *jp->p != '"')
                return j_fail(jp, "expected a '\"' starting a member name");
            if (j_string(jp, &m->key, &m->key_len))
                return -1;
            j_space(jp);
            if (jp->p >= jp->end || *jp->p != ':')
                return j_fail(jp, "expected ':' after a member name");
            jp->p++;
            slot = &m->value;
        } else {
            slot = &v->items[v->count];
            memset(slot, 0, sizeof *slot);
        }
        if (j_value(jp, slot))
            return -1;
        v->count++;
        j_space(jp);
        if (jp->p < jp->end && *jp->p == ',') {
            jp->p++;
            continue;
        }
        if (jp->p < jp->end && *jp->p == close) {
            jp->p++;
            jp->depth--;
            return 0;
        }
        return j_fail(jp, close == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static int j_word(struct jparser *jp, const char *word, jval *v, enum jtype type)
{
    size_t n = strlen(word);
    if ((size_t)(jp->end - jp->p) < n || memcmp(jp->p, word, n))
        return j_fail(jp, "expected a JSON value");
    v->type = type;
    v->text = (char *)word;
    v->len = n;
    jp->p += n;
    return 0;
}

static int j_value(struct jparser *jp, jval *v)
{
    j_space(jp);
    if (jp->p >= jp->end)
        return j_fail(jp, "expected a JSON value");
    switch (*jp->p) {
    case '{':
        return j_container(jp, v, '}');
    case '[':
        return j_container(jp, v, ']');
    case '"':
        v->type = J_STRING;
        return j_string(jp, &v->text, &v->len);
    case 't':
        return j_word(jp, "true", v, J_BOOL);
    case 'f':
        return j_word(jp, "false", v, J_BOOL);
    case 'n':
        return j_word(jp, "null", v, J_NULL);
    default:
        if (*jp->p == '-' || (*jp->p >= '0' && *jp->p <= '9'))
            return j_number(jp, v);
        return j_fail(jp, "expected a JSON value");
    }
}

int j_parse(const str *text, const char *what, jval *out, cmk_error *err)
{
    struct jparser jp = {text->p, text->p, text->p + text->len, NULL, 0};
    memset(out, 0, sizeof *out);
    if (!j_value(&jp, out)) {
        j_space(&jp);
        if (jp.p == jp.end)
            return 0;
        jp.error = "expected the end of the input after the value";
    }
    s_add(&err->msg, what);
    s_add(&err->msg, " is not valid JSON: ");
    s_add(&err->msg, jp.error);
    if (jp.p >= jp.end)
        s_add(&err->msg, " at its end");
    else
        s_addf(&err->msg, " at byte %zu", (size_t)(jp.p - jp.start));
    if (text->len == 0)
        s_add(&err->msg, " (it is empty)");
    return -1;
}

const jval *j_get(const jval *obj, const char *key)
{
    const jval *found = NULL;
    size_t n = strlen(key);
    if (obj->type != J_OBJECT)
        return NULL;
    for (size_t i = 0; i < obj->count; i++)
        if (obj->members[i].key_len == n && !memcmp(obj->members[i].key, key, n))
            found = &obj->members[i].value;
    return found;
}

#ifdef TEST_PROGRAM_JSON
/* `json-test` parses stdin and prints the value back in one canonical form (strings escaped only for '"',
 * '\\' and bytes below 0x20, as \u00XX; numbers as written), exit 0; or the error message, exit 1.
 * tests/pinner/test_native_units.py runs its case table through it. */
#include <unistd.h>

static void show(str *out, const jval *v);

static void show_string(str *out, const char *t, size_t n)
{
    s_add(out, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)t[i];
        if (c == '"' || c == '\\')
            s_addf(out, "\\%c", c);
        else if (c < 0x20)
            s_addf(out, "\\u%04x", c);
        else
            s_addn(out, &t[i], 1);
    }
    s_add(out, "\"");
}

static void show(str *out, const jval *v)
{
    if (v->type == J_STRING) {
        show_string(out, v->text, v->len);
    } else if (v->type == J_ARRAY || v->type == J_OBJECT) {
        s_add(out, v->type == J_ARRAY ? "[" : "{");
        for (size_t i = 0; i < v->count; i++) {
            s_add(out, i ? "," : "");
            if (v->type == J_OBJECT) {
                show_string(out, v->members[i].key, v->members[i].key_len);
                s_add(out, ":");
            }
            show(out, v->type == J_ARRAY ? &v->items[i] : &v->members[i].value);
        }
        s_add(out, v->type == J_ARRAY ? "]" : "}");
    } else {
        s_addn(out, v->text, v->len);
    }
}

int main(void)
{
    str in = {0}, out = {0};
    char buf[4096];
    ssize_t n;
    while ((n = read(0, buf, sizeof buf)) > 0)
        s_addn(&in, buf, (size_t)n);
    if (!in.p)
        s_addn(&in, "", 0);
    jval value;
    cmk_error err = {0};
    int bad = j_parse(&in, "the input", &value, &err);
    if (bad)
        out = err.msg;
    else
        show(&out, &value);
    s_add(&out, "\n");
    return write_all(1, out.p, out.len) ? 2 : bad ? 1 : 0;
}
#endif
