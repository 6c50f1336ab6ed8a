"""The dashboard's defences, against the real server on 127.0.0.1 with raw
``http.client`` and socket requests: DNS rebinding (Host), cross-site POSTs
(Origin and the form secret), response headers, the session cookie, and
malformed requests, each answered and never a dropped connection or traceback.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import subprocess
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cairn import Cairn, Context, TaskWaiting
from cairn.cli import app as cli_app
from cairn.clock import FakeClock
from cairn.store import admin
from cairn.ui.server import DashboardServer, UIConfig, serve_in_thread

BATCH = "reviews"
FAILED = [f"{BATCH}/n=1", f"{BATCH}/n=2"]
PAGES = ["/", "/tasks", f"/task?id={FAILED[0]}", "/ops", "/stalls", "/metrics"]


class Headers(dict[str, str]):
    """Response headers by name, any case (uvicorn sends them in lower case)."""

    def __init__(self, pairs: Iterable[tuple[str, str]]) -> None:
        super().__init__((name.lower(), value) for name, value in pairs)

    def __getitem__(self, name: str) -> str:
        return super().__getitem__(name.lower())


@dataclass
class Answer:
    status: int
    headers: Headers
    body: str


@dataclass
class Dashboard:
    app: Cairn
    server: DashboardServer

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def origin(self) -> str:
        return f"http://{self.host}"

    def status_of(self, task_id: str) -> str:
        task = self.app.store.get_task(task_id)
        assert task is not None
        return task.status

    def request(
        self, method: str, path: str, headers: dict[str, str] | None = None, body: str = ""
    ) -> Answer:
        """One request through http.client; Host is ours unless ``headers`` names one."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.request(method, path, body or None, {"Host": self.host, **(headers or {})})
            got = conn.getresponse()
            return Answer(got.status, Headers(got.getheaders()), got.read().decode())
        finally:
            conn.close()

    def post(self, action: str, task_id: str, headers: dict[str, str], extra: str = "") -> Answer:
        """A retry/cancel form exactly as the page's button sends it (form secret too;
        a cancel's confirmation page adds ``confirmed=1``: ``extra``)."""
        form = f"id={task_id}&csrf={self.server.config.csrf}" + (f"&{extra}" if extra else "")
        kind = {"Content-Type": "application/x-www-form-urlencoded"}
        return self.request("POST", f"/task/{action}", {**kind, **headers}, form)

    def raw(self, data: bytes, *, half_close: bool = False) -> Answer:
        """Send ``data`` as it is on a fresh connection; parse whatever comes back."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as sock:
            sock.sendall(data)
            if half_close:
                sock.shutdown(socket.SHUT_WR)
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
        status_line, *lines = head.decode("latin-1").split("\r\n")
        assert status_line.startswith("HTTP/1."), status_line  # a real status line
        pairs = [tuple(line.split(": ", 1)) for line in lines]
        return Answer(int(status_line.split()[1]), Headers(pairs), body.decode())  # type: ignore[arg-type]


def _start(app: Cairn, clock: FakeClock, **options: object) -> DashboardServer:
    config = UIConfig(admin(app.store), clock.now, **options)  # type: ignore[arg-type]
    return DashboardServer(("127.0.0.1", 0), config)


@pytest.fixture
def store_with_failures(app: Cairn) -> Cairn:
    """A batch of three tasks of which two failed, so there is something to retry."""

    @app.task(name="review")
    def review(ctx: Context, n: int) -> int:
        def check() -> int:
            if n > 0:
                raise ValueError(f"bad {n}")
            return n

        return int(ctx.step("check", check))

    app.run_batch(BATCH, review, [{"n": n} for n in range(3)], progress=False)
    return app


def _served(app: Cairn, clock: FakeClock, **options: object) -> Iterator[Dashboard]:
    server = _start(app, clock, **options)
    thread = serve_in_thread(server)
    try:
        yield Dashboard(app, server)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def dash(store_with_failures: Cairn, clock: FakeClock) -> Iterator[Dashboard]:
    """The dashboard without a token, as ``cairn ui`` serves it by default."""
    yield from _served(store_with_failures, clock, allow_hosts=("dash.example",))


@pytest.fixture
def locked(store_with_failures: Cairn, clock: FakeClock) -> Iterator[Dashboard]:
    """The dashboard with a token."""
    yield from _served(store_with_failures, clock, token="s3cret-token")  # noqa: S106


@pytest.fixture(autouse=True)
def no_traceback(capsys: pytest.CaptureFixture[str]) -> Iterator[None]:
    """Nothing the server's threads do in these tests may print a traceback."""
    yield
    assert "Traceback" not in capsys.readouterr().err


def test_foreign_host_is_refused_on_get_and_post(dash: Dashboard) -> None:
    """``Host: evil.example`` (a rebinding page) gets 421 with a plain-text reason on
    every page and on a POST with a valid form secret, and the POST does nothing."""
    for path in PAGES:
        got = dash.request("GET", path, {"Host": "evil.example"})
        assert got.status == 421, path
        assert got.headers["Content-Type"].startswith("text/plain")
        assert "<" not in got.body
        assert BATCH not in got.body
    evil = {"Host": f"evil.example:{dash.port}", "Origin": f"http://evil.example:{dash.port}"}
    assert dash.post("retry", FAILED[0], evil).status == 421
    assert dash.status_of(FAILED[0]) == "failed"


def test_missing_or_repeated_host_is_refused(dash: Dashboard) -> None:
    """A request without a Host is refused by the Host check (421); one with two
    is refused already by the HTTP parser (h11: 400, with the security headers);
    neither is answered with the page."""
    assert dash.raw(b"GET / HTTP/1.0\r\n\r\n").status == 421
    two = f"GET / HTTP/1.0\r\nHost: {dash.host}\r\nHost: evil.example\r\n\r\n"
    got = dash.raw(two.encode())
    assert got.status == 400
    assert BATCH not in got.body
    _check_headers(got, "two Host headers")


def test_the_names_it_was_bound_for_are_answered(dash: Dashboard) -> None:
    """127.0.0.1, localhost and [::1] at the port, any case, and an --allow-host
    name bare or at the port; the same name at another port is refused."""
    port = dash.port
    for host in (
        f"127.0.0.1:{port}",
        f"LocalHost:{port}",
        f"[::1]:{port}",
        "dash.example",
        f"dash.example:{port}",
    ):
        got = dash.request("GET", "/", {"Host": host})
        assert got.status == 200, host
        assert BATCH in got.body
    for host in (f"dash.example:{port + 1}", f"127.0.0.1:{port + 1}", "localhost", "127.0.0.1"):
        assert dash.request("GET", "/", {"Host": host}).status == 421, host


def test_cross_origin_posts_are_refused(dash: Dashboard) -> None:
    """A POST whose Origin, or lacking one whose Referer, is another site's (or
    absent, or ``null``) is refused with 403 even with the form secret; the
    task is left failed."""
    for headers in (
        {"Origin": "http://evil.example"},
        {"Origin": f"http://evil.example:{dash.port}"},
        {"Origin": f"http://localhost:{dash.port}"},  # allowed Host, other origin
        {"Origin": "null"},
        {"Referer": f"http://evil.example/{dash.host}/task"},
        {},
    ):
        got = dash.post("retry", FAILED[0], headers)
        assert got.status == 403, headers
        assert "cross-origin" in got.body
    assert dash.status_of(FAILED[0]) == "failed"


def test_same_origin_posts_work_and_still_need_the_form_secret(dash: Dashboard) -> None:
    """With its own Origin (or, lacking one, its own Referer) the Retry button
    works; without the page's form secret a same-origin POST is still refused."""
    forged = dash.request(
        "POST",
        "/task/retry",
        {"Origin": dash.origin, "Content-Type": "application/x-www-form-urlencoded"},
        f"id={FAILED[0]}&csrf=guess",
    )
    assert forged.status == 403
    assert dash.status_of(FAILED[0]) == "failed"
    assert dash.post("retry", FAILED[0], {"Origin": dash.origin}).status == 303
    assert dash.status_of(FAILED[0]) == "pending"
    referer = {"Referer": f"{dash.origin}/task?id={FAILED[1]}"}
    assert dash.post("retry", FAILED[1], referer).status == 303
    assert dash.status_of(FAILED[1]) == "pending"


def _check_headers(got: Answer, where: str) -> None:
    csp = got.headers["Content-Security-Policy"]
    assert "default-src 'none'" in csp, where
    assert "frame-ancestors 'none'" in csp, where
    assert "unsafe" not in csp, where
    assert got.headers["X-Content-Type-Options"] == "nosniff", where
    assert got.headers["Referrer-Policy"] == "same-origin", where
    assert got.headers["X-Frame-Options"] == "DENY", where


def test_every_answer_carries_the_security_headers(dash: Dashboard) -> None:
    """Every page, the 404, the favicon, each refusal and the stdlib's own 400 and
    501 carry the CSP, nosniff, Referrer-Policy and X-Frame-Options."""
    for path in [*PAGES, "/nope", "/favicon.ico", "/task?id=none"]:
        _check_headers(dash.request("GET", path), path)
    _check_headers(dash.request("GET", "/", {"Host": "evil.example"}), "421")
    _check_headers(dash.post("retry", FAILED[0], {}), "403")
    _check_headers(dash.raw(b"GARBAGE\r\n\r\n"), "400 request line")
    _check_headers(dash.request("PUT", "/", body="x"), "501")


def test_the_csp_allows_only_the_dashboards_own_files(dash: Dashboard) -> None:
    """The CSP lets scripts and styles come only from the dashboard itself
    (``'self'``), and no page has an inline script, ``<style>`` or ``style=``
    attribute, which it would block; the files the pages name are served, as
    JavaScript and CSS, with nosniff."""
    for path in PAGES:
        got = dash.request("GET", path)
        csp = got.headers["Content-Security-Policy"]
        assert "script-src 'self';" in csp
        assert "style-src 'self';" in csp
        assert "<style" not in got.body, path
        assert " style=" not in got.body, path
        scripts = re.findall(r"<script([^>]*)>(.*?)</script>", got.body, re.DOTALL)
        assert scripts, path
        assert all('src="/static/' in attrs and not inline for attrs, inline in scripts), path
    for name, kind in (("htmx.min.js", "javascript"), ("dashboard.js", "javascript")):
        got = dash.request("GET", f"/static/{name}")
        assert got.status == 200
        assert kind in got.headers["Content-Type"]
        assert got.headers["X-Content-Type-Options"] == "nosniff"
    css = dash.request("GET", "/static/dashboard.css")
    assert css.status == 200
    assert css.headers["Content-Type"].startswith("text/css")


def test_no_page_lets_htmx_evaluate_code(dash: Dashboard) -> None:
    """The vendored htmx can evaluate text as code (``hx-on``, ``js:`` values,
    trigger filters) and run scripts in swapped-in HTML: every page turns both
    off in its ``htmx-config``, and the CSP forbids ``eval`` and inline scripts
    besides (no ``'unsafe-eval'`` or ``'unsafe-inline'``), so a task name or an
    error text shown in a page can never become code."""
    for path in PAGES:
        got = dash.request("GET", path)
        csp = got.headers["Content-Security-Policy"]
        assert "unsafe-eval" not in csp, path
        assert "unsafe-inline" not in csp, path
        (config,) = re.findall(r'<meta name="htmx-config" content=\'([^\']*)\'>', got.body)
        settings = json.loads(config)
        assert settings["allowEval"] is False, path
        assert settings["allowScriptTags"] is False, path


def test_the_cookie_is_a_session_id_not_the_token(locked: Dashboard) -> None:
    """``?token=`` sets an HttpOnly, SameSite=Strict session cookie whose value is
    random and not the token; that cookie then lets pages load, while the token
    itself as a cookie does not; each login gets a new id."""
    assert locked.request("GET", "/").status == 401
    first = locked.request("GET", "/?token=s3cret-token")
    assert first.status == 200
    cookie = first.headers["Set-Cookie"]
    assert "s3cret-token" not in cookie
    assert "HttpOnly" in cookie
    assert "SameSite=Strict" in cookie
    assert "Path=/" in cookie
    name, _, rest = cookie.partition("=")
    session = rest.split(";")[0]
    assert name == "cairn_session"
    assert len(session) >= 32
    assert locked.request("GET", "/tasks", {"Cookie": f"cairn_session={session}"}).status == 200
    for forged in ("cairn_session=s3cret-token", "cairn_token=s3cret-token", "cairn_session="):
        assert locked.request("GET", "/tasks", {"Cookie": forged}).status == 401, forged
    again = locked.request("GET", "/?token=s3cret-token").headers["Set-Cookie"]
    assert again.split(";")[0] != cookie.split(";")[0]


def test_a_non_ascii_token_is_refused_not_crashed(locked: Dashboard) -> None:
    """A non-ASCII token in the query, the Authorization header or the cookie gets
    401 (no traceback, checked by the autouse fixture), and the server answers on."""
    assert locked.request("GET", "/?token=%C3%A9t%C3%A9").status == 401
    assert locked.request("GET", "/?token=%FF").status == 401
    host = locked.host.encode()
    for header in (b"Authorization: Bearer \xe9t\xe9", b"Cookie: cairn_session=\xe9; \xff=1"):
        got = locked.raw(b"GET / HTTP/1.0\r\nHost: " + host + b"\r\n" + header + b"\r\n\r\n")
        assert got.status == 401, header
    bearer = {"Authorization": "Bearer s3cret-token"}
    assert locked.request("GET", "/", bearer).status == 200


def _post_head(dash: Dashboard, *lines: str) -> bytes:
    head = [
        "POST /task/retry HTTP/1.0",
        f"Host: {dash.host}",
        f"Origin: {dash.origin}",
        "Content-Type: application/x-www-form-urlencoded",
        *lines,
    ]
    return ("\r\n".join(head) + "\r\n\r\n").encode()


MALFORMED_LENGTHS = [
    (["Content-Length: abc"], 400),
    (["Content-Length: -5"], 400),
    (["Content-Length: +5"], 400),
    (["Content-Length: 99999999999999999999999"], 400),
    (["Content-Length: 5", "Content-Length: 6"], 400),
    (["Transfer-Encoding: chunked"], 400),
    (["Content-Length: 1000000"], 413),
]


@pytest.mark.parametrize(("lines", "status"), MALFORMED_LENGTHS)
def test_a_malformed_content_length_gets_400(
    dash: Dashboard, lines: list[str], status: int
) -> None:
    """A bad, negative, signed, huge, repeated or missing-for-chunked
    Content-Length is answered with a short reason, and the next request works."""
    got = dash.raw(_post_head(dash, *lines))
    assert got.status == status
    assert got.headers["Content-Type"].startswith("text/plain")
    assert got.body.strip()
    assert dash.request("GET", "/").status == 200
    assert dash.status_of(FAILED[0]) == "failed"


@pytest.mark.parametrize(
    "body",
    [
        "id=caf\u00e9&csrf=x".encode(),  # not ASCII
        b"id=%FF%FE&csrf=x",  # ASCII, but not UTF-8 once decoded
        b"&".join(b"f%d=1" % n for n in range(100)),  # more fields than any form
    ],
)
def test_a_malformed_form_body_gets_400(dash: Dashboard, body: bytes) -> None:
    """A form body that is not ASCII, does not decode as UTF-8, or has far more
    fields than a form is refused with 400; the server answers on."""
    got = dash.raw(_post_head(dash, f"Content-Length: {len(body)}") + body)
    assert got.status == 400
    assert "malformed form body" in got.body
    assert dash.request("GET", "/").status == 200


def test_a_body_shorter_than_its_length_gets_400(dash: Dashboard) -> None:
    """A client that promises 50 bytes, sends 5 and closes its side is answered."""
    got = dash.raw(_post_head(dash, "Content-Length: 50") + b"id=ab", half_close=True)
    assert got.status == 400
    assert "shorter" in got.body


@pytest.mark.parametrize(
    ("line", "status"),
    [
        (b"GARBAGE", 400),
        (b"GET / HTTP/x.y", 400),
        (b"GET /", 400),  # HTTP/0.9
        (b"GET / HTTP/1.0 extra words", 400),
        (b"\xff\xfe / HTTP/1.0", 400),  # not a method at all
    ],
)
def test_a_malformed_request_line_gets_400(dash: Dashboard, line: bytes, status: int) -> None:
    """A request line the server cannot read (HTTP/0.9 included, which could carry
    no headers) gets a proper HTTP/1.x answer with a reason and the security
    headers; the server answers on."""
    got = dash.raw(line + b"\r\nHost: " + dash.host.encode() + b"\r\n\r\n")
    assert got.status == status
    assert got.body.strip()
    _check_headers(got, repr(line))
    assert dash.request("GET", "/").status == 200


def test_cairn_ui_allow_host_option(store_with_failures: Cairn, db_path: Path) -> None:
    """``cairn ui --allow-host`` (repeatable) adds names to the ones answered; any
    other Host is still refused."""
    command = [sys.executable, "-c", "from cairn.cli import main; main()", "ui", "--port", "0"]
    command += ["--allow-host", "one.example", "--allow-host", "two.example:9"]
    command += ["--store", f"sqlite:///{db_path}"]
    child = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stderr is not None
        line = child.stderr.readline()
        port = int(re.findall(r"http://127\.0\.0\.1:(\d+)/", line)[0])

        def status(host: str) -> int:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", "/", headers={"Host": host})
            got = conn.getresponse().status
            conn.close()
            return got

        assert status(f"one.example:{port}") == 200
        assert status("two.example:9") == 200
        assert status(f"two.example:{port}") == 421
        assert status("evil.example") == 421
    finally:
        child.terminate()
        child.wait(timeout=10)
        if child.stderr is not None:
            child.stderr.close()


def test_a_done_action_redirects_and_a_refused_one_says_what_the_cli_says(
    dash: Dashboard,
) -> None:
    """Retry from the dashboard answers 303 to the task's page (a reload does not
    post again) and the task is pending; a second Retry is refused with 409 and
    the very sentence ``cairn retry`` prints for the same task, because both
    stand on ``cairn.admin.actions``."""
    done = dash.post("retry", FAILED[0], {"Origin": dash.origin})
    assert done.status == 303
    assert done.headers["Location"] == "/task?id=reviews%2Fn%3D1"
    assert dash.status_of(FAILED[0]) == "pending"
    page = dash.request("GET", done.headers["Location"])
    assert page.status == 200
    assert 'id="status">pending' in page.body
    refused = dash.post("retry", FAILED[0], {"Origin": dash.origin})
    assert refused.status == 409
    sentence = (
        f"task {FAILED[0]} is pending; only failed or cancelled tasks can be retried. "
        "Nothing changed."
    )
    assert sentence in refused.body
    cli = CliRunner().invoke(cli_app, ["retry", FAILED[0], "--store", dash.app.store_url])
    assert cli.exit_code == 1
    assert sentence in " ".join(cli.output.split())
    assert dash.status_of(FAILED[0]) == "pending"


def test_every_page_sets_a_viewport_for_phones(dash: Dashboard) -> None:
    """Each page declares a device-width viewport, so a phone lays it out at its
    own width instead of a 980 px desktop page shrunk to fit."""
    for path in PAGES:
        got = dash.request("GET", path)
        assert got.status == 200, path
        assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in got.body


def test_a_waiting_task_can_be_cancelled_from_its_page(dash: Dashboard) -> None:
    """A task suspended in ``ctx.wait_for`` shows a Cancel button (the rule of
    ``cairn cancel``: pending, running or waiting), which leads to its
    confirmation page; the cancel posted from there cancels it, and one posted
    without the confirmation is refused (400) and changes nothing."""

    @dash.app.task(name="approve")
    def approve(ctx: Context) -> str:
        return str(ctx.wait_for("approval").payload)

    with pytest.raises(TaskWaiting):
        dash.app.run(approve, task_id="approve/1")
    page = dash.request("GET", "/task?id=approve%2F1")
    assert 'id="cancel"' in page.body
    confirm = dash.request("GET", "/confirm?action=cancel&id=approve%2F1")
    assert 'action="/task/cancel"' in confirm.body
    assert 'name="confirmed" value="1"' in confirm.body
    unconfirmed = dash.post("cancel", "approve/1", {"Origin": dash.origin})
    assert unconfirmed.status == 400
    assert dash.status_of("approve/1") == "waiting"
    done = dash.post("cancel", "approve/1", {"Origin": dash.origin}, extra="confirmed=1")
    assert done.status == 303
    assert dash.status_of("approve/1") == "cancelled"


def test_a_body_that_never_arrives_gets_408(
    dash: Dashboard, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A POST that promises a body and then sends nothing (the connection left
    open) is answered 408 once the body timeout passes; the task is unchanged."""
    from cairn.ui import middleware

    monkeypatch.setattr(middleware, "BODY_TIMEOUT", 0.3)
    got = dash.raw(_post_head(dash, "Content-Length: 50") + b"id=ab")
    assert got.status == 408
    assert "not received in time" in got.body
    _check_headers(got, "408")
    assert dash.status_of(FAILED[0]) == "failed"
