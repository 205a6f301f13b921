/* The error a call hands back to its caller, as crun's libcrun_error_t: no global message buffer.
 *
 * A function that can fail takes `cmk_error *err` last, writes its one-line message into err->msg and
 * returns `cmk_fail(err, STATUS)` (the exit status); 0 is success. A caller that words the message its own
 * way ("cannot read X from PATH: <detail>") passes a local cmk_error and quotes its msg. Only the
 * subcommand's entry (main.c) prints it, as "PROG: error: MSG", once.
 */
#ifndef CMK_ERROR_H
#define CMK_ERROR_H

#include "strbuf.h"

/* Not errno values: what open_regular refuses on its own (texts shared with deviceplugin/model/pinnercontract.py). */
#define E_NOT_REGULAR 0x10000
#define E_SYMLINK 0x10001

typedef struct {
    int status; /* the exit status, once the message is complete; 0 while there is none */
    str msg;
} cmk_error;

/* Marks err's message complete with the exit status; returns status. */
int cmk_fail(cmk_error *err, int status);
/* Frees a local error's message (one whose text a caller has quoted or dropped). */
void cmk_error_free(cmk_error *err);
/* Prints "PROG: error: MSG\n" as one write(2) if err holds a message; returns status. */
int cmk_report(const char *prog, const cmk_error *err, int status);
/* An errno (or E_NOT_REGULAR, E_SYMLINK) in the fixed words of deviceplugin/model/pinnercontract.py's ERRNO_TEXT. */
void s_errno(str *s, int e);

#endif
