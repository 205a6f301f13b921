/* Growable strings and the few byte-level tests every unit needs.
 *
 * Messages quote user input of any length, as Python's do, so they are built in a str that grows; an
 * allocation failure ends the process with one line (the pinner is one short-lived process).
 */
#ifndef CMK_STRBUF_H
#define CMK_STRBUF_H

#include <stddef.h>

typedef struct {
    char *p;
    size_t len, cap;
} str;

/* Writes "cmk: error: out of memory" and exits 1. */
void out_of_memory(void);
/* Room for n more bytes and the terminator. */
void s_reserve(str *s, size_t n);
void s_addn(str *s, const char *t, size_t n);
void s_add(str *s, const char *t);
/* Formats into s at any length: the text is measured first, so no path or message is ever cut. */
__attribute__((format(printf, 2, 3))) void s_addf(str *s, const char *fmt, ...);
/* User text made safe for a one-line message: bytes outside printable ASCII become '?'. */
void s_shown_n(str *s, const char *t, size_t n);
void s_shown(str *s, const char *t);

/* Writes all of p (retrying short writes and EINTR); 0, or -1 with errno set. */
int write_all(int fd, const char *p, size_t len);
/* 1 if [t, t+n) is one or more ASCII digits (Python's isdigit() takes other scripts' digits too). */
int is_digits(const char *t, size_t n);
/* The C locale's isspace(), without the locale. */
int is_space(char c);
/* 1 if [t, t+n) is empty or only is_space() bytes. */
int is_blank(const char *t, size_t n);

#endif
