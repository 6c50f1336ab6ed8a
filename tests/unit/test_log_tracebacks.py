"""Tracebacks in cairn's log formats (cairn.observe.logs) are bounded.

A recorded error is kept to 64 KiB (cairn.engine.errortext); the log line of the
same exception was not: a task whose exception held a provider's answer of
megabytes wrote a log line of megabytes, once per attempt. Both formats now cut
a traceback to ``TRACEBACK_LIMIT`` around a line saying how much was cut, and
keep its start (where the exception's type is) and its end.

Each test logs a real exception through a real handler, to a StringIO or a file.
"""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from cairn.engine.errortext import ERROR_TEXT_LIMIT, bounded_text
from cairn.observe.logs import TRACEBACK_LIMIT, JsonFormatter, text_formatter

# A provider's answer of 5 MB, quoted whole in the exception it raised.
HUGE = "START of the answer " + "\u00e9x" * 2_500_000 + " END of the answer"
CUT = "characters here: error text is kept to 64 KiB"
# The first line of a record this test's logger writes in the text format.
TEXT_RECORD = re.compile(r"^\S+ ERROR cairn\.tests\.log_tracebacks: task failed\n", re.MULTILINE)


class ProviderError(Exception):
    """Raised with the provider's whole answer as its message."""


@pytest.fixture
def logger() -> Iterator[logging.Logger]:
    """A logger of this test's own, writing only to the handlers a test adds.

    Made outside logging's tree (no parent, not in ``getLogger``'s registry):
    pytest's capture handlers reach every registered logger, even one that does
    not propagate, and would carry each 5 MB record into the test report."""
    log = logging.Logger("cairn.tests.log_tracebacks")
    yield log
    for handler in list(log.handlers):
        log.removeHandler(handler)
        handler.close()


def _log_failure(log: logging.Logger, message: str, *, chained: bool = False) -> None:
    """Log ``ProviderError(message)`` with its traceback, as a worker logs a
    failed task; ``chained``: raised as the cause of a short RuntimeError."""
    try:
        try:
            raise ProviderError(message)
        except ProviderError as error:
            if chained:
                raise RuntimeError("the provider call failed") from error
            raise
    except Exception:
        log.exception("task failed")


class ExcTextSeen(logging.Handler):
    """A handler that keeps the traceback each record holds when it reaches it."""

    def __init__(self) -> None:
        super().__init__()
        self.exc_texts: list[str | None] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.exc_texts.append(record.exc_text)


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


def test_the_json_format_cuts_a_huge_traceback_and_keeps_its_type_and_end(
    logger: logging.Logger,
) -> None:
    """A 5 MB exception message, logged as JSON: one line, its ``error`` at most
    64 KiB of UTF-8, holding the exception's type with the start of its message,
    the line saying what was cut, and the message's end."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger.addHandler(handler)

    _log_failure(logger, HUGE)

    (line,) = stream.getvalue().splitlines()
    assert _size(line) < TRACEBACK_LIMIT + 1024, _size(line)
    record = json.loads(line)
    assert record["message"] == "task failed"
    error = record["error"]
    assert _size(error) <= TRACEBACK_LIMIT
    assert error.startswith("Traceback (most recent call last):")
    assert f"{__name__}.ProviderError: START of the answer" in error
    assert CUT in error
    assert error.endswith("\u00e9x END of the answer")


def test_the_text_format_cuts_a_huge_traceback_written_to_a_file(
    logger: logging.Logger, tmp_path: Path
) -> None:
    """A 5 MB exception message, logged as text to a file: the file holds the
    record's line and a traceback of at most 64 KiB, with the exception's type,
    the line saying what was cut, and the message's end."""
    path = tmp_path / "worker.log"
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(text_formatter())
    logger.addHandler(handler)

    _log_failure(logger, HUGE)
    handler.flush()

    written = path.read_text(encoding="utf-8")
    first, traceback_text = written.split("\n", 1)
    assert first.endswith(" ERROR cairn.tests.log_tracebacks: task failed")
    assert _size(traceback_text) <= TRACEBACK_LIMIT + 1  # and the handler's newline
    assert f"{__name__}.ProviderError: START of the answer" in traceback_text
    assert CUT in traceback_text
    assert traceback_text.endswith("\u00e9x END of the answer\n")


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_the_end_of_a_cut_traceback_names_the_exception_raised_last(
    logger: logging.Logger, fmt: str
) -> None:
    """A huge exception raised again as the cause of a short one: the cut
    traceback, in either format, still ends with the exception the task raised
    last, its type and message, after the cause's end and the chaining line."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter() if fmt == "json" else text_formatter())
    logger.addHandler(handler)

    _log_failure(logger, HUGE, chained=True)

    written = stream.getvalue()
    traceback_text = json.loads(written)["error"] if fmt == "json" else written
    assert _size(traceback_text) < TRACEBACK_LIMIT + 1024
    assert CUT in traceback_text
    assert "END of the answer\n\nThe above exception was the direct cause" in traceback_text
    assert traceback_text.rstrip("\n").endswith("RuntimeError: the provider call failed")


def test_a_traceback_another_handler_made_first_is_cut_in_the_text_format(
    logger: logging.Logger,
) -> None:
    """A plain logging handler that formats the record first leaves its whole
    traceback on the record (logging keeps it as ``exc_text``); cairn's text
    format, which would reuse it, writes it cut, and leaves the record's as it
    was for the plain handler's sake."""
    plain_stream, cairn_stream = io.StringIO(), io.StringIO()
    plain = logging.StreamHandler(plain_stream)
    plain.setFormatter(logging.Formatter("%(message)s"))
    ours = logging.StreamHandler(cairn_stream)
    ours.setFormatter(text_formatter())
    after = ExcTextSeen()
    for handler in (plain, ours, after):  # logging calls them in this order
        logger.addHandler(handler)

    _log_failure(logger, HUGE)

    assert HUGE in plain_stream.getvalue()  # the plain handler's own choice
    (seen,) = after.exc_texts
    assert seen is not None
    assert HUGE in seen, "the record's traceback was changed for the handlers after"
    written = cairn_stream.getvalue()
    assert _size(written) < TRACEBACK_LIMIT + 1024
    assert CUT in written
    assert written.endswith("END of the answer\n")


def test_a_short_traceback_is_written_whole_and_a_lone_surrogate_does_not_break_it(
    logger: logging.Logger,
) -> None:
    """A traceback under the limit is written as it was, in either format; a huge
    one naming a file whose name holds a lone surrogate (decoded with
    ``surrogateescape``) is cut too, without the formatter raising."""
    for fmt in ("json", "text"):
        stream = io.StringIO()
        handler = logging.StreamHandler(stream)
        handler.setFormatter(JsonFormatter() if fmt == "json" else text_formatter())
        logger.addHandler(handler)

        _log_failure(logger, "a short message")
        _log_failure(logger, "report \udcff.txt: " + HUGE)

        logger.removeHandler(handler)
        written = stream.getvalue()
        if fmt == "json":
            short, huge = (json.loads(line)["error"] for line in written.splitlines())
        else:
            _, short, huge = TEXT_RECORD.split(written)
        assert short.rstrip("\n").endswith("ProviderError: a short message"), fmt
        assert "cairn cut" not in short, fmt
        assert "ProviderError: report \udcff.txt: START" in huge, fmt
        assert CUT in huge, fmt
        assert len(huge) < TRACEBACK_LIMIT + 1024, fmt


def test_bounded_text_keeps_the_start_and_end_of_text_within_the_limit() -> None:
    """``bounded_text``: text that fits is returned as it is; longer text, of
    characters one to four bytes wide, is at most the limit in UTF-8 bytes, its
    first and last parts kept around a line saying how many characters were cut
    and what the limit is."""
    assert TRACEBACK_LIMIT == ERROR_TEXT_LIMIT
    assert bounded_text("fits") == "fits"
    fits = "\U0001f600" * (ERROR_TEXT_LIMIT // 4)
    assert bounded_text(fits) is fits
    for wide in ("a", "\u00e9", "\u20ac", "\U0001f600"):
        text = "HEAD" + wide * 100_000 + "TAIL"
        for limit in (1000, ERROR_TEXT_LIMIT):
            shown = bounded_text(text, limit)
            assert _size(shown) <= limit, (wide, limit)
            assert _size(shown) > limit - 8, (wide, limit)  # not cut more than needed
            assert shown.startswith("HEAD"), (wide, limit)
            assert shown.endswith("TAIL"), (wide, limit)
            head, marker, tail = shown.split("\n")
            cut = len(text) - len(head) - len(tail)
            unit = "64 KiB" if limit == ERROR_TEXT_LIMIT else "1,000 bytes"
            assert marker == (
                f"[... cairn cut {cut:,} characters here: error text is kept to {unit}, "
                "its first and last parts ...]"
            ), (wide, limit)
