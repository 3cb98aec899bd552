"""Every log record of the named loggers, at DEBUG, as text (message, the record's
fields and any traceback): the providers' sentinel tests look for secrets in it."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator


class Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        self.lines: list[str] = []
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        text = record.getMessage() + " " + repr(record.__dict__)
        if record.exc_info:
            text += logging.Formatter().formatException(record.exc_info)
        self.lines.append(text)


@contextlib.contextmanager
def capturing(loggers: Iterable[str]) -> Iterator[Capture]:
    """Each logger at DEBUG into one Capture, not propagating (a record reaches it exactly once); restored after."""
    handler, names = Capture(), tuple(loggers)
    saved = {}
    for name in names:
        lg = logging.getLogger(name)
        saved[name] = (lg.level, lg.propagate)
        lg.setLevel(logging.DEBUG)
        lg.addHandler(handler)
        lg.propagate = False
    try:
        yield handler
    finally:
        for name in names:
            lg = logging.getLogger(name)
            lg.removeHandler(handler)
            lg.setLevel(saved[name][0])
            lg.propagate = saved[name][1]
