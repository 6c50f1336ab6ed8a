"""Agent context: durable conversations, recorded model calls, cost, fidelity, handoff.

Inside a task::

    conv = ctx.conversation("main", system=PROMPT, threshold=8000, keep_tail=2000)
    conv.append(user("Review the report"))
    reply = ctx.llm(conv, model="gpt-4o-mini", tools=TOOLS)

See ``cairn.agent.conversation`` for how conversations are stored and replayed,
``cairn.agent.llm`` for recorded calls, and docs/agents.md for the whole story.
The model SDKs are optional extras: ``pip install 'cairn-durable[openai]'`` or
``'cairn-durable[anthropic]'``.
"""

from __future__ import annotations

from cairn.agent.archive import (
    ConversationView,
    StoredMessage,
    carried_history,
    iter_history,
    load_conversation,
)
from cairn.agent.clearing import ToolResultClearing
from cairn.agent.compaction import Compaction
from cairn.agent.conversation import Conversation
from cairn.agent.conversation_stats import ConversationStats
from cairn.agent.fidelity import Disagreement, FidelityReport, fidelity, next_tool_call
from cairn.agent.handoff import handoff_archive, parse_handoff
from cairn.agent.messages import Message, assistant, system, tool_call, tool_result, user
from cairn.agent.pricing import DEFAULT_PRICES, Price, PriceTable, Usage
from cairn.agent.providers import (
    AnthropicProvider,
    Completion,
    OpenAIProvider,
    Provider,
    StreamingProvider,
)
from cairn.agent.reply import Reply, ToolCall
from cairn.agent.summarize import (
    ChunkedSummarizer,
    ExtractiveSummarizer,
    LLMSummarizer,
    Summarizer,
    Summary,
    SummaryRequest,
)
from cairn.agent.tokens import (
    EstimateCounter,
    ExactCounter,
    TokenCounter,
    count_message,
    counter_for,
    describe_counter,
)

__all__ = [
    "DEFAULT_PRICES",
    "AnthropicProvider",
    "ChunkedSummarizer",
    "Compaction",
    "Completion",
    "Conversation",
    "ConversationStats",
    "ConversationView",
    "Disagreement",
    "EstimateCounter",
    "ExactCounter",
    "ExtractiveSummarizer",
    "FidelityReport",
    "LLMSummarizer",
    "Message",
    "OpenAIProvider",
    "Price",
    "PriceTable",
    "Provider",
    "Reply",
    "StoredMessage",
    "StreamingProvider",
    "Summarizer",
    "Summary",
    "SummaryRequest",
    "TokenCounter",
    "ToolCall",
    "ToolResultClearing",
    "Usage",
    "assistant",
    "carried_history",
    "count_message",
    "counter_for",
    "describe_counter",
    "fidelity",
    "handoff_archive",
    "iter_history",
    "load_conversation",
    "next_tool_call",
    "parse_handoff",
    "system",
    "tool_call",
    "tool_result",
    "user",
]
