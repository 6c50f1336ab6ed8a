"""Rendering the dashboard's Jinja2 templates (``cairn/ui/templates``), autoescaped.

A page is a template of its own content, put inside ``layout.html``. A live
page's content also sits in a region that htmx (``static/htmx.min.js``) asks
for again every few seconds; the region carries a digest of what it shows, and
the server answers 204 (nothing to swap) while that has not changed, so an
opened ``<details>`` stays open until there is something new to see. A page's
tail (its costs) sits below that region and is built with the whole page only.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from cairn.observe.text import short_type

NAV = (
    ("/", "Batches"),
    ("/tasks", "Tasks"),
    ("/ops", "Operations"),
    ("/stalls", "Stalls"),
    ("/metrics", "Metrics"),
    ("/audit", "Audit"),
)


def when(moment: datetime | None) -> str:
    return "-" if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S")


def seconds(value: float | None) -> str:
    """A duration for people: ``850 ms``, ``12.3 s``, ``4 min 10 s``, ``2 h 5 min``."""
    if value is None:
        return "-"
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 60:
        return f"{value:.1f} s"
    if value < 3600:
        return f"{int(value // 60)} min {int(value % 60)} s"
    return f"{int(value // 3600)} h {int(value % 3600 // 60)} min"


def elapsed(started: datetime, now: datetime) -> str:
    """How long since ``started``, for a step in flight: in tens of seconds under
    a minute, then in minutes, so a live page's content (and its digest) moves
    at most that often, and an opened ``<details>`` stays open in between."""
    value = max(0.0, (now - started).total_seconds())
    if value < 10:
        return "under 10 s"
    if value < 60:
        return f"{int(value // 10) * 10} s"
    if value < 3600:
        return f"{int(value // 60)} min"
    return f"{int(value // 3600)} h {int(value % 3600 // 60)} min"


def without(params: Mapping[str, str], *names: str) -> dict[str, str]:
    """``params`` but ``names``: a link that drops a filter."""
    return {k: v for k, v in params.items() if k not in names}


def size(count: int) -> str:
    """A byte count for people: ``812 B``, ``4.2 KiB``, ``1.5 MiB``."""
    if count < 1024:
        return f"{count} B"
    if count < 1024 * 1024:
        return f"{count / 1024:.1f} KiB"
    return f"{count / (1024 * 1024):.1f} MiB"


def plural(noun: str) -> str:
    """The English plural of a dashboard noun: batches, tasks, entries, keys."""
    if noun.endswith(("s", "x", "z", "ch", "sh")):
        return noun + "es"
    if noun.endswith("y") and noun[-2:-1] not in ("a", "e", "i", "o", "u"):
        return noun[:-1] + "ies"
    return noun + "s"


def counted(count: int, noun: str) -> str:
    """``count`` and ``noun``, plural unless it is one: ``1 batch``, ``3 batches``."""
    return f"{count} {noun if count == 1 else plural(noun)}"


def href(path: str, **query: str | int | None) -> str:
    """``path`` with the non-empty ``query`` parameters, encoded."""
    params = {k: v for k, v in query.items() if v is not None and v != ""}
    return path + ("?" + urlencode(params) if params else "")


def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("cairn.ui", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        when=when,
        seconds=seconds,
        size=size,
        counted=counted,
        elapsed=elapsed,
        short_type=short_type,
    )
    env.globals.update(href=href, nav=NAV, without=without, dict=dict)
    return env


ENV = _environment()


@dataclass
class Page:
    """One page: its title, its content template and what that template reads.
    ``live`` pages refresh their content in place; ``status`` is the HTTP status."""

    title: str
    template: str
    context: Mapping[str, Any] = field(default_factory=dict)
    live: bool = False
    status: int = 200
    # A part below the live region, built only when the whole page is (never on
    # a poll): what is too costly to read again every few seconds. Its context
    # is a function, called then.
    tail: str | None = None
    tail_context: Callable[[], Mapping[str, Any]] | None = None


def content(page: Page) -> str:
    return ENV.get_template(page.template).render(**page.context)


def _rendered(html: str) -> Markup:
    """HTML that an autoescaping template produced, to put inside another one."""
    return Markup(html)  # noqa: S704 - its values were escaped when it was rendered


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def live_region(page: Page, url: str, poll_seconds: float) -> tuple[str, str]:
    """The live region of ``page`` (polling ``url``) and the digest of its content."""
    body = content(page)
    seen = digest(body)
    region = ENV.get_template("live.html").render(
        body=_rendered(body), url=url, seen=seen, poll=f"{poll_seconds:g}s"
    )
    return region, seen


def full_page(page: Page, region: str | None) -> str:
    """``page`` inside the layout; ``region`` is its live region, if it has one,
    followed by its tail."""
    body = region if region is not None else content(page)
    if page.tail is not None:
        context = page.tail_context() if page.tail_context is not None else {}
        body += ENV.get_template(page.tail).render(**context)
    return ENV.get_template("layout.html").render(
        title=page.title, body=_rendered(body), live=page.live
    )
