"""The daemon's log lines as a test reads them from ``caplog``: the fields of each record of one event."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from deviceplugin.observe.logs import extra_fields


def logged(records: Iterable[logging.LogRecord], event: str) -> list[dict[str, object]]:
    """Each ``event`` record's fields, with its ``msg`` and ``level``, in the order logged."""
    return [{**extra_fields(record), "msg": record.getMessage(), "level": record.levelname.lower()}
            for record in list(records) if getattr(record, "event", None) == event]
