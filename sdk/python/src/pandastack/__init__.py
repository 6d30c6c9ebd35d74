"""PandaStack Python SDK.

    from pandastack import PandaStack
    client = PandaStack()                      # PANDASTACK_API_KEY, PANDASTACK_BASE_URL
    with client.sandboxes.create(template="base", ttl_seconds=600) as sandbox:
        print(sandbox.exec("python3 -c 'print(2 ** 10)'").stdout)   # 1024

:class:`AsyncPandaStack` offers the same surface with ``await``.
"""

from ._async import (
    AsyncExecStream,
    AsyncFilesystem,
    AsyncPaginator,
    AsyncPandaStack,
    AsyncProcess,
    AsyncPty,
    AsyncSandbox,
)
from ._sync import ExecStream, Filesystem, Paginator, PandaStack, Process, Pty, Sandbox
from ._ws import WebSocketClosed
from ._version import __version__
from .errors import (
    APIConnectionError,
    APIError,
    AuthenticationError,
    CommandExitError,
    CommandTimeoutError,
    ConflictError,
    InvalidArgumentError,
    NotFoundError,
    PandaStackError,
    PermissionDeniedError,
    RateLimitError,
    RequestTimeoutError,
    SandboxNotFoundError,
    SandboxStateError,
    ServerError,
    SnapshotNotFoundError,
    StreamError,
    TemplateBuildError,
    TemplateBuildTimeoutError,
    TemplateNotFoundError,
)
from .types import (
    APIKey,
    CodeContext,
    CreatedAPIKey,
    ExecEvent,
    ExecResult,
    Execution,
    ExecutionError,
    ExitEvent,
    FileInfo,
    Metrics,
    Page,
    PortUrl,
    Result,
    SandboxInfo,
    Snapshot,
    StderrEvent,
    StdoutEvent,
    Template,
    WriteInfo,
)

__all__ = [
    "__version__",
    # clients
    "PandaStack",
    "AsyncPandaStack",
    "Sandbox",
    "AsyncSandbox",
    "Filesystem",
    "AsyncFilesystem",
    "ExecStream",
    "AsyncExecStream",
    "Paginator",
    "AsyncPaginator",
    "Process",
    "AsyncProcess",
    "Pty",
    "AsyncPty",
    # data
    "SandboxInfo",
    "ExecResult",
    "ExecEvent",
    "StdoutEvent",
    "StderrEvent",
    "ExitEvent",
    "FileInfo",
    "WriteInfo",
    "Snapshot",
    "Template",
    "Metrics",
    "PortUrl",
    "Page",
    "APIKey",
    "CreatedAPIKey",
    "Execution",
    "Result",
    "ExecutionError",
    "CodeContext",
    # errors
    "PandaStackError",
    "APIError",
    "AuthenticationError",
    "PermissionDeniedError",
    "NotFoundError",
    "SandboxNotFoundError",
    "TemplateNotFoundError",
    "SnapshotNotFoundError",
    "ConflictError",
    "SandboxStateError",
    "InvalidArgumentError",
    "RateLimitError",
    "ServerError",
    "APIConnectionError",
    "RequestTimeoutError",
    "CommandTimeoutError",
    "CommandExitError",
    "StreamError",
    "TemplateBuildError",
    "TemplateBuildTimeoutError",
    "WebSocketClosed",
]
