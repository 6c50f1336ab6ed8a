"""The dashboard's Starlette app: its routes, and how a page becomes an answer.

Pages read the store, which blocks, so each is built on a worker thread taken
from a small fixed pool (:data:`WORKER_THREADS`): a burst of requests waits
for a thread rather than starting more. A live page asked for by htmx (header
``HX-Request``) is answered with its live region only, or with 204 when what
it shows has not changed since the digest the browser sent (``X-Cairn-Seen``).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from importlib.resources import files
from pathlib import Path

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from cairn.ui import actions, confirm, history, lane, pages
from cairn.ui.config import UIConfig
from cairn.ui.filters import Query
from cairn.ui.middleware import FORM_KEY
from cairn.ui.render import Page, full_page, live_region

WORKER_THREADS = 8
PageBuilder = Callable[[UIConfig, Query], Page]
ActionHandler = Callable[[UIConfig, dict[str, list[str]]], actions.Outcome]

PAGES: dict[str, PageBuilder] = {
    "/": pages.batches,
    "/batch": pages.batch,
    "/tasks": pages.tasks,
    "/task": pages.task,
    "/ops": pages.operations,
    "/conversation": pages.conversation,
    "/stalls": pages.stalls,
    "/metrics": pages.metrics,
    "/confirm": confirm.confirm,
    "/diff": history.diff,
    "/audit": history.audit,
}
ACTIONS: dict[str, ActionHandler] = {
    "/task/retry": actions.retry,
    "/task/cancel": actions.cancel,
    "/task/signal": actions.signal,
    "/ops/resolve": actions.resolve,
    "/task/rerun": actions.rerun,
    "/bulk": actions.bulk,
    "/batch/budget": actions.raise_batch_budget,
}


def _query(request: Request) -> Query:
    # One value per name (the first); the pages' forms never repeat a field.
    return {key: request.query_params[key] for key in request.query_params}


def _answer(config: UIConfig, build: PageBuilder, request: Request) -> Response:
    """Build the page (on a worker thread) and render it as the request asks."""
    page = build(config, _query(request))
    if not page.live:
        return HTMLResponse(full_page(page, None), status_code=page.status)
    url = str(request.url.path) + (f"?{request.url.query}" if request.url.query else "")
    region, seen = live_region(page, url, config.poll_seconds)
    if request.headers.get("hx-request") == "true":
        if request.headers.get("x-cairn-seen") == seen:
            return Response(status_code=204)
        return HTMLResponse(region, status_code=page.status)
    return HTMLResponse(full_page(page, region), status_code=page.status)


def _act(config: UIConfig, handler: ActionHandler, request: Request) -> Response:
    """Done: 303 to where the result shows, so a reload does not post again.
    Refused: the page saying why, with its status."""
    outcome = handler(config, request.scope.get(FORM_KEY, {}))
    if outcome.redirect is not None:
        return RedirectResponse(outcome.redirect, status_code=303)
    page = Page(
        outcome.title,
        "message.html",
        {
            "text": outcome.message,
            "back": outcome.back,
            "confirm_action": outcome.confirm_action,
            "confirm_fields": outcome.confirm_fields,
        },
    )
    return HTMLResponse(full_page(page, None), status_code=outcome.status)


def _on_worker(config: UIConfig, work: Callable[[], Response]) -> Response:
    try:
        return work()
    finally:
        # The pool's threads come and go (an idle one ends): none keeps a connection.
        config.store.close_thread()


def _endpoint(
    config: UIConfig, limiter: anyio.CapacityLimiter, work: Callable[..., Response], target: object
) -> Callable[[Request], object]:
    async def endpoint(request: Request) -> Response:
        job = partial(_on_worker, config, partial(work, config, target, request))
        return await anyio.to_thread.run_sync(job, limiter=limiter)

    return endpoint


async def _no_favicon(request: Request) -> Response:
    return Response(status_code=204)


def _static() -> StaticFiles:
    return StaticFiles(directory=Path(str(files("cairn.ui") / "static")))


async def _not_found(request: Request, exc: Exception) -> Response:
    text = f"No page at {request.url.path}"
    page = Page("Not found", "message.html", {"text": text, "back": "/"})
    return HTMLResponse(full_page(page, None), status_code=404)


def build_app(config: UIConfig) -> Starlette:
    """The Starlette app of one store's dashboard."""
    limiter = anyio.CapacityLimiter(WORKER_THREADS)
    routes: list[Route | Mount] = [
        Route(path, _endpoint(config, limiter, _answer, build), methods=["GET"])
        for path, build in PAGES.items()
    ]
    routes += [
        Route(path, _endpoint(config, limiter, _act, handler), methods=["POST"])
        for path, handler in ACTIONS.items()
    ]
    routes += [
        Route("/task/tail", partial(lane.tail, config, limiter), methods=["GET"]),
        Route("/favicon.ico", _no_favicon, methods=["GET"]),
        Mount("/static", _static(), name="static"),
    ]
    return Starlette(routes=routes, exception_handlers={404: _not_found})
