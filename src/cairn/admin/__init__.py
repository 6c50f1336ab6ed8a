"""The admin API: the rules the CLI and the dashboard share, written once.

``cairn.cli`` and ``cairn.ui`` both stand on this package for what an operator
sees (task and batch listings with filters and pages, a task's view, a batch's
progress, operations and doubt, conversations and cost, the metrics summary)
and for what an operator may do (retry, cancel, signal, resolve an operation);
neither writes such a rule of its own. It reads and writes through the store's
admin side (``cairn.store.AdminStore``), and through ``cairn.observe`` for
metrics and stalls.
"""

from cairn.admin.actions import CANCEL, RETRY, Action, Applied, apply_to_task
from cairn.admin.batches import BatchView, FailureGroup, SlowStep, batch_view
from cairn.admin.conversations import (
    FIDELITY_TASK,
    CallCost,
    ConversationDetail,
    SummaryCover,
    call_costs,
    conversation_detail,
    conversation_name,
    costs,
    fidelity_task_id,
    probe_costs,
)
from cairn.admin.listing import (
    BadCursor,
    BatchPage,
    Cursor,
    TaskPage,
    TaskQuery,
    batch_page,
    iter_tasks,
    task_page,
)
from cairn.admin.metrics import MetricsSummary, metrics_summary
from cairn.admin.operations import OperationView, Resolved, in_doubt, operations, resolve
from cairn.admin.signals import send_signal
from cairn.admin.views import (
    BlobInfo,
    ErrorView,
    StepView,
    TaskView,
    ValueView,
    error_view,
    task_view,
    value_view,
)
from cairn.observe.stalls import Stall, stalls_in

__all__ = [
    "CANCEL",
    "FIDELITY_TASK",
    "RETRY",
    "Action",
    "Applied",
    "BadCursor",
    "BatchPage",
    "BatchView",
    "BlobInfo",
    "CallCost",
    "ConversationDetail",
    "Cursor",
    "ErrorView",
    "FailureGroup",
    "MetricsSummary",
    "OperationView",
    "Resolved",
    "SlowStep",
    "Stall",
    "StepView",
    "SummaryCover",
    "TaskPage",
    "TaskQuery",
    "TaskView",
    "ValueView",
    "apply_to_task",
    "batch_page",
    "batch_view",
    "call_costs",
    "conversation_detail",
    "conversation_name",
    "costs",
    "error_view",
    "fidelity_task_id",
    "in_doubt",
    "iter_tasks",
    "metrics_summary",
    "operations",
    "probe_costs",
    "resolve",
    "send_signal",
    "stalls_in",
    "task_page",
    "task_view",
    "value_view",
]
