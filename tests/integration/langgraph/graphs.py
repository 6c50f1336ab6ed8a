"""Small LangGraph graphs the checkpointer tests run (no model: a node's reply is
computed from the conversation, so every run is deterministic)."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import START, MessagesState, StateGraph

from cairn.integrations.langgraph import CairnSaver


def echo_graph(saver: CairnSaver) -> Any:
    """One node that answers each human message with its text and the count so far."""

    def reply(state: MessagesState) -> dict[str, Any]:
        said = state["messages"][-1].content
        return {"messages": [AIMessage(f"heard {said!s} ({len(state['messages'])})")]}

    builder = StateGraph(MessagesState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    return builder.compile(checkpointer=saver)


def thread(name: str, checkpoint_id: str | None = None) -> Any:
    """The config of thread ``name`` (at ``checkpoint_id``, if given)."""
    configurable: dict[str, str] = {"thread_id": name}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def say(graph: Any, config: Any, text: str) -> list[str]:
    """One turn; the thread's messages after it, as text."""
    state = graph.invoke({"messages": [HumanMessage(text)]}, config)
    return [str(m.content) for m in state["messages"]]


def texts(state: Any) -> list[str]:
    return [str(m.content) for m in state.values.get("messages", [])]
