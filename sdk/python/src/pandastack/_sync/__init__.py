# Generated from _async/__init__.py by scripts/gen-sync-client.py: do not edit by hand.
# Change _async/__init__.py, then run `python3 scripts/gen-sync-client.py` (CI runs it with --check).
"""The synchronous client: :class:`PandaStack` and :class:`Sandbox`, a module per
resource."""


from __future__ import annotations

# `client` first: it imports the resource modules after defining the client class (they import
# it for their `client` argument's type), and `sandbox` imports `exec` and `filesystem` likewise.
from .client import PandaStack
from .apps import Apps
from .audit import Audit
from .databases import Databases
from .events import Events
from .exec import ExecStream, Process, Pty
from .filesystem import FS_LIST_PAGE, FileContent, Filesystem
from .follow import ErrorCallback, OutputCallback, ResultCallback
from .functions import Functions
from .git import Git
from .hosts import Hosts
from .keys import Keys
from .members import Members
from .pagination import Paginator
from .sandbox import Sandbox
from .sandboxes import Sandboxes
from .schedules import Schedules
from .snapshots import Snapshots
from .templates import Templates
from .volumes import Volumes
from .webhooks import Webhooks

# Besides __all__, the names the single module this package replaced had are importable from
# here too: the classes of the other resources (Keys, Sandboxes, Snapshots,
# Templates), FS_LIST_PAGE and the type aliases.
__all__ = [
    "PandaStack",
    "Sandbox",
    "Filesystem",
    "Git",
    "ExecStream",
    "Paginator",
    "Process",
    "Pty",
    "Volumes",
    "Databases",
    "Apps",
    "Functions",
    "Schedules",
    "Hosts",
    "Events",
    "Webhooks",
    "Members",
    "Audit",
]
