"""Device IDs from a request, shown in an error or a log line: a few of them and a count, each clipped.

A request is the caller's: 100,000 IDs, or one ID of 100,000 characters, fit
in one gRPC message. Repeated whole, they made a 3 MB error (past the 16 KiB
the kubelet's gRPC takes in a status, so the pod's event said nothing useful)
and a 9 MB log line. What helps the reader is which IDs, roughly how many,
and that the answer is the same each time: the first few in sorted order.
"""

from __future__ import annotations

from collections.abc import Iterable

from deviceplugin.model.devices import MAX_ID_LENGTH

#: How many IDs an error or a log line names; the rest are counted.
MAX_SHOWN = 5


def shown_id(device_id: str) -> str:
    """``device_id``, or its first 63 characters and its length: a real ID is never longer (the kubelet's limit)."""
    if len(device_id) <= MAX_ID_LENGTH:
        return device_id
    return f"{device_id[:MAX_ID_LENGTH]}... ({len(device_id)} characters)"


def shown_ids(ids: Iterable[str]) -> tuple[str, ...]:
    """The first :data:`MAX_SHOWN` distinct IDs in sorted order, each clipped: what an event records of a request."""
    return tuple(shown_id(i) for i in sorted(set(ids))[:MAX_SHOWN])


def named_ids(ids: Iterable[str]) -> str:
    """``a, b, c, d, e and 99995 more``: the distinct IDs for a message, the first few named, the rest counted."""
    distinct = set(ids)
    more = len(distinct) - MAX_SHOWN
    names = ", ".join(shown_ids(distinct))
    return f"{names} and {more} more" if more > 0 else names
