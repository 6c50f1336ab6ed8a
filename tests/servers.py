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

# The base class's old name, for tests that subclassed it.
TestServer = LocalServer

__all__ = [
    "ApiServer",
    "Arrival",
    "LocalServer",
    "PaymentServer",
    "Post",
    "RequestHandler",
    "TestServer",
    "WebhookServer",
    "busiest_window",
    "wait_until",
]
