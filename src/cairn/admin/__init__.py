"""The rules the CLI and the dashboard share, written once.

``cairn.cli`` and ``cairn.ui`` both stand on this package for what an operator
may do to a task (``actions``) and on ``cairn.observe.stalls`` for which tasks
have stalled; neither writes such a rule of its own. It reads and writes
through the store's admin side (``cairn.store.AdminStore``).
"""

from cairn.admin.actions import CANCEL, RETRY, Action, Applied, apply_to_task

__all__ = ["CANCEL", "RETRY", "Action", "Applied", "apply_to_task"]
