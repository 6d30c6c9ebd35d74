"""The asynchronous client: :class:`AsyncPandaStack` and :class:`AsyncSandbox`, a module per
resource.

Async: same names and arguments as the sync client; every call that talks to the server is
``await``-ed."""

# unasync: async-only
# The sync client, the package _sync, is generated from this one by scripts/gen-sync-client.py
# (_async/X.py becomes _sync/X.py): edit these modules, then run the script. Its docstring lists
# the translation rules and the `unasync` directive comments that mark where the two clients
# differ. A docstring paragraph starting with "Async:" is about this client only (the sync
# client's docstrings leave it out).
# unasync: end

from __future__ import annotations

# `client` first: it imports the resource modules after defining the client class (they import
# it for their `client` argument's type), and `sandbox` imports `exec` and `filesystem` likewise.
from .client import AsyncPandaStack
from .apps import AsyncApps
from .audit import AsyncAudit
from .databases import AsyncDatabases
from .events import AsyncEvents
from .exec import AsyncExecStream, AsyncProcess, AsyncPty
from .filesystem import FS_LIST_PAGE, AsyncFileContent, AsyncFilesystem
from .follow import AsyncErrorCallback, AsyncOutputCallback, AsyncResultCallback
from .functions import AsyncFunctions
from .git import AsyncGit
from .hosts import AsyncHosts
from .keys import AsyncKeys
from .members import AsyncMembers
from .pagination import AsyncPaginator
from .sandbox import AsyncSandbox
from .sandboxes import AsyncSandboxes
from .schedules import AsyncSchedules
from .snapshots import AsyncSnapshots
from .templates import AsyncTemplates
from .volumes import AsyncVolumes
from .webhooks import AsyncWebhooks

# Besides __all__, the names the single module this package replaced had are importable from
# here too: the classes of the other resources (AsyncKeys, AsyncSandboxes, AsyncSnapshots,
# AsyncTemplates), FS_LIST_PAGE and the type aliases.
__all__ = [
    "AsyncPandaStack",
    "AsyncSandbox",
    "AsyncFilesystem",
    "AsyncGit",
    "AsyncExecStream",
    "AsyncPaginator",
    "AsyncProcess",
    "AsyncPty",
    "AsyncVolumes",
    "AsyncDatabases",
    "AsyncApps",
    "AsyncFunctions",
    "AsyncSchedules",
    "AsyncHosts",
    "AsyncEvents",
    "AsyncWebhooks",
    "AsyncMembers",
    "AsyncAudit",
]
