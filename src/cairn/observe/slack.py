"""Slack's message format: escaped text and Block Kit blocks.

Slack reads ``&``, ``<`` and ``>`` in message text as markup: ``<!channel>``
pings a channel, ``<https://x|label>`` makes a link. Every piece of text cairn
did not write itself (task ids, batch names, error messages) is escaped with
``escape`` before it goes into a message, so a task id containing ``<!channel>``
shows as those characters and pings nobody.

``payload`` builds ``{"text", "blocks"}``: ``text`` is the notification
fallback, ``blocks`` a header, the text in sections (Slack takes at most 3,000
characters a section and 50 blocks a message) and, when there is one, a link to
the dashboard. Mattermost and Rocket.Chat read ``text`` and ignore ``blocks``.
"""

from __future__ import annotations

from typing import Any

HEADER_LIMIT = 150
SECTION_LIMIT = 3000
BLOCK_LIMIT = 50


def escape(text: str) -> str:
    """``text`` with Slack's three control characters escaped."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _sections(text: str) -> list[str]:
    """``text`` (already escaped) cut at line ends into pieces Slack accepts."""
    pieces: list[str] = []
    current = ""
    for line in text.split("\n"):
        while len(line) > SECTION_LIMIT:  # one line longer than a section
            pieces.append(line[:SECTION_LIMIT])
            line = line[SECTION_LIMIT:]
        candidate = f"{current}\n{line}" if current else line
        if len(candidate) > SECTION_LIMIT:
            pieces.append(current)
            candidate = line
        current = candidate
    return [piece for piece in [*pieces, current] if piece.strip()]


def payload(title: str, text: str, link: str | None = None) -> dict[str, Any]:
    """A Slack message: ``title`` as a header, ``text`` (raw; escaped here) in
    sections, and a context line linking to ``link`` if given."""
    body = escape(text)
    blocks: list[dict[str, Any]] = [
        {
            "type": "header",
            "text": {"type": "plain_text", "text": title[:HEADER_LIMIT], "emoji": False},
        }
    ]
    reserved = 2 if link else 1  # the header, and the link's context block
    sections = _sections(body)
    if len(sections) > BLOCK_LIMIT - reserved:
        sections = [*sections[: BLOCK_LIMIT - reserved - 1], "… (cut: too long for one message)"]
    blocks += [{"type": "section", "text": {"type": "mrkdwn", "text": s}} for s in sections]
    if link:
        target = escape(link).replace("|", "%7C")
        blocks.append(
            {
                "type": "context",
                "elements": [{"type": "mrkdwn", "text": f"<{target}|Open in the dashboard>"}],
            }
        )
    return {"text": body, "blocks": blocks}
