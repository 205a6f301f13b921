"""Fixed values of the kubelet device plugin contract, and the kubelet's own input checks.

The validators mirror what the kubelet enforces, so a bad resource name or
device ID is reported at our start-up, in our words, instead of as an opaque
Register failure or a device the kubelet silently mishandles. They are pure
functions: they return an error message (what is wrong and how to fix it) or
None, and leave raising to the caller.
"""

from __future__ import annotations

import re

API_VERSION = "v1beta1"
"""The only version the kubelet accepts in RegisterRequest.version."""

DEVICE_PLUGIN_DIR = "/var/lib/kubelet/device-plugins/"
"""Fixed path: it does not follow the kubelet's --root-dir."""

KUBELET_SOCKET_NAME = "kubelet.sock"
"""The kubelet's Registration socket, inside DEVICE_PLUGIN_DIR."""

POD_RESOURCES_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
"""Mount its directory, not the socket: a kubelet restart replaces the socket inode."""

PLUGINS_REGISTRY_DIR = "/var/lib/kubelet/plugins_registry"
"""The kubelet's plugin watcher finds DRA plugins' registration sockets here (it follows --root-dir)."""

PLUGINS_DIR = "/var/lib/kubelet/plugins"
"""Where a DRA plugin keeps its service socket and state, in a directory named after its driver (follows --root-dir)."""

HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
"""The kubelet treats any health string other than HEALTHY as unhealthy."""

MAX_DEVICE_ID_LENGTH = 63

RESOURCE_NAME_PREFIX = "cmk.intel.com/"

_NAME_PART_MAX = 63
# The kubelet checks "requests." + name as a qualified name, so the prefix
# loses len("requests.") of the 253 a DNS-1123 subdomain may have.
_QUOTA_PREFIX = "requests."
_PREFIX_MAX = 253 - len(_QUOTA_PREFIX)
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_NAME_PART = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_EXAMPLE = f"e.g. {RESOURCE_NAME_PREFIX}exclusive-cores"


def validate_resource_name(name: str) -> str | None:
    """Why the kubelet would refuse ``name`` as an extended resource name, or None if it accepts it."""
    if "/" not in name:
        return f"resource name {name!r} needs a domain prefix and a '/', {_EXAMPLE}"
    if "kubernetes.io/" in name:
        return f"resource name {name!r} must not contain 'kubernetes.io/' (reserved for native resources), {_EXAMPLE}"
    if name.startswith(_QUOTA_PREFIX):
        return f"resource name {name!r} must not start with {_QUOTA_PREFIX!r} (reserved for quota), {_EXAMPLE}"
    prefix, _, part = name.partition("/")
    if "/" in part:
        return f"resource name {name!r} must contain exactly one '/', {_EXAMPLE}"
    if not prefix:
        return f"resource name {name!r} has an empty prefix before '/', {_EXAMPLE}"
    if len(prefix) > _PREFIX_MAX:
        return f"resource name prefix {prefix!r} is {len(prefix)} characters; at most {_PREFIX_MAX} are allowed"
    if not _DNS1123_SUBDOMAIN.fullmatch(prefix):
        return (
            f"resource name prefix {prefix!r} must be a DNS-1123 subdomain: lowercase letters, digits, "
            f"'-' and '.', starting and ending with a letter or digit, {_EXAMPLE}"
        )
    if not part:
        return f"resource name {name!r} has an empty name after '/', {_EXAMPLE}"
    if len(part) > _NAME_PART_MAX:
        return f"resource name part {part!r} is {len(part)} characters; at most {_NAME_PART_MAX} are allowed"
    if not _NAME_PART.fullmatch(part):
        return (
            f"resource name part {part!r} may hold only letters, digits, '-', '_' and '.', "
            f"and must start and end with a letter or digit, {_EXAMPLE}"
        )
    return None


def validate_device_id(device_id: str) -> str | None:
    """Why ``device_id`` is not a safe device ID, or None if it is.

    The kubelet only documents the 63-character limit. We also hold IDs to the
    character set of a resource name part, because our IDs travel inside
    environment values, annotation values and comma-separated lists, where
    spaces, commas or control characters would need quoting.
    """
    if not device_id:
        return "device ID is empty; give every device a non-empty ID"
    if len(device_id) > MAX_DEVICE_ID_LENGTH:
        return f"device ID {device_id!r} is {len(device_id)} characters; at most {MAX_DEVICE_ID_LENGTH} are allowed"
    if not _NAME_PART.fullmatch(device_id):
        return (
            f"device ID {device_id!r} may hold only letters, digits, '-', '_' and '.', "
            "and must start and end with a letter or digit"
        )
    return None
