"""``client.templates``: :class:`AsyncTemplates`, the catalog and built templates."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from .. import _base as b
from ..errors import NotFoundError, PandaStackError, TemplateNotFoundError
from ..types import Template
from .client import AsyncPandaStack
from .follow import AsyncOutputCallback, _follow_once
from .transport import _file_chunks, _reader_chunks  # unasync: async-only


class AsyncTemplates:
    """``client.templates``: the server's catalog and the workspace's own templates, built from
    an OCI image tarball or a spec with :meth:`build`."""

    def __init__(self, client: "AsyncPandaStack") -> None:
        self._t = client._t

    async def list(self) -> List[Template]:
        """The catalog's templates, then the workspace's own."""
        data = await self._t.json("GET", "/v1/templates")
        return [Template.from_json(x) for x in data.get("data", [])]

    async def get(self, name: str) -> Template:
        """One template: the workspace's own of that name, else the catalog's. Raises
        :class:`~pandastack.TemplateNotFoundError` if there is none."""
        try:
            return Template.from_json(await self._t.json("GET", f"/v1/templates/{b.seg(name)}"))
        except NotFoundError as e:
            # A server without the single-template route answers "no such route" (`not_found`).
            if e.code != "not_found":
                raise
        for t in await self.list():
            if t.name == name:
                return t
        raise TemplateNotFoundError(
            f"template {name} not found", code="template_not_found", status=404
        )

    async def build(
        self,
        name: Optional[str] = None,
        *,
        tarball: Optional[b.TarballSource] = None,
        spec: Optional[str] = None,
        cpu: Optional[int] = None,
        memory_mb: Optional[int] = None,
        disk_mb: Optional[int] = None,
        description: Optional[str] = None,
        wait: bool = True,
        on_log: Optional[AsyncOutputCallback] = None,
        timeout_seconds: Optional[float] = None,
    ) -> Template:
        """Builds a template on the server (a new version if ``name`` exists) and, with
        ``wait=True`` (the default), returns it once ready::

            t = await client.templates.build("my-app", tarball="my-app.tar", memory_mb=1024,
                                             on_log=lambda s: print(s, end=""))
            await client.sandboxes.create(template=t.name)

        Give exactly one source:

        - ``tarball``: an OCI image layout or ``docker save`` tarball (plain or gzip) as a local
          path (streamed from disk, never held in memory), ``bytes``, or a binary file object
          (streamed; sent once, so not retried). Needs ``name``; ``cpu`` (1-16, default 1),
          ``memory_mb`` (128-65536, default 512), ``disk_mb`` (default: the image plus room) and
          ``description`` shape it. The image's ``Env`` becomes the sandboxes' environment.
        - ``spec``: a template spec's TOML text (Debian packages and inline files only; the
          server refuses other fields with a 422 naming them). ``name`` defaults to the spec's.

        The build runs in the background on the server (one at a time). With ``wait=False``
        this returns the queued template at once. Otherwise it follows the build log
        (``GET …/logs?follow=1``, Server-Sent Events; reconnected if the connection breaks),
        calls ``on_log`` with each new piece of log text, and returns the template when the
        build is ``ready``. A build that ends ``failed`` raises
        :class:`~pandastack.TemplateBuildError` (``.template``, ``.error``); if
        ``timeout_seconds`` pass first (counted from the server's accepting the build),
        :class:`~pandastack.TemplateBuildTimeoutError` is raised and the build goes on.
        A build of ``name`` already under way, or a catalog template's name, raises
        :class:`~pandastack.ConflictError`; a tarball over the server's limit,
        :class:`~pandastack.InvalidArgumentError` (413).

        Async: ``on_log`` may be a plain or a coroutine function; a file object is read in a
        worker thread.
        """
        up = b.template_upload(name, tarball, spec, cpu, memory_mb, disk_mb, description)
        timeout = b.timeout_for(None, max(self._t.cfg.timeout, b.DEFAULT_LIFECYCLE_TIMEOUT))
        if up.json is not None:
            data = await self._t.json("POST", "/v1/templates", json=up.json, timeout=timeout)
        else:
            kw: Dict[str, Any] = {}
            if up.path is not None:
                path = up.path
                # unasync: sync: kw["content_factory"] = lambda: open(path, "rb")
                kw["content_factory"] = lambda: _file_chunks(path, b.CHUNK_SIZE)  # unasync: async-only
            elif up.data is not None:
                kw["content"] = up.data
            else:
                # Chunks, not the file object: httpx would guess a length from fstat (0 for a
                # pipe); the length is sent when known, else the body is chunked.
                # unasync: sync: reader = up.stream.read
                # unasync: sync: kw["content"] = iter(lambda: reader(b.CHUNK_SIZE), b"")
                kw["content"] = _reader_chunks(up.stream, b.CHUNK_SIZE)  # unasync: async-only
                kw["retry"] = b.RETRY_NEVER
            data = await self._t.json(
                "POST",
                "/v1/templates",
                params=up.params,
                headers=b.template_upload_headers(up),
                timeout=timeout,
                **kw,
            )
        queued = Template.from_json(data)
        if not wait:
            return queued
        return await self._wait(queued, on_log, timeout_seconds)

    async def _wait(
        self,
        queued: Template,
        on_log: Optional[AsyncOutputCallback],
        timeout_seconds: Optional[float],
    ) -> Template:
        f = b.BuildFollower(queued, timeout_seconds)
        while not f.done:
            if f.expired():
                latest = await self._peek(f)
                if f.ended_by(latest):
                    return f.outcome(latest)
                raise f.timeout_error(latest)
            await _follow_once(self._t, f, on_log)
        latest = f.queued if f.reason == "deleted" else await self.get(f.name)
        return f.outcome(latest)

    async def _peek(self, f: b.BuildFollower) -> Template:
        """The template's state now, or the last known one if the server does not say quickly."""
        try:
            return Template.from_json(
                await self._t.json(
                    "GET",
                    f"/v1/templates/{b.seg(f.name)}",
                    timeout=b.timeout_for(None, b.BUILD_PEEK_TIMEOUT),
                    retry=b.RETRY_NEVER,
                )
            )
        except PandaStackError:
            return f.queued

    async def logs(self, name: str, version: Optional[int] = None) -> str:
        """The build log of the template's newest build (or of build ``version``) so far."""
        resp = await self._t.request(
            "GET",
            f"/v1/templates/{b.seg(name)}/logs",
            params=b.template_logs_params(version),
            headers={"Accept": "text/plain"},
        )
        return resp.text

    async def bake(self, name: str) -> Template:
        """Re-bakes a template (a cold boot and a new snapshot; catalog templates from their
        spec, built ones from the newest ready version's image) and returns it. New sandboxes
        get the new bake; running ones keep theirs."""
        return Template.from_json(
            await self._t.json(
                "POST",
                f"/v1/templates/{b.seg(name)}/bake",
                timeout=b.timeout_for(None, max(self._t.cfg.timeout, b.DEFAULT_LIFECYCLE_TIMEOUT)),
            )
        )

    async def delete(self, name: str) -> bool:
        """Deletes a built template, every version (running sandboxes made from it keep
        running). Returns ``False`` if it did not exist. Catalog templates, and templates with
        a build under way, raise :class:`~pandastack.ConflictError`."""
        try:
            await self._t.request(
                "DELETE",
                f"/v1/templates/{b.seg(name)}",
                timeout=b.timeout_for(None, max(self._t.cfg.timeout, 120.0)),
            )
            return True
        except NotFoundError:
            return False
