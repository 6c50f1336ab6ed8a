"""cairn's integrations with other agent frameworks, each behind its own extra."""
