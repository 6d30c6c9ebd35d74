# Generated from _async/apps.py by scripts/gen-sync-client.py: do not edit by hand.
# Change _async/apps.py, then run `python3 scripts/gen-sync-client.py` (CI runs it with --check).
"""``client.apps``: :class:`Apps`, apps deployed from git or a local directory."""

from __future__ import annotations

import datetime
import os
import time
from typing import List, Mapping, Optional, Sequence, Union

from .. import _base as b
from .. import _wire
from ..errors import NotFoundError
from ..types import App, Deploy, Metrics, Page
from .client import PandaStack
from .follow import OutputCallback, _call, _follow_once
from .pagination import Paginator


class Apps:
    """``client.apps``: apps deployed from git (or from a local directory), each built in a
    microVM of its own, health-checked, and served at its ``url`` (``<name>.<domain>``) by the
    server's proxy. A new deploy takes the traffic once healthy (blue-green); the version
    before stays ``standby`` for a :meth:`rollback`::

        app = client.apps.create("web", "https://github.com/me/web.git", deploy=False)
        d = client.apps.deploy("web", wait=True)         # polls until it ends
        print(d.state, app.url)                                 # live https://web.<domain>
        print(client.apps.deploy_logs("web", d.id))      # clone, plan, install, build, check
        client.apps.deploy_directory("web", "./web")      # a deploy of local files
        client.apps.rollback("web")                       # the version before is back

    Every call takes the app's name or its id. An app with ``min_instances=0`` hibernates
    after ``idle_seconds`` without requests; the next request wakes it.
    """

    def __init__(self, client: "PandaStack") -> None:
        self._t = client._t

    def _p(self, app: str, rest: str = "") -> str:
        return f"/v1/apps/{b.seg(app)}{rest}"

    def create(
        self,
        name: str,
        git: b.AppGitLike,
        *,
        ref: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        secrets: Optional[Mapping[str, str]] = None,
        build: Optional[b.AppBuildLike] = None,
        start: Optional[b.AppStartLike] = None,
        memory_mb: Optional[int] = None,
        min_instances: Optional[int] = None,
        idle_seconds: Optional[int] = None,
        health_path: Optional[str] = None,
        domains: Optional[Sequence[str]] = None,
        root_dir: Optional[str] = None,
        deploy: Optional[bool] = None,
    ) -> App:
        """Creates an app and queues its first deploy (unless ``deploy=False``); returns the
        app at once (:meth:`deploys` lists the queued deploy, :meth:`wait_for_deploy` waits for
        it). ``name`` (1-40 of ``[a-z0-9-]``, starting with a letter) is also its host name.

        ``git`` is the repository: its URL (fetched by the server over the network: never a
        path or ``file://`` on the server, nor a loopback or private address unless its
        operator allows it; a local directory goes up with :meth:`deploy_directory`), an
        :class:`~pandastack.AppGit` or a dict ``{"url", "ref"}``; ``ref`` the branch,
        tag or commit to deploy (default ``main``). ``env`` is the environment of the build
        and of the running app; ``secrets`` the same, never shown by the API (only their
        names). ``build`` (:class:`~pandastack.AppBuild` or ``{"command", "output_dir"}``) and
        ``start`` (:class:`~pandastack.AppStart` or ``{"command", "port"}``) override what
        detection chose. ``memory_mb`` is the memory of its VM (a multiple of 256 from 256 to
        16384, default 1024); ``min_instances`` ``0`` (default: hibernate after
        ``idle_seconds``, default 300, without requests) or ``1`` (always running);
        ``health_path`` the path the health check asks for (default ``/``); ``root_dir`` the
        subdirectory of the repository that is the app, for a monorepo (relative, no ``..``;
        ``"."``: the whole repository, the default).

        ``domains`` are extra host names the app answers at, besides ``<name>.<domain>``
        (lower-case DNS names, at most 20, not under the server's own domain): point their DNS
        at the server's proxy. With TLS on the proxy each gets a certificate, from the
        operator's certificate directory or else from ACME: see ``App.domains[i].tls``
        (:class:`~pandastack.AppDomain`).

        A name in use, or a domain another app has, raises :class:`~pandastack.ConflictError`;
        a bad field :class:`~pandastack.InvalidArgumentError` naming it (``domains[i]``)."""
        config = b.app_config(
            env, secrets, build, start, memory_mb, min_instances, idle_seconds, health_path, domains,
            root_dir,
        )
        body = b.app_body(name, git, ref, deploy, config)
        return App.from_json(self._t.json("POST", "/v1/apps", json=body))

    def list(self, *, limit: Optional[int] = None, cursor: Optional[str] = None) -> Paginator[App]:
        """Every app of the workspace (by name), fetched ``limit`` per page as you iterate."""

        def fetch(c: Optional[str]) -> Page[App]:
            data = self._t.json("GET", "/v1/apps", params=b.list_params(limit, c))
            return Page([App.from_json(x) for x in data.get("data", [])], data.get("next_cursor"))

        return Paginator(fetch, cursor)

    def get(self, app: str) -> App:
        """One app, by name or id; raises :class:`~pandastack.AppNotFoundError` if there is
        none."""
        return App.from_json(self._t.json("GET", self._p(app)))

    def metrics(
        self,
        app: str,
        *,
        since: Optional[Union[datetime.datetime, datetime.timedelta, str]] = None,
        step: Optional[int] = None,
    ) -> Metrics:
        """The resource use of an app's VMs over time (by name or id): ``samples`` sum its
        instances (oldest first, ``step`` seconds apart), each listed in ``instances``.

        ``since``: how far back, a span (``"90s"``, ``"15m"``, ``"1h"``; a ``timedelta``) or a
        time (a ``datetime`` or an RFC 3339 string); default 10 minutes, at most 6 hours.
        ``step``: seconds per point (1 to 86400, default 5). Values the server refuses raise
        :class:`~pandastack.InvalidArgumentError`."""
        params = b.metrics_params(since, step)
        return Metrics.from_json(self._t.json("GET", self._p(app, "/metrics"), params=params))

    def update(
        self,
        app: str,
        *,
        git: Optional[b.AppGitLike] = None,
        ref: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        secrets: Optional[Mapping[str, str]] = None,
        build: Optional[b.AppBuildLike] = None,
        start: Optional[b.AppStartLike] = None,
        memory_mb: Optional[int] = None,
        min_instances: Optional[int] = None,
        idle_seconds: Optional[int] = None,
        health_path: Optional[str] = None,
        domains: Optional[Sequence[str]] = None,
        root_dir: Optional[str] = None,
    ) -> App:
        """Changes an app's configuration and returns the app: each argument given replaces
        the app's (``env``, ``secrets`` and ``domains`` whole, ``domains=[]`` removes them
        all; ``ref`` needs ``git``); the others stay. The next deploy builds with it;
        ``min_instances`` and ``idle_seconds`` apply to the running version at once, and
        ``domains`` to the proxy at once (extra host names the app answers at: point their DNS
        at the proxy; with TLS on the proxy each gets a certificate from files or ACME, see
        ``App.domains[i].tls``). The arguments are those of :meth:`create`."""
        config = b.app_config(
            env, secrets, build, start, memory_mb, min_instances, idle_seconds, health_path, domains,
            root_dir,
        )
        body = b.app_update_body(git, ref, config)
        return App.from_json(self._t.json("PATCH", self._p(app), json=body))

    def delete(self, app: str) -> bool:
        """Deletes an app: every version's VM, its deploys and their logs. Returns ``False``
        if it did not exist."""
        try:
            self._t.request(
                "DELETE", self._p(app), timeout=b.timeout_for(None, max(self._t.cfg.timeout, 120.0))
            )
            return True
        except NotFoundError:
            return False

    def rotate_deploy_key(self, app: str) -> App:
        """Replaces the app's SSH deploy key with a new ed25519 pair and returns the app, its
        ``deploy_key`` the new public key to put on the repository (as a read-only deploy
        key). Deploys from then on fetch with the new key."""
        return App.from_json(self._t.json("POST", self._p(app, "/deploy-key")))

    # ---- deploys
    def deploy(
        self,
        app: str,
        ref: Optional[str] = None,
        *,
        wait: bool = False,
        timeout: Optional[float] = None,
    ) -> Deploy:
        """Deploys the app again, from its git repository: its ``git.ref``, or ``ref`` (a
        branch, tag or commit). Returns the deploy ``queued`` (one deploy runs at a time per
        host; a queued deploy a newer one overtakes ends ``superseded``); with ``wait=True``,
        once it has ended (see :meth:`wait_for_deploy`)."""
        d = Deploy.from_json(
            self._t.json("POST", self._p(app, "/deploys"), json=b.deploy_body(ref))
        )
        if not wait:
            return d
        return self.wait_for_deploy(app, d.id, timeout=timeout)

    def deploy_directory(
        self,
        app: str,
        path: Union[str, "os.PathLike[str]"],
        *,
        wait: bool = False,
        timeout: Optional[float] = None,
    ) -> Deploy:
        """Deploys the content of a local directory instead of the app's git repository: it is
        packed as a gzip'd tar (in memory; ``.git`` and ``node_modules`` left out at any
        depth, symbolic links kept as links, which the server skips), uploaded, and built like
        a clone. Returns the deploy ``queued`` (its ``ref`` is ``"upload"``); with
        ``wait=True``, once it has ended (see :meth:`wait_for_deploy`). A path that is not a
        directory raises :class:`~pandastack.InvalidArgumentError`, and so does an upload over
        the server's limit (413)."""
        data = b.pack_directory(path)
        d = Deploy.from_json(
            self._t.json(
                "POST",
                self._p(app, "/deploys"),
                content=data,
                headers={"Content-Type": "application/gzip"},
                timeout=b.timeout_for(None, max(self._t.cfg.timeout, b.DEFAULT_LIFECYCLE_TIMEOUT)),
            )
        )
        if not wait:
            return d
        return self.wait_for_deploy(app, d.id, timeout=timeout)

    def deploys(
        self, app: str, *, limit: Optional[int] = None, cursor: Optional[str] = None
    ) -> Paginator[Deploy]:
        """The app's deploys, newest first, fetched ``limit`` per page as you iterate."""
        path = self._p(app, "/deploys")

        def fetch(c: Optional[str]) -> Page[Deploy]:
            data = self._t.json("GET", path, params=b.list_params(limit, c))
            return Page([Deploy.from_json(x) for x in data.get("data", [])], data.get("next_cursor"))

        return Paginator(fetch, cursor)

    def get_deploy(self, app: str, deploy_id: str) -> Deploy:
        """One deploy of the app, as it is now (:class:`~pandastack.NotFoundError` if the app
        has no such deploy)."""
        return Deploy.from_json(
            self._t.json("GET", self._p(app, f"/deploys/{b.seg(deploy_id)}"))
        )

    def wait_for_deploy(
        self, app: str, deploy_id: str, timeout: Optional[float] = None
    ) -> Deploy:
        """Polls a deploy until it has ended and returns it: ``live``, ``failed`` (``error``
        says why), ``superseded``, or ``standby``. One still under way after ``timeout``
        seconds (default 1800) raises :class:`~pandastack.DeployTimeoutError` (``.deploy``;
        the deploy goes on)."""
        w = b.BackupWait(timeout, b.DEFAULT_DEPLOY_TIMEOUT, b.DEPLOY_POLL_INTERVAL)
        while True:
            d = self.get_deploy(app, deploy_id)
            if not d.active:
                return d
            if w.expired():
                raise b.deploy_timeout(app, d, w.timeout)
            time.sleep(w.pause())

    def deploy_logs(
        self,
        app: str,
        deploy_id: str,
        *,
        follow: bool = False,
        on_log: Optional[OutputCallback] = None,
    ) -> str:
        """A deploy's log (fetch, detection's plan, install and build output, start, health
        check) so far. With ``follow=True`` it is followed (Server-Sent Events, reopened if the
        connection breaks) until the deploy ends, each new piece of text passed to ``on_log``,
        and the whole log returned."""
        path = self._p(app, f"/deploys/{b.seg(deploy_id)}/logs")
        return self._log(path, f"log of deploy {deploy_id} of app {app}", follow, on_log)

    def logs(
        self,
        app: str,
        *,
        follow: bool = False,
        on_log: Optional[OutputCallback] = None,
    ) -> str:
        """The running app's own output (its server's stdout and stderr): the newest MiB.
        With ``follow=True``, all of it and then everything it writes next, each piece passed
        to ``on_log``, until its VM stops; returns the text seen. An exception raised by
        ``on_log`` stops the follow (and reaches the caller)."""
        return self._log(self._p(app, "/logs"), f"log of app {app}", follow, on_log)

    def _log(
        self, path: str, what: str, follow: bool, on_log: Optional[OutputCallback]
    ) -> str:
        if not follow:
            resp = self._t.request("GET", path, headers={"Accept": "text/plain"})
            return resp.text
        parts: List[str] = []

        def take(text: str) -> None:
            parts.append(text)
            _call(on_log, text)

        f = b.LogFollower(path, {"follow": "1"}, what)
        while not f.done:
            _follow_once(self._t, f, take)
        return "".join(parts)

    def rollback(self, app: str, deploy_id: Optional[str] = None) -> Deploy:
        """Puts an earlier version back: its hibernated VM is woken, checked and takes the
        traffic (no rebuild); the current version becomes ``standby``. ``deploy_id`` is the
        version to go back to (default: the newest ``standby`` one). Returns that deploy, now
        ``live``. With no version to go back to, or one that is not ``standby``, raises
        :class:`~pandastack.ConflictError`."""
        body: _wire.RollbackRequest = {"deploy_id": deploy_id} if deploy_id is not None else {}
        return Deploy.from_json(
            self._t.json(
                "POST",
                self._p(app, "/rollback"),
                json=body,
                timeout=b.timeout_for(None, max(self._t.cfg.timeout, b.ROLLBACK_TIMEOUT)),
            )
        )
