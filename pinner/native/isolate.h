/* `cmk isolate`: confine a command to the CPUs of one pool, then become it (the behaviour, the messages and
 * the exit statuses are docs/design/pinner.md's and pinner/contract.py's; pinner/isolate.py is the same program).
 */
#ifndef CMK_ISOLATE_H
#define CMK_ISOLATE_H

#include "error.h"

/* One row of pinner/contract.py's POOLS. */
struct pool {
    const char *name, *var, *resource;
    int socket_aware;
};

/* Runs `cmk isolate ARGS` (argv after "isolate"): execs the command, or returns the exit status with the
 * message in err. */
int isolate(int argc, char **argv, cmk_error *err);

#endif
