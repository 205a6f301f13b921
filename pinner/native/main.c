/*
 * cmk: the self-contained pinner, for workload images without Python or libc.
 *
 * The one pinner every container gets (docs/design/pinner.md says how it behaves; deviceplugin/model/pinnercontract.py holds the exit
 * statuses, the pool table and the texts, from which pinner/build.py generates cmk_generated.h, so the
 * daemon and it agree); the Python `cmk isolate` and `cmk hook` exec it.
 *
 * Linked statically (musl preferred) so it runs from a read-only mount in a busybox-static, distroless or
 * scratch image. It allocates little, writes each error as one write(2), and execs the command in place.
 *
 * main() dispatches on a subcommand: `isolate` (in the workload's container, isolate.c) or `hook` (the OCI
 * hook the CDI spec adds, run by the runtime on the host, hook.c); `--version` prints the package's release. Each returns its exit status with any
 * message in the error value it is given; only here is that message printed.
 */
#define _GNU_SOURCE
#include <string.h>

#include "cmk_generated.h"
#include "error.h"
#include "hook.h"
#include "isolate.h"
#include "strbuf.h"

int main(int argc, char **argv)
{
    cmk_error err = {0};
    if (argc == 2 && (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")))
        return write_all(1, VERSION_TEXT, sizeof VERSION_TEXT - 1) ? 1 : 0;
    if (argc >= 2 && !strcmp(argv[1], "isolate"))
        return cmk_report(PROG, &err, isolate(argc - 2, argv + 2, &err));
    if (argc >= 2 && !strcmp(argv[1], "hook"))
        return cmk_report(HOOK_PROG, &err, hook(argc - 2, argv + 2, &err));
    if (argc < 2) {
        s_add(&err.msg, "missing COMMAND: this self-contained cmk runs 'cmk isolate' (see 'cmk isolate --help') "
                        "and 'cmk hook' (see 'cmk hook --help')");
    } else {
        s_add(&err.msg, "unknown command '");
        s_shown(&err.msg, argv[1]);
        s_add(&err.msg, "': this self-contained cmk runs only 'cmk isolate' and 'cmk hook'; the other commands come "
                        "with the cmk-deviceplugin package");
    }
    return cmk_report("cmk", &err, cmk_fail(&err, EXIT_USAGE));
}
