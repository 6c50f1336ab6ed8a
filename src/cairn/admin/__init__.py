"""The admin API: the rules the CLI and the dashboard share, written once.

``cairn.cli`` and ``cairn.ui`` both stand on this package for what an operator
sees (task and batch listings with filters and pages, a task's view, a batch's
progress, operations and doubt, conversations and cost, the metrics summary, a
task's runs and what a rerun changed, the audit trail) and for what an operator
may do (retry, cancel, signal, resolve an operation, rerun from a step; on one
task, a batch or a filter), each written to the audit trail; neither writes
such a rule of its own. It reads and writes through the store's
admin side (``cairn.store.AdminStore``), and through ``cairn.observe`` for
metrics and stalls.
"""

from cairn.admin.actions import (
    CANCEL,
    RETRY,
    Action,
    Applied,
    BatchApplied,
    apply_to_batch,
    apply_to_task,
)
from cairn.admin.audit import Actor, AuditPage, audit_page
from cairn.admin.batches import BatchView, FailureGroup, SlowStep, batch_view
from cairn.admin.bulk import QueryApplied, Selection, apply_to_query, selection
from cairn.admin.conversations import (
    FIDELITY_TASK,
    CallCost,
    ConversationDetail,
    SummaryCover,
    call_costs,
    conversation_calls,
    conversation_detail,
    conversation_name,
    costs,
    fidelity_task_id,
    probe_costs,
)
from cairn.admin.lineage import (
    BatchDiff,
    EntryChange,
    RunView,
    TaskDiff,
    batch_diff,
    lineage,
    run_history,
    task_diff,
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
from cairn.admin.priorities import set_batch_priority, set_priority
from cairn.admin.reruns import (
    ForkPoint,
    RerunDone,
    RerunPlan,
    RerunTask,
    apply_rerun,
    plan_rerun,
    rerun_candidates,
)
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
    "Actor",
    "Applied",
    "AuditPage",
    "BadCursor",
    "BatchApplied",
    "BatchDiff",
    "BatchPage",
    "BatchView",
    "BlobInfo",
    "CallCost",
    "ConversationDetail",
    "Cursor",
    "EntryChange",
    "ErrorView",
    "FailureGroup",
    "ForkPoint",
    "MetricsSummary",
    "OperationView",
    "QueryApplied",
    "RerunDone",
    "RerunPlan",
    "RerunTask",
    "Resolved",
    "RunView",
    "Selection",
    "SlowStep",
    "Stall",
    "StepView",
    "SummaryCover",
    "TaskDiff",
    "TaskPage",
    "TaskQuery",
    "TaskView",
    "ValueView",
    "apply_rerun",
    "apply_to_batch",
    "apply_to_query",
    "apply_to_task",
    "audit_page",
    "batch_diff",
    "batch_page",
    "batch_view",
    "call_costs",
    "conversation_calls",
    "conversation_detail",
    "conversation_name",
    "costs",
    "error_view",
    "fidelity_task_id",
    "in_doubt",
    "iter_tasks",
    "lineage",
    "metrics_summary",
    "operations",
    "plan_rerun",
    "probe_costs",
    "rerun_candidates",
    "resolve",
    "run_history",
    "selection",
    "send_signal",
    "set_batch_priority",
    "set_priority",
    "stalls_in",
    "task_diff",
    "task_page",
    "task_view",
    "value_view",
]
