"""The local HTTP servers tests count calls on, now in the package:
``cairn.testing.servers`` (examples use them too). Kept so that tests written
against ``tests.servers`` still import; new tests import the package."""

from cairn.testing.servers import (
    ApiServer,
    Arrival,
    LocalServer,
    PaymentServer,
    Post,
    RequestHandler,
    WebhookServer,
    busiest_window,
    wait_until,
)

__all__ = [
    "ApiServer",
    "Arrival",
    "LocalServer",
    "PaymentServer",
    "Post",
    "RequestHandler",
    "WebhookServer",
    "busiest_window",
    "wait_until",
]
