"""Log lines for machines and people: one line per record, ``key=value`` (logfmt) or JSON.

Every record becomes ``time``, ``level``, ``logger``, then ``event`` and the
fields passed with it (:class:`deviceplugin.events.EventLog`, or any ``extra=``
of a plain ``logging`` call), then ``msg``, and ``error`` holding a traceback
if there was one.
Newlines inside values are escaped, so one record is always one line and a
log shipper never splits an event.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from datetime import UTC, datetime
from typing import IO, Any

FORMATS = ("text", "json")
_BARE = re.compile(r"[A-Za-z0-9_./:@,+-]+\Z")
#: What every LogRecord has (and what formatters add): anything else on a record came with ``extra=``.
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}


def extra_fields(record: logging.LogRecord) -> dict[str, object]:
    """The fields a call passed with ``extra=`` (``event`` among them), in the order given."""
    return {key: value for key, value in record.__dict__.items() if key not in _STANDARD}


def record_fields(record: logging.LogRecord, formatter: logging.Formatter) -> dict[str, Any]:
    """The record as ordered key -> JSON-ready value."""
    fields: dict[str, Any] = {
        "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "level": record.levelname.lower(),
        "logger": record.name,
    }
    extra = extra_fields(record)
    if "event" in extra:
        fields["event"] = _plain(extra.pop("event"))
    for key, value in extra.items():
        fields.setdefault(key, _plain(value))
    fields["msg"] = record.getMessage()
    if record.exc_info:
        fields["error"] = formatter.formatException(record.exc_info)
    return fields


def _plain(value: object) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value) if isinstance(value, (set, frozenset)) else value
        return [_plain(item) for item in items]
    return str(value)


def _text_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, list):  # one quoted value, not a list of quoted items
        value = ",".join("true" if i is True else "false" if i is False else str(i) for i in value)
    text = "" if value is None else str(value)
    return text if _BARE.match(text) else json.dumps(text, ensure_ascii=False)


class KeyValueFormatter(logging.Formatter):
    """``time=... level=info logger=... event=allocated pool=exclusive devices=cpus-0.8 msg="..."``."""

    def format(self, record: logging.LogRecord) -> str:
        return " ".join(f"{key}={_text_value(value)}" for key, value in record_fields(record, self).items())


class JsonFormatter(logging.Formatter):
    """One JSON object per line, for log shippers that parse JSON."""

    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(record_fields(record, self), ensure_ascii=False)


def configure(level: str, fmt: str, stream: IO[str] | None = None) -> None:
    """Route every logger through one handler on ``stream`` (stderr) in ``fmt`` (text or json)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else KeyValueFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
