"""The s3:// blob store against a real S3-compatible server on 127.0.0.1 (moto's
standalone server, started here; no network)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from cairn import Cairn, Context, TaskFailed
from cairn.blobs import is_ref, open_blobs, parse_ref
from cairn.blobs.s3 import S3BlobStore
from cairn.clock import FakeClock
from cairn.store import admin

moto_server = pytest.importorskip("moto.server")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def s3_endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A moto S3 server on a free local port, with dummy credentials, and a bucket."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    port = _free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    import boto3

    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="cairn-blobs")
    yield endpoint
    server.stop()


def test_a_large_step_output_goes_to_s3_and_replays_from_there(
    tmp_path: Path, clock: FakeClock, s3_endpoint: str
) -> None:
    """With blobs="s3://bucket/prefix?endpoint_url=…", a 2 MB step output is stored as
    an object under its sha256, the record holds its s3:// URI, and the recorded
    result of the task comes back from S3 whole."""
    url = f"s3://cairn-blobs/runs?endpoint_url={s3_endpoint}"
    db = f"sqlite:///{tmp_path / 'cairn.db'}"
    with Cairn(db, clock=clock, blobs=url) as app:

        @app.task
        def big(ctx: Context) -> str:
            return ctx.step("blob", lambda: "s" * 2_000_000)

        assert app.run(big, task_id="b") == "s" * 2_000_000
        output = app.store.load_history("b")[1].output
    assert output is not None
    assert is_ref(output)
    ref = parse_ref(output)
    assert ref.uri == f"s3://cairn-blobs/runs/{ref.sha256[:2]}/{ref.sha256}"
    store = open_blobs(url)
    assert isinstance(store, S3BlobStore)
    assert [b.sha256 for b in store.blobs()] == [ref.sha256]
    with Cairn(db, clock=clock, blobs=url) as again:
        again.task(name="big")(lambda ctx: "never called")
        assert again.run(again.registered("big"), task_id="b") == "s" * 2_000_000


def test_a_corrupt_s3_object_is_detected(
    tmp_path: Path, clock: FakeClock, s3_endpoint: str
) -> None:
    """An S3 object overwritten with other bytes fails the replay with BlobCorrupt,
    naming the task and the s3:// URI."""
    url = f"s3://cairn-blobs?endpoint_url={s3_endpoint}"
    db = f"sqlite:///{tmp_path / 'cairn.db'}"
    with Cairn(db, clock=clock, blobs=url, inline_limit=100) as app:

        @app.task
        def big(ctx: Context) -> int:
            text: str = ctx.step("blob", lambda: "x" * 500)
            ctx.step("boom", lambda: 1 / 0)
            return len(text)

        with pytest.raises(TaskFailed):
            app.run(big, task_id="c")
        ref = parse_ref(app.store.load_history("c")[1].output or "")
        store = open_blobs(url)
        assert isinstance(store, S3BlobStore)
        store._call("put_object", Bucket="cairn-blobs", Key=store._key(ref.sha256), Body=b"y")
        admin(app.store).retry_task("c", clock.now())
        with pytest.raises(TaskFailed) as failed:
            app.run(big, task_id="c")
    assert "BlobCorrupt" in str(failed.value)
    assert ref.uri in str(failed.value)
    assert "'c'" in str(failed.value)
