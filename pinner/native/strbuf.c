/* Growable strings and byte-level tests (strbuf.h). */
#define _GNU_SOURCE
#include "strbuf.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void out_of_memory(void)
{
    static const char m[] = "cmk: error: out of memory\n";
    if (write(2, m, sizeof m - 1) < 0) {
        /* nothing more to do */
    }
    _exit(1);
}

void s_reserve(str *s, size_t n)
{
    if (s->len + n + 1 > s->cap) {
        size_t cap = (s->len + n + 1) * 2;
        char *p = realloc(s->p, cap);
        if (!p)
            out_of_memory();
        s->p = p;
        s->cap = cap;
    }
}

void s_addn(str *s, const char *t, size_t n)
{
    s_reserve(s, n);
    if (n) /* t may be an empty string's NULL buffer: memcpy(dst, NULL, 0) is undefined */
        memcpy(s->p + s->len, t, n);
    s->len += n;
    s->p[s->len] = '\0';
}

void s_add(str *s, const char *t)
{
    s_addn(s, t, strlen(t));
}

void s_addf(str *s, const char *fmt, ...)
{
    va_list ap, again;
    va_start(ap, fmt);
    va_copy(again, ap);
    int n = vsnprintf(NULL, 0, fmt, ap); /* the length it needs */
    va_end(ap);
    if (n > 0) {
        s_reserve(s, (size_t)n);
        vsnprintf(s->p + s->len, (size_t)n + 1, fmt, again);
        s->len += (size_t)n;
    }
    va_end(again);
}

void s_shown_n(str *s, const char *t, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char c = (t[i] >= 0x20 && t[i] < 0x7f) ? t[i] : '?';
        s_addn(s, &c, 1);
    }
}

void s_shown(str *s, const char *t)
{
    s_shown_n(s, t, strlen(t));
}

int write_all(int fd, const char *p, size_t len)
{
    for (size_t done = 0; done < len;) {
        ssize_t n = write(fd, p + done, len - done);
        if (n <= 0 && errno != EINTR)
            return -1;
        if (n > 0)
            done += (size_t)n;
    }
    return 0;
}

int is_digits(const char *t, size_t n)
{
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (t[i] < '0' || t[i] > '9')
            return 0;
    return 1;
}

int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

int is_blank(const char *t, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!is_space(t[i]))
            return 0;
    return 1;
}
