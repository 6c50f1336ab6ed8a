"""cairn.redaction: every form of a known secret, and credential shapes, removed.

The integration test (tests/integration/test_secrets_never_stored.py) drives
the SDKs end to end; these check the rules one by one, including that the
environment rule covers every credential variable the installed SDKs read.
"""

from __future__ import annotations

import json
import re
from importlib.util import find_spec
from pathlib import Path
from urllib.parse import quote

import pytest

from cairn import Cairn, Context, TaskArgumentsError
from cairn.redaction import (
    REDACTED,
    credential_env_name,
    holds_secret,
    redact,
    redact_value,
    register_secret,
    secrets_of,
)
from cairn.store.admin import admin

KEY = "unit-test-key-0f1e2d3c4b5a"
# A secret with characters JSON, a repr and a URL each write otherwise.
ODD = 'pa"ss/w+rd=k\\ey?0123'


@pytest.fixture(autouse=True)
def _known() -> None:
    """The test's keys are registered secrets (registration lasts the process)."""
    register_secret(KEY, ODD)


def test_a_known_secret_is_removed_in_every_form() -> None:
    """As is, escaped inside JSON and a repr, percent-encoded, and in the
    provider's masked forms (first characters, a mask, the last four)."""
    for form in (ODD, json.dumps(ODD), repr(ODD), quote(ODD, safe="")):
        assert "0123" not in redact(f"odd <{form}> then"), form
    forms = [
        KEY,
        json.dumps(json.dumps({"k": KEY})),
        repr({"k": KEY}),
        f"{KEY[:8]}{'*' * 20}{KEY[-4:]}",
        f"{KEY[:3]}...{KEY[-4:]}",
        f"{KEY[:5]}…{KEY[-4:]}",
        f"****{KEY[-4:]}",
    ]
    for form in forms:
        text = redact(f"the key was <{form}> then")
        assert KEY[-4:] not in text, (form, text)
        assert REDACTED in text, form


def test_credential_shapes_are_removed_whatever_the_secret() -> None:
    """Unknown secrets go by their shape: sk- keys, authorization schemes (the
    scheme stays), credential-named fields in JSON, a repr, headers or keyword
    arguments, a masked value, a URL's password."""
    cases = {
        "sk-proj-AbC123xyz9Zz": REDACTED,
        "Authorization: Bearer abc.def-123456": f"Authorization: Bearer {REDACTED}",
        "Basic dXNlcjpwYXNzd29yZA==": f"Basic {REDACTED}",
        '{"api_key": "s3cr3tvalue99"}': f'{{"api_key": "{REDACTED}"}}',
        "{'x-api-key': 's3cr3tvalue99'}": f"{{'x-api-key': '{REDACTED}'}}",
        "client_secret=s3cr3tvalue99&x=1": f"client_secret={REDACTED}&x=1",
        "X-Auth-Token: s3cr3tvalue99": f"X-Auth-Token: {REDACTED}",
        '{\\"password\\": \\"s3cr3tvalue99\\"}': f'{{\\"password\\": \\"{REDACTED}\\"}}',
        "key provided: abcd1234**********9z9z.": f"key provided: {REDACTED}.",
        "postgresql://app:hunter22@db/x": f"postgresql://app:{REDACTED}@db/x",
    }
    for text, expected in cases.items():
        assert redact(text) == expected, text


def test_ordinary_text_is_left_alone() -> None:
    """Counts named like tokens, short values, prose and markdown stay as they are."""
    for text in (
        '{"max_tokens": 1024, "input_tokens": 12345, "token_type": "bearer"}',
        "the secret to a long batch is a checkpoint; password reset links",
        "**bold** and a** b and 5 * 4 ** 2",
        "see https://example.com/path?page=2",
    ):
        assert redact(text) == text


def test_values_lose_known_secrets_only() -> None:
    """A recorded value keeps credential-shaped data (it is the program's), but
    not a known secret."""
    assert redact_value(json.dumps({"token": "abcdefgh123"})) == '{"token": "abcdefgh123"}'
    assert redact_value(json.dumps({"k": KEY})) == json.dumps({"k": REDACTED})
    assert holds_secret(f"x{KEY}x")
    assert not holds_secret("nothing here")


def test_secrets_are_found_on_clients_whatever_their_layout() -> None:
    """A key attribute and credential headers, on the object or on a client,
    provider or model it holds, private or not."""

    class Http:
        def __init__(self) -> None:
            self._custom_headers = {"api-key": "header-secret-1234", "accept": "json"}
            self.api_key = "client-key-5678abcd"

    class Provider:
        def __init__(self) -> None:
            self._client = Http()

    class Model:
        def __init__(self) -> None:
            self._provider = Provider()
            self.model = "gpt-x"

    assert set(secrets_of(Model())) == {"header-secret-1234", "client-key-5678abcd"}


def test_the_environment_rule() -> None:
    """Credential variables by a part of their name; other KEY and TOKENS names not."""
    for name in ("OPENAI_API_KEY", "HF_TOKEN", "AWS_BEARER_TOKEN_BEDROCK", "DB_PASSWORD"):
        assert credential_env_name(name), name
    for name in ("SORT_KEY", "MAX_TOKENS", "TOKENIZERS_PARALLELISM", "PATH", "OPENAI_BASE_URL"):
        assert not credential_env_name(name), name


_ENV_READ = re.compile(
    r"""(?:environ(?:\.get)?|getenv|get_env)\(?\s*\[?\s*["']([A-Z][A-Z0-9_]+)["']"""
)
_CREDENTIAL_WORDS = re.compile(r"(?:^|_)(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD|APIKEY)(?:_|$)")
# Variables the SDKs read that name a key but hold none.
_NOT_CREDENTIALS = frozenset({"OPENAI_AGENTS_TRACE_INCLUDE_SENSITIVE_DATA"})


def test_every_credential_variable_the_sdks_read_is_covered() -> None:
    """Scanning the installed openai, anthropic, Agents SDK and Pydantic AI
    sources (newest or lowest, whichever CI installed; the frameworks where
    installed): each environment variable
    they read whose name carries KEY, TOKEN, SECRET or PASSWORD is one the rule
    treats as a credential (a new SDK release with a new credential variable
    turns this red)."""
    found: set[str] = set()
    # The lowest-versions pass of the plain SDKs has no framework installed.
    installed = [p for p in ("openai", "anthropic", "agents", "pydantic_ai") if find_spec(p)]
    assert "openai" in installed
    for package in installed:
        spec = find_spec(package)
        assert spec is not None
        assert spec.origin is not None, package
        for path in Path(spec.origin).parent.rglob("*.py"):
            found.update(_ENV_READ.findall(path.read_text(encoding="utf-8", errors="replace")))
    credential_like = {n for n in found if _CREDENTIAL_WORDS.search(n)} - _NOT_CREDENTIALS
    assert "OPENAI_API_KEY" in credential_like
    assert "ANTHROPIC_API_KEY" in credential_like
    missed = sorted(name for name in credential_like if not credential_env_name(name))
    assert not missed, missed


def test_a_megabyte_of_mask_characters_is_redacted_in_one_pass() -> None:
    """Runs of mask characters, a name followed by a megabyte, a megabyte of
    letters: each is searched without going back over the run (a pattern that
    did took minutes on the first of these)."""
    for text in (
        "*" * 1_000_000,
        KEY[:3] + "." * 1_000_000,
        "•" * 1_000_000 + KEY[-4:],
        "api_key=" + "z" * 1_000_000,
        "z" * 1_000_000,
    ):
        assert len(redact(text)) > 0


def test_a_task_argument_holding_a_secret_is_refused(tmp_path: Path) -> None:
    """An argument would be stored and a redacted copy would run the task wrongly:
    enqueueing it fails, naming the argument, and records nothing."""
    app = Cairn(f"sqlite:///{tmp_path / 'cairn.db'}")

    @app.task()
    def call(ctx: Context, url: str, key: str) -> None:
        pass

    with pytest.raises(TaskArgumentsError, match=r"argument 'key' holds a secret"):
        app.enqueue("b", call, [{"url": "https://x", "key": KEY}])
    app.enqueue("b", call, [{"url": "https://x", "key": "OPENAI_API_KEY"}])  # its name is fine
    assert [s.total for s in admin(app.store).batch_summaries("b")] == [1]
    app.close()
