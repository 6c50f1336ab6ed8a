"""Integrations of cairn with agent frameworks, each behind an extra of its own."""
