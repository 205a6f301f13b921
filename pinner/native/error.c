/* Errors as values (error.h): recorded by the failing call, printed once by main.c. */
#define _GNU_SOURCE
#include "error.h"

#include <errno.h>
#include <stdlib.h>

#include "cmk_generated.h"

int cmk_fail(cmk_error *err, int status)
{
    err->status = status;
    return status;
}

void cmk_error_free(cmk_error *err)
{
    free(err->msg.p);
    *err = (cmk_error){0};
}

int cmk_report(const char *prog, const cmk_error *err, int status)
{
    if (!err->status)
        return status;
    str line = {0};
    s_add(&line, prog);
    s_add(&line, ": error: ");
    s_addn(&line, err->msg.p ? err->msg.p : "", err->msg.len);
    s_add(&line, "\n");
    (void)write_all(2, line.p, line.len); /* nowhere left to report a failed stderr */
    free(line.p);
    return status;
}

void s_errno(str *s, int e)
{
    if (e == E_NOT_REGULAR || e == E_SYMLINK) {
        s_add(s, e == E_NOT_REGULAR ? NOT_REGULAR_TEXT : SYMLINK_TEXT);
        return;
    }
#define ERRNO_CASE(name, text) \
    case name:                 \
        s_add(s, text);        \
        return;
    switch (e) {
        CMK_ERRNO_TEXTS(ERRNO_CASE)
    default:
        s_addf(s, "errno %d", e);
    }
#undef ERRNO_CASE
}
