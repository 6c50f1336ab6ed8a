"""How a message's content is stored (cairn.store.sql.pack_content): every
message reads back as the JSON text written, and rows written by earlier
versions, in the forms they used, still read."""

from __future__ import annotations

import json
import zlib

from hypothesis import given
from hypothesis import strategies as st

from cairn.store.sql import pack_content, unpack_content, unpack_message


def compact(message: object) -> str:
    return json.dumps(message, ensure_ascii=False, separators=(",", ":"))


texts = st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=1500)
messages = st.one_of(
    st.builds(
        lambda r, t: {"role": r, "content": t},
        st.sampled_from(["user", "assistant", "system", "tool"]),
        texts,
    ),
    st.builds(lambda t: {"role": "tool", "tool_call_id": "c1", "content": t}, texts),
    st.builds(lambda t: {"content": t, "role": "user"}, texts),
    st.builds(lambda t: {"role": "user", "content": [{"type": "text", "text": t}]}, texts),
)


@given(messages)
def test_any_message_reads_back_as_its_text_and_as_itself(message: dict[str, object]) -> None:
    """A message of any shape and text (escapes, non-ASCII, long or short) reads
    back as the exact JSON text stored and, parsed, as the same message."""
    text = compact(message)
    stored = pack_content(text)
    assert unpack_content(stored) == text
    assert unpack_message(stored) == message
    assert unpack_message(memoryview(stored)) == message  # as psycopg may hand bytea


def test_a_plain_message_is_stored_as_its_text_alone() -> None:
    """{"role": "user", "content": text} is stored as b"u" + the text: no JSON
    envelope; a long one compressed under b"U"; any other shape as its JSON."""
    assert pack_content(compact({"role": "user", "content": "hi"})) == b"uhi"
    assert pack_content(compact({"role": "assistant", "content": "ok"})) == b"aok"
    long = compact({"role": "system", "content": "the same words again " * 100})
    assert pack_content(long)[:1] == b"S"
    tool = compact({"role": "tool", "tool_call_id": "c", "content": "x"})
    assert pack_content(tool) == b"j" + tool.encode()


def test_json_that_is_not_the_compact_form_is_kept_as_written() -> None:
    """A plain message whose JSON has spaces or \\u escapes (an older writer, an
    import) is kept as its JSON, so it reads back byte for byte."""
    for text in ('{"role": "user", "content": "x"}', '{"role":"user","content":"\\u00e9"}'):
        assert pack_content(text)[:1] == b"j"
        assert unpack_content(pack_content(text)) == text


def test_rows_in_the_forms_earlier_versions_wrote_still_read() -> None:
    """Earlier versions compressed JSON from 256 bytes on (b"z") and stored the
    rest as b"j" + JSON: both read back as the text and as the message."""
    message = {"role": "user", "content": "the quarterly figures moved again, " * 10}
    text = compact(message)
    for stored in (b"z" + zlib.compress(text.encode(), 6), b"j" + text.encode()):
        assert unpack_content(stored) == text
        assert unpack_message(stored) == message


def test_a_blob_reference_is_kept_as_its_text() -> None:
    """A message offloaded to the blob store is stored as its reference text and
    comes back as that text, for cairn.agent.message_blobs to read."""
    reference = "!blob:file:///tmp/blobs/ab/cd#sha256=abcd"
    assert pack_content(reference) == reference.encode()
    assert unpack_content(reference.encode()) == reference
    assert unpack_message(reference.encode()) == reference
