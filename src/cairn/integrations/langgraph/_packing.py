"""What the checkpointer refuses, and the fixed dictionary its compression
starts from.

A value is serialized by the saver's ``serde`` (LangGraph's
``JsonPlusSerializer`` unless the user gives another). ``ZDICT_1`` holds the
strings every LangChain message and LangGraph checkpoint repeats (class paths,
field names): format 3 puts it in front of every row's dictionary while a
chain is short (``_chain``), and format 1 compressed each value on its own
with it (``unpack`` reads those, for the upgrade). It is part of the stored
formats: it never changes. A type tag the checkpointer does not know (a newer
cairn's, or a serializer it was not given) is refused with
``CheckpointFormatError``, never guessed at.
"""

from __future__ import annotations

import zlib
from typing import Any
from uuid import UUID

from cairn.errors import InvalidName, SchemaTooNew
from cairn.names import check_name

# LangGraph checkpoint formats this checkpointer was written for (Checkpoint["v"]:
# langgraph 1.2 writes 4). The saver stores the checkpoint dict whole, but a
# newer format may carry values it must treat differently, so it refuses one.
KNOWN_FORMATS = (1, 2, 3, 4)
_Z1 = "z1+"  # format 1: a value compressed on its own with ZDICT_1

# Serialized empty ToolMessage, SystemMessage, AIMessage and HumanMessage (the
# framing of every message), then the keys of a checkpoint and its metadata.
ZDICT_1 = (
    b"\xc7\xa9\x05\x94\xbclangchain_core.messages.tool\xabToolMessage\x89\xa7content\xa0"
    b"\xb1additional_kwargs\x80\xb1response_metadata\x80\xa4type\xa4tool\xa4name\xc0"
    b"\xa2id\xa0\xactool_call_id\xa0\xa8artifact\xc0\xa6status\xa7success"
    b"\xb3model_validate_json\xc7\x88\x05\x94\xbelangchain_core.messages.system"
    b"\xadSystemMessage\x86\xa7content\xa0\xb1additional_kwargs\x80\xb1response_metadata"
    b"\x80\xa4type\xa6system\xa4name\xc0\xa2id\xc0\xb3model_validate_json\xc7\xac\x05\x94"
    b"\xbalangchain_core.messages.ai\xa9AIMessage\x89\xa7content\xa0\xb1additional_kwargs"
    b"\x80\xb1response_metadata\x80\xa4type\xa2ai\xa4name\xc0\xa2id\xa0\xaatool_calls\x90"
    b"\xb2invalid_tool_calls\x90\xaeusage_metadata\xc0\xb3model_validate_json\xc7\x85\x05"
    b"\x94\xbdlangchain_core.messages.human\xacHumanMessage\x86\xa7content\xa0"
    b"\xb1additional_kwargs\x80\xb1response_metadata\x80\xa4type\xa5human\xa4name\xc0"
    b"\xa2id\xa0\xb3model_validate_json"
    b"\xa1v\xa2id\xa2ts\xaechannel_values\xb0channel_versions\xadversions_seen"
    b"\xb0updated_channels\xa9__start__\xaabranch:to:\xa8messages\xa6source\xa4step"
    b"\xa7parents\xa4loop\xa5input\xa6run_id\xa6update\xa4fork"
)


class CheckpointFormatError(SchemaTooNew):
    """A checkpoint, or a stored row, in a format this checkpointer does not know."""


def unpack(kind: str, data: bytes) -> tuple[str, bytes]:
    """A format 1 value as ``serde.loads_typed`` takes it: tagged ``z1+`` when
    it was compressed on its own, with ``ZDICT_1``."""
    raw = bytes(data)
    if kind.startswith(_Z1):
        kind = kind[len(_Z1) :]
        unpacker = zlib.decompressobj(-15, zdict=ZDICT_1)
        raw = unpacker.decompress(raw) + unpacker.flush()
    return kind, raw


def unknown_tag(kind: str) -> CheckpointFormatError:
    """The error for a stored value whose tag neither cairn nor the serde knows."""
    return CheckpointFormatError(
        f"a stored LangGraph value is tagged {kind!r}, which this cairn cannot "
        "read: it was written by a newer cairn, or with a serializer this saver was "
        "not given. Upgrade cairn (`pip install -U 'cairn-durable[langgraph]'`), or open the "
        "saver with the same serde= that wrote it. Nothing was changed."
    )


def check_format(checkpoint: Any, where: str) -> None:
    """Refuse a checkpoint whose format (``v``) this checkpointer was not written for."""
    version = checkpoint.get("v") if isinstance(checkpoint, dict) else None
    if version not in KNOWN_FORMATS:
        raise CheckpointFormatError(
            f"{where} is in LangGraph checkpoint format v={version!r}; this cairn knows "
            f"v={', '.join(map(str, KNOWN_FORMATS))}. It was made by a newer LangGraph "
            "than this cairn supports: upgrade cairn (`pip install -U 'cairn-durable[langgraph]'`) "
            "or pin langgraph-checkpoint to the version you used before. Nothing was "
            "written or changed."
        )


def check_ids(thread_id: Any, namespace: Any) -> tuple[str, str]:
    """The thread id and checkpoint namespace, if every store can hold them (an
    int or UUID thread id is taken as its text, as LangGraph's savers do)."""
    if thread_id is None:
        raise InvalidName(
            "the config names no thread: LangGraph's checkpointers need "
            "config={'configurable': {'thread_id': ...}} on invoke, stream and get_state. "
            "Nothing was written.",
            kind="LangGraph thread_id",
            value="",
        )
    if isinstance(thread_id, int | UUID):
        thread_id = str(thread_id)
    check_name("LangGraph thread_id", thread_id)
    check_name("LangGraph checkpoint_ns", namespace, empty_ok=True)
    return thread_id, namespace


def check_text(kind: str, value: Any) -> str:
    """Another name the checkpointer keys rows by (a task id, a channel)."""
    return check_name(kind, value, empty_ok=True)
