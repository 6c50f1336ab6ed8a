"""Secrets kept out of everything cairn stores or emits, by construction.

A model SDK's error may echo the API key: in its message, in a nested JSON
body, in a Python repr of the response, in headers it quotes, or as the
provider's own masked form (``sk-proj-****…abcd``: the first characters and
the last four). How it does so changes from one SDK release to the next, so
cairn does not rely on any one layout. Every text cairn writes passes through
this module on its way out:

* ``redact(text)``: everything cairn writes *about* what happened: the
  recorded error of a task, step or operation (message and traceback,
  ``cairn.engine.errortext``), its log lines (``cairn.observe.logs``), its
  spans (``cairn.observe.otel``, ``cairn.observe.live``), its alerts
  (``cairn.observe.notifiers``) and the error columns of an export. It
  removes every known secret (below) in each form it can take (as given, as
  escaped inside JSON or a repr, percent-encoded, and masked), then whatever
  has the shape of a credential: ``sk-…`` keys, ``Bearer``/``Basic`` values,
  the value of any field or header named like a credential (``api_key``,
  ``x-api-key``, ``Authorization``, ``token``, ``secret``, ``password``…), a
  masked credential (``key-ab****cdef``), and the password of a URL.
* ``redact_value(text)``: the encoded values cairn records (step and
  operation results, model calls, messages, signals). Only known secrets are
  replaced there: a value is the program's data, and a shape alone (a field
  named ``token``) is no reason to change it. A value that held a known secret
  is recorded with ``[redacted]`` in its place, and a replay returns that.

The known secrets are:

* the credentials of every model client cairn wraps or is handed
  (``register_from``: ``ctx.llm``'s providers, the Agents SDK's and Pydantic
  AI's models), found by looking for a key attribute and credential headers
  on the object and on the clients it holds, whatever the SDK calls them;
* the credentials of a failing request, where the SDK's error still holds it;
* the values of credential-named environment variables, which is where the
  SDKs read theirs: a name with a part ``TOKEN``, ``SECRET``, ``PASSWORD`` or
  a key of a credential kind (``OPENAI_API_KEY``, ``OPENAI_ADMIN_KEY``,
  ``ANTHROPIC_AUTH_TOKEN``, ``AWS_SECRET_ACCESS_KEY``,
  ``AWS_BEARER_TOKEN_BEDROCK``, ``HF_TOKEN``; not any ``KEY``: ``SORT_KEY`` is
  no secret). ``credential_env_name`` is the rule; a test checks it covers
  every such variable the installed SDKs read;
* the secrets the program registers: ``Cairn(secrets=[...])`` or
  ``cairn.register_secret(value)``.

They are kept in this process only, never written anywhere. A secret shorter
than ``MIN_SECRET`` characters is not redacted by value (it would blank
common words).
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any, TypeGuard
from urllib.parse import quote, urlsplit, urlunsplit

__all__ = [
    "MIN_SECRET",
    "REDACTED",
    "credential_env_name",
    "header_secrets",
    "holds_secret",
    "known_secrets",
    "read_environment",
    "redact",
    "redact_value",
    "redacted_error",
    "register_from",
    "register_secret",
    "secrets_of",
    "shown_url",
]

REDACTED = "[redacted]"
"""What a secret is replaced with."""

MIN_SECRET = 8
"""The shortest text redacted by value."""

# An environment variable holds a credential when a part of its name (between
# underscores) says so: a token, a secret, a password, or a key of a credential
# kind (API, admin, access, signing...: not any "KEY": SORT_KEY=created_at is
# no secret). AWS_BEARER_TOKEN_BEDROCK is one; MAX_TOKENS is not.
_CREDENTIAL_ENV = re.compile(
    r"(?:^|_)(?:TOKEN|SECRET|PASSWORD|PASSWD|APIKEY|"
    r"(?:API|ADMIN|ACCESS|SECRET|PRIVATE|SIGNING|ENCRYPTION|INFERENCE|ENVIRONMENT|AUTH|"
    r"MASTER|LICENSE|SERVICE|CLIENT|SUBSCRIPTION)_?KEY)(?:_|$)"
)
# How often the environment is read again (it rarely changes while a program runs).
_ENV_REFRESH_SECONDS = 1.0
# Mask characters providers show in place of a key's middle: each run matched
# from its start and never backtracked into (possessive), so that a long run of
# them costs one pass, not one per position.
_MASK = r"(?:(?<!\*)\*{2,256}+|(?<!•)•{2,256}+|…|(?<!\.)\.{3,256}+)"
# Characters a masked key's visible parts are made of.
_KEYCHARS = r"[^\s\"'<>,;:(){}\[\]]"
# A credential-looking name: of a JSON field, a keyword argument, a header.
_CREDENTIAL_NAME = (
    r"(?<![A-Za-z0-9_\-])[A-Za-z0-9_\-]{0,40}?(?:api[_\-]?key|apikey|auth(?:orization)?|token|"
    r"secret|password|passwd|credential|cookie|session[_\-]?id|private[_\-]?key|access[_\-]?key)"
    r"[A-Za-z0-9_\-]{0,40}"
)
_SHAPES: tuple[tuple[re.Pattern[str], str], ...] = (
    # OpenAI keys (sk-…, sk-proj-…, sk-svcacct-…), Anthropic's (sk-ant-…), masked too.
    (re.compile(r"\bsk-[A-Za-z0-9_\-*•…]{6,}"), REDACTED),
    # HTTP authorization schemes: the scheme stays, its credential goes.
    (
        re.compile(r"\b(Bearer|Basic|Token)\s+[A-Za-z0-9._~+/=\-*]{6,}", re.IGNORECASE),
        rf"\1 {REDACTED}",
    ),
    # "api_key": "…", 'x-api-key': '…', api_key=…, Authorization: … (JSON, repr,
    # headers, keyword arguments; quotes possibly escaped inside a JSON string).
    (
        re.compile(
            rf"(?P<name>\\?[\"']?{_CREDENTIAL_NAME}\\?[\"']?\s*[:=]\s*\\?[\"']?)"
            rf"(?!{re.escape(REDACTED)})(?![0-9.]+\b)(?P<value>[^\s\"'\\,;&}}\])]{{{MIN_SECRET},}})",
            re.IGNORECASE,
        ),
        rf"\g<name>{REDACTED}",
    ),
    # A masked credential whose secret is not known here: a few visible
    # characters, a run of mask characters, maybe a few more (key-ab****cdef).
    (
        re.compile(
            r"(?<![A-Za-z0-9_\-])[A-Za-z0-9_\-]{2,24}(?:(?<!\*)\*{4,256}+|(?<!•)•{4,256}+)"
            r"[A-Za-z0-9_\-]{0,24}"
        ),
        REDACTED,
    ),
    # scheme://user:password@host
    (
        re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s/:@]+:)[^\s/@]+@"),
        rf"\g<head>{REDACTED}@",
    ),
)

# A secret this long or longer is also looked for in its masked forms.
_MASKED_MIN = 12

_lock = threading.RLock()
_registered: set[str] = set()
_environment: frozenset[str] = frozenset()
_environment_read = -_ENV_REFRESH_SECONDS
_pattern: re.Pattern[str] | None = None
_pattern_of: frozenset[str] = frozenset()


def credential_env_name(name: str) -> bool:
    """Whether an environment variable of this name holds a credential."""
    return _CREDENTIAL_ENV.search(name.upper()) is not None


def register_secret(*values: str | None) -> None:
    """Keep these values out of everything cairn stores or emits, from now on,
    in this process (see the module doc). Values shorter than ``MIN_SECRET``
    characters are ignored."""
    found = {value for value in values if _usable(value)}
    if found - _registered:
        with _lock:
            _registered.update(found)
        _refresh_pattern()


def register_from(source: Any) -> None:
    """Register the credentials of a model client, or of an object holding one
    (``secrets_of``)."""
    register_secret(*secrets_of(source))


def secrets_of(source: Any, depth: int = 3) -> tuple[str, ...]:
    """The credentials ``source`` holds: a key attribute and credential-named
    headers, on it and on the clients, providers and models it holds, ``depth``
    levels down. Found by name, not by one SDK's layout."""
    return tuple(dict.fromkeys(_walk(source, depth, set())))


def known_secrets() -> frozenset[str]:
    """The secrets redaction removes now: registered ones and those of the
    environment (read again if it is time)."""
    read_environment()
    return _pattern_of


def redact(text: str, extra: Iterable[str | None] = ()) -> str:
    """``text`` without any known secret (nor ``extra``), in any of its forms,
    nor anything shaped like a credential (see the module doc)."""
    read_environment()
    pattern = _pattern
    more = frozenset(value for value in extra if _usable(value)) - _pattern_of
    if more:
        # Secrets known to this call only (a failing request's headers).
        pattern = _compiled(_pattern_of | more)
    if pattern is not None:
        text = pattern.sub(REDACTED, text)
    for shape, replacement in _SHAPES:
        text = shape.sub(replacement, text)
    return text


def holds_secret(text: str) -> bool:
    """Whether ``text`` holds a known secret (registered or of the environment)."""
    read_environment()
    pattern = _pattern
    return pattern is not None and pattern.search(text) is not None


def shown_url(url: str) -> str:
    """``url`` with its password, if any, replaced by ``***``: how cairn names a
    store or endpoint in a message (the one rule for every such message)."""
    parts = urlsplit(url)
    try:
        password = parts.password
    except ValueError:
        return url
    if password is None:
        return url
    netloc = parts.netloc.replace(f":{password}@", ":***@")
    return urlunsplit(parts._replace(netloc=netloc))


def redacted_error(error: BaseException) -> BaseException:
    """An exception of ``error``'s type whose arguments are redacted and which
    carries none of its attributes (an SDK error's request and response): what
    an integration stores where a framework hands it the error itself (a
    LangGraph node's error, kept as a pending write)."""
    args = tuple(redact(a) if isinstance(a, str) else a for a in error.args)
    try:
        bare = BaseException.__new__(type(error))  # no __init__: nothing of it comes along
        bare.args = args
    except Exception:  # noqa: BLE001 - a type that cannot be made bare
        return RuntimeError(redact(f"{type(error).__qualname__}: {error}"))
    return bare


def redact_value(text: str) -> str:
    """An encoded value without any known secret (see the module doc). Costs
    one pattern search when secrets are known, nothing when none are."""
    pattern = _pattern
    if pattern is None or not text:
        return text
    return pattern.sub(REDACTED, text) if pattern.search(text) else text


# -- finding secrets on clients -------------------------------------------------------------

# Attributes that hold a credential, and attributes that lead to an object holding one.
_KEY_ATTRIBUTES = ("api_key", "_api_key", "auth_token", "_auth_token", "token", "bearer_token")
_HEADER_ATTRIBUTES = ("default_headers", "_custom_headers", "custom_headers", "headers")
_INNER_ATTRIBUTES = (
    "client",
    "_client",
    "openai_client",
    "_openai_client",
    "provider",
    "_provider",
    "model",
    "_model",
    "inner",
    "wrapped",
)
_SECRET_HEADER = re.compile(r"auth|key|token|secret|password|cookie", re.IGNORECASE)


def _walk(source: Any, depth: int, seen: set[int]) -> Iterator[str]:
    if source is None or depth < 0 or id(source) in seen or isinstance(source, str | bytes):
        return
    seen.add(id(source))
    for name in _KEY_ATTRIBUTES:
        value = _attribute(source, name)
        if _usable(value):
            yield value
    for name in _HEADER_ATTRIBUTES:
        yield from header_secrets(_attribute(source, name))
    for name in _INNER_ATTRIBUTES:
        yield from _walk(_attribute(source, name), depth - 1, seen)


def header_secrets(headers: Any) -> Iterator[str]:
    """The values of the credential-named headers in ``headers`` (a mapping or
    an HTTP library's headers), and a ``Bearer`` value's token alone."""
    items = getattr(headers, "items", None)
    if not callable(items):
        return
    try:
        pairs = list(items())
    except Exception:  # noqa: BLE001 - an object whose items() is not a mapping's
        return
    for name, value in pairs:
        if isinstance(name, str) and isinstance(value, str) and _SECRET_HEADER.search(name):
            _, _, token = value.partition(" ")
            for candidate in (value, token.strip()):
                if _usable(candidate):
                    yield candidate


def _attribute(source: Any, name: str) -> Any:
    """``source.name`` if it is plain data: never a property that may do I/O."""
    try:
        held = vars(source)
    except TypeError:
        held = {}
    if name in held:
        return held[name]
    slot = getattr(type(source), name, None)
    if slot is not None and type(slot).__name__ == "member_descriptor":
        return getattr(source, name, None)
    return None


# -- the pattern of the known secrets ---------------------------------------------------------


def _usable(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and len(value) >= MIN_SECRET and not value.isspace()


def read_environment(*, now: bool = False) -> None:
    """Read the credential-named environment variables again (at most once a
    ``_ENV_REFRESH_SECONDS`` unless ``now``): ``Cairn()`` does, and so does
    every ``redact``."""
    global _environment, _environment_read
    moment = time.monotonic()
    if not now and moment - _environment_read < _ENV_REFRESH_SECONDS:
        return
    found = frozenset(
        value
        for name, value in os.environ.items()
        if credential_env_name(name) and _usable(value) and not any(c.isspace() for c in value)
    )
    with _lock:
        _environment, _environment_read = found, moment
    _refresh_pattern()


def _forms(secret: str) -> Iterator[str]:
    """The ways ``secret`` can appear in text, as patterns: as is, escaped in
    JSON or in a Python repr, percent-encoded, and masked by a provider (some
    first characters, a mask, the last four; or a mask and the last four)."""
    yield re.escape(secret)
    for form in (json.dumps(secret)[1:-1], repr(secret)[1:-1], quote(secret, safe="")):
        if form != secret:
            yield re.escape(form)
    if len(secret) >= _MASKED_MIN:
        head, tail = re.escape(secret[:3]), re.escape(secret[-4:])
        yield rf"{head}{_KEYCHARS}{{0,16}}?{_MASK}{_KEYCHARS}{{0,16}}?{tail}"
        yield rf"(?:(?<!\*)\*{{3,256}}+|(?<!•)•{{3,256}}+){tail}"


def _compiled(secrets: frozenset[str]) -> re.Pattern[str] | None:
    """One pattern for every form of ``secrets``; longest first, so that a
    secret containing another is replaced whole."""
    ordered = sorted(secrets, key=len, reverse=True)
    forms = [form for secret in ordered for form in _forms(secret)]
    return re.compile("|".join(forms)) if forms else None


def _refresh_pattern() -> None:
    """Build the pattern of the registered and environment secrets again if
    they changed (what ``redact_value`` and ``redact`` use)."""
    global _pattern, _pattern_of
    with _lock:
        secrets = frozenset({*_registered, *_environment})
        if secrets != _pattern_of:
            _pattern, _pattern_of = _compiled(secrets), secrets
