"""``cairn ui``: the dashboard. A Starlette app (``app``) under uvicorn
(``server``), Jinja2 templates and vendored htmx; the ``ui`` extra. Pages read
through ``cairn.admin``; ``guard`` and ``middleware`` check every request."""
