/* `cmk isolate`: confine a command to the CPUs of one pool, then become it (docs/design/pinner.md says how and
 * why; the messages' texts and the exit statuses come from deviceplugin/model/pinnercontract.py).
 */
#ifndef CMK_ISOLATE_H
#define CMK_ISOLATE_H

#include "error.h"

/* One row of deviceplugin/model/pinnercontract.py's POOLS. */
struct pinner_pool {
    const char *name, *var, *resource;
    int socket_aware;
};

/* Runs `cmk isolate ARGS` (argv after "isolate"): execs the command, or returns the exit status with the
 * message in err. */
int isolate(int argc, char **argv, cmk_error *err);

#endif
