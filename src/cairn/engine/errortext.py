"""The recorded form of an error: the text cairn writes into ``tasks.error``,
``steps.error`` and ``operations.error``, on every store.

Every writer of error text calls ``describe_error`` (``TaskRun``'s attempt,
finish and operation writes, the step machine's records, and ``execute`` for a
task whose arguments cannot be decoded), so what follows holds for each of
those columns, whichever store holds them.

The record is JSON, ``{"type", "message", "traceback"}`` (and ``note`` when
the text had to change), and ``describe_error`` never raises, whatever the
error holds, so a failure is always recorded (a task is never left
``running`` because its error could not be written):

* a NUL character is kept (JSON writes it as ``\\u0000``, which every store
  holds) and reads back as it was raised;
* a lone surrogate (a file name decoded with ``surrogateescape``) cannot be
  stored at all: it is written as its escape (``\\udcff``), and the record's
  ``note`` says the text was changed so;
* an error whose ``str()`` itself raises is recorded with a message saying
  so, not with the error of its ``str()``;
* the record is at most ``ERROR_TEXT_LIMIT`` bytes of UTF-8 (64 KiB). A
  message or traceback that would make it longer keeps its first and last
  parts, joined by a line saying how many characters were cut there. An
  exception whose message is a megabyte is raised again on every attempt, and
  each attempt writes its record: without the bound, a task retried five times
  would write five megabytes, and every listing that shows the error would
  read them. The type is always kept, and so is the start of the message.

``bounded_text`` applies the same cut to any text, in bytes of UTF-8: cairn's
log formatters (``cairn.observe.logs``) bound the tracebacks they write with
it, so that the exception of a megabyte is not a megabyte log line either.

Message and traceback pass through ``cairn.redaction.redact`` first: no
known secret (a model client's key, a credential-named environment
variable's value, a secret the program registered), nor anything shaped like
a credential, reaches the record, whatever the error's layout.
"""

from __future__ import annotations

import json
import traceback
from collections.abc import Callable

from cairn.codec import storable_text
from cairn.redaction import redact

__all__ = ["ERROR_TEXT_LIMIT", "SANITIZED_NOTE", "bounded_text", "describe_error"]

ERROR_TEXT_LIMIT = 64 * 1024
"""The most bytes (UTF-8) one recorded error takes, its JSON included."""

# What the marker in a cut record says of the bound.
_RECORD_RULE = f"a recorded error is kept to {ERROR_TEXT_LIMIT // 1024} KiB"

# Room for the exception's type name (a module path and a qualified name: far
# shorter in practice; bounded so that the message and traceback keep the rest).
_TYPE_ROOM = 1024

SANITIZED_NOTE = (
    "cairn wrote the lone surrogates of this error's text as escapes (\\udcff): "
    "they are not valid Unicode, so no store can hold them as raised"
)


def describe_error(error: BaseException) -> str:
    """The recorded form of ``error``: type, message and traceback as JSON,
    redacted, at most ``ERROR_TEXT_LIMIT`` bytes (see the module doc)."""
    kind = type(error)
    kind_name, kind_changed = _storable(f"{kind.__module__}.{kind.__qualname__}")
    message, message_changed = _storable(redact(_message_of(error)))
    trace, trace_changed = _storable(redact(_traceback_of(error)))
    described = {"type": _fit_field(kind_name, _TYPE_ROOM), "message": message, "traceback": trace}
    if kind_changed or message_changed or trace_changed:
        described["note"] = SANITIZED_NOTE
    return _bounded(described)


def bounded_text(text: str, limit: int = ERROR_TEXT_LIMIT) -> str:
    """``text``, or its first and last parts around a line saying how many
    characters were cut, so that it takes at most ``limit`` bytes of UTF-8 (a
    lone surrogate counted as 3). A ``limit`` too small for that line (about
    120 bytes) gets the line alone."""
    # A character is at most 4 bytes: a short text is not encoded to measure it.
    if len(text) * 4 <= limit:
        return text
    return _fit(text, limit, _text_size, f"error text is kept to {_amount(limit)}")


def _bounded(described: dict[str, str]) -> str:
    """``described`` as JSON of at most ``ERROR_TEXT_LIMIT`` bytes: the message
    and the traceback cut to fit, each given what the other leaves (half each
    when both are long)."""
    text = json.dumps(described, ensure_ascii=False)
    # A character is at most 4 bytes: a short record is not encoded to measure it.
    if len(text) * 4 <= ERROR_TEXT_LIMIT or _size(text) <= ERROR_TEXT_LIMIT:
        return text
    message, trace = described["message"], described["traceback"]
    emptied = json.dumps({**described, "message": "", "traceback": ""}, ensure_ascii=False)
    room = ERROR_TEXT_LIMIT - _size(emptied)
    message_size, trace_size = _field_size(message), _field_size(trace)
    message_room = min(message_size, max(room - trace_size, room // 2))
    described["message"] = _fit_field(message, message_room)
    described["traceback"] = _fit_field(trace, room - _field_size(described["message"]))
    return json.dumps(described, ensure_ascii=False)


def _fit_field(text: str, room: int) -> str:
    """``text`` cut (see ``_fit``) to take at most ``room`` bytes inside JSON."""
    return _fit(text, room, _field_size, _RECORD_RULE)


def _fit(text: str, room: int, size_of: Callable[[str], int], rule: str) -> str:
    """``text``, or its first and last parts around a line saying how many
    characters were cut (and ``rule``, why), so that it takes at most ``room``
    bytes as ``size_of`` measures them."""
    size = size_of(text)
    if size <= room:
        return text
    keep = len(text) * room // size  # as many characters as fit, at the text's mean width
    while True:
        shown = _cut(text, keep, rule)
        size = size_of(shown)
        if size <= room or keep == 0:
            return shown
        # Over by the marker or by wider characters kept: shrink by the same
        # ratio (keep strictly falls, so this ends; once or twice in practice).
        keep = keep * room // size


def _cut(text: str, keep: int, rule: str) -> str:
    """``text``'s first and last characters, ``keep`` in all, around a marker."""
    head, tail = (keep + 1) // 2, keep // 2
    cut = len(text) - head - tail
    marker = f"\n[... cairn cut {cut:,} characters here: {rule}, its first and last parts ...]\n"
    return text[:head] + marker + text[len(text) - tail :]


def _amount(limit: int) -> str:
    """``limit`` bytes as a marker says it: ``64 KiB``, or ``1,000 bytes``."""
    return f"{limit // 1024} KiB" if limit % 1024 == 0 else f"{limit:,} bytes"


def _field_size(text: str) -> int:
    """The bytes ``text`` takes as a JSON string, quotes left out."""
    return _size(json.dumps(text, ensure_ascii=False)) - 2


def _size(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def _text_size(text: str) -> int:
    """The bytes ``text`` takes in UTF-8. Unlike a recorded error, text given to
    ``bounded_text`` may hold a lone surrogate (a traceback naming a file decoded
    with ``surrogateescape``): it is counted as the 3 bytes of its code point,
    since measuring must not raise inside a log formatter."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _storable(text: str) -> tuple[str, bool]:
    stored = storable_text(text)
    return stored, stored is not text


def _message_of(error: BaseException) -> str:
    try:
        return str(error)
    except Exception as exc:  # noqa: BLE001 - the error's own __str__ is broken
        return (
            f"<the message of this {type(error).__qualname__} cannot be shown: its "
            f"str() raised {type(exc).__qualname__}>"
        )


def _traceback_of(error: BaseException) -> str:
    try:
        return "".join(traceback.format_exception(error))
    except Exception as exc:  # noqa: BLE001 - an error no traceback can be made of
        return f"<no traceback: formatting it raised {type(exc).__qualname__}>"
