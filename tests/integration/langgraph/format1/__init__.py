"""cairn's LangGraph checkpointer as it was in format 1, frozen for the upgrade
test and the benchmark (see ``saver``)."""

from tests.integration.langgraph.format1.saver import CairnSaver

__all__ = ["CairnSaver"]
