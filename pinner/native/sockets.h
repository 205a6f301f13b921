/* `cmk isolate --socket-id`: the pool's CPUs on one socket, read from sysfs as the daemon reads it.
 *
 * A CPU's socket is its physical_package_id; where the kernel gives -1 (some VMs and arm64 machines), its
 * package is derived from the package sibling lists as deviceplugin/model/packages.py numbers them.
 */
#ifndef CMK_SOCKETS_H
#define CMK_SOCKETS_H

#include "cpulist.h"
#include "error.h"
#include "isolate.h"

/* Narrows cpus (pool p's) to those on socket socket_id, sysfs under root; 0, or EXIT_SOCKET with the message
 * in err (none of them there, or sysfs unreadable or malformed). */
int on_socket(const struct pinner_pool *p, cpuset *cpus, long socket_id, const char *root, cmk_error *err);

#endif
