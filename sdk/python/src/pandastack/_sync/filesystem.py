# Generated from _async/filesystem.py by scripts/gen-sync-client.py: do not edit by hand.
# Change _async/filesystem.py, then run `python3 scripts/gen-sync-client.py` (CI runs it with --check).
"""Files inside a sandbox: :class:`Filesystem` (``sandbox.filesystem``)."""

from __future__ import annotations

import os
import tempfile
from typing import IO, Any, Dict, Iterable, Iterator, List, Optional, Union

import httpx

from .. import _base as b
from .. import _wire
from ..errors import NotFoundError
from ..types import FileInfo, FileUrl, Page, WatchEvent, WriteInfo
from .pagination import Paginator
from .sandbox import Sandbox
from .transport import _Transport

#: Entries per page ``filesystem.list`` asks for: the most the server returns at once (each page
#: walks the directory again in the guest, so fewer pages cost less).
FS_LIST_PAGE = 5000
FileContent = Union[str, bytes, bytearray, memoryview, IO[bytes], Iterable[bytes]]


class Filesystem:
    """Files inside a sandbox (``sandbox.filesystem``, alias ``sandbox.files``). Paths are
    absolute guest paths. Missing paths raise :class:`~pandastack.NotFoundError`."""

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sb = sandbox

    @property
    def _t(self) -> _Transport:
        return self._sb._t

    @property
    def _p(self) -> str:
        return f"/v1/sandboxes/{b.seg(self._sb.id)}/fs"

    def _io_timeout(self) -> httpx.Timeout:
        return b.timeout_for(None, max(self._t.cfg.timeout, 300.0))

    def read(self, path: str, *, encoding: str = "utf-8", errors: str = "strict") -> str:
        """The file's content as text."""
        return self.read_bytes(path).decode(encoding, errors)

    def read_bytes(self, path: str) -> bytes:
        """The file's content as bytes (held in memory: use :meth:`download` or
        :meth:`read_stream` for large files)."""
        resp = self._t.request("GET", self._p, params={"path": path}, timeout=self._io_timeout())
        return resp.content

    def read_stream(self, path: str, chunk_size: int = b.CHUNK_SIZE) -> Iterator[bytes]:
        """Yields the file's content in chunks without holding it in memory."""
        resp = self._t.request(
            "GET", self._p, params={"path": path}, stream=True, timeout=self._io_timeout()
        )
        try:
            try:
                for chunk in resp.iter_bytes(chunk_size):
                    yield chunk
            except httpx.TransportError as e:
                raise b.error_from_exception(e, f"read {path}") from e
        finally:
            resp.close()

    def write(self, path: str, data: FileContent) -> WriteInfo:
        """Creates or replaces a file (parents are created; the replacement is atomic).
        ``data`` is text (UTF-8), bytes, a binary file object or an iterable of bytes chunks;
        file objects and iterables are streamed."""
        kw: Dict[str, Any] = {}
        if isinstance(data, str):
            kw["content"] = data.encode("utf-8")
        elif isinstance(data, (bytes, bytearray, memoryview)):
            kw["content"] = bytes(data)
        else:
            # Streams can be sent once only: never retried (upload() reopens its file and is).
            kw["content"] = data
            kw["retry"] = b.RETRY_NEVER
        resp = self._t.request(
            "PUT",
            self._p,
            params={"path": path},
            headers={"Content-Type": "application/octet-stream"},
            timeout=self._io_timeout(),
            **kw,
        )
        return WriteInfo.from_json(resp.json())

    def upload(self, local_path: Union[str, "os.PathLike[str]"], remote_path: str) -> WriteInfo:
        """Streams a local file into the sandbox (never held in memory)."""
        local = os.fspath(local_path)
        size = os.path.getsize(local)
        resp = self._t.request(
            "PUT",
            self._p,
            params={"path": remote_path},
            content_factory=lambda: open(local, "rb"),
            headers={"Content-Type": "application/octet-stream", "Content-Length": str(size)},
            timeout=self._io_timeout(),
        )
        return WriteInfo.from_json(resp.json())

    def download(self, remote_path: str, local_path: Union[str, "os.PathLike[str]"]) -> int:
        """Streams a sandbox file to a local path (written to a temporary file next to it, then
        renamed into place). Returns the number of bytes written."""
        local = os.fspath(local_path)
        d = os.path.dirname(os.path.abspath(local))
        fd, tmp = tempfile.mkstemp(prefix=".pandastack-", dir=d)
        n = 0
        try:
            with os.fdopen(fd, "wb") as f:
                for chunk in self.read_stream(remote_path):
                    f.write(chunk)
                    n += len(chunk)
            os.replace(tmp, local)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        return n

    def list(
        self, path: str = "/", *, depth: int = 1, pattern: Optional[str] = None
    ) -> List[FileInfo]:
        """Entries under a directory, ``depth`` levels deep (1-10), sorted by path. With
        ``pattern`` (a glob such as ``"*.py"``, matched against each entry's name) only the
        matching entries: ``list("/app", depth=10, pattern="*.py")`` searches by name. The
        server answers a page at a time (one answer cannot carry a large directory); this
        follows ``next_cursor`` to the last page."""
        params = {"path": path, "depth": str(int(depth)), "limit": str(FS_LIST_PAGE)}
        if pattern:
            params["pattern"] = pattern

        def fetch(c: Optional[str]) -> Page[FileInfo]:
            q = dict(params, cursor=c) if c else params
            body = self._t.json("GET", f"{self._p}/list", params=q) or {}
            return Page([FileInfo.from_json(x) for x in body.get("data", [])], body.get("next_cursor"))

        return Paginator(fetch).to_list()

    def stat(self, path: str) -> FileInfo:
        return FileInfo.from_json(self._t.json("GET", f"{self._p}/stat", params={"path": path}))

    def exists(self, path: str) -> bool:
        try:
            self.stat(path)
            return True
        except NotFoundError:
            return False

    def mkdir(self, path: str, *, parents: bool = True) -> None:
        """Creates a directory (with its parents unless ``parents=False``)."""
        body: _wire.MkdirRequest = {"path": path, "parents": parents}
        self._t.request("POST", f"{self._p}/mkdir", json=body, retry=b.RETRY_IDEMPOTENT)

    def remove(self, path: str, *, recursive: bool = False) -> None:
        """Removes a file, or a directory (non-empty ones need ``recursive=True``)."""
        params = {"path": path}
        if recursive:
            params["recursive"] = "true"
        self._t.request("DELETE", self._p, params=params)

    def url(self, path: str, *, method: str = "GET", expires_in: int = 3600) -> FileUrl:
        """A signed URL that downloads (``method="GET"``) or uploads (``method="PUT"``) the
        file at ``path`` without an API key, for ``expires_in`` seconds (1 to 604800: 7 days) —
        for a browser, ``curl`` or another service. Anyone holding it can do that one thing to
        that one file until it expires."""
        verb = method.upper()
        if verb not in ("GET", "PUT"):
            raise ValueError(f"method must be GET or PUT, not {method!r}")
        body: _wire.FileUrlRequest = {"path": path, "method": verb, "expires_in": expires_in}  # type: ignore[typeddict-item]
        d = self._t.json("POST", f"/v1/sandboxes/{b.seg(self._sb.id)}/files/url", json=body)
        return FileUrl.from_json(d, self._t.cfg.base_url)

    def watch(self, path: str, *, recursive: bool = False) -> Iterator[WatchEvent]:
        """Watches the directory ``path`` (and every directory below it with
        ``recursive=True``): yields a ``ready`` :class:`WatchEvent` once the watch is armed, then
        ``create``/``modify``/``delete``/``rename``/``overflow`` events as changes happen, until
        you stop iterating (which ends the watch) or the watch ends: a deleted sandbox or a
        directory that went away raises :class:`~pandastack.StreamError`. A hibernated sandbox is
        woken to arm the watch; if it hibernates later the watch waits, and yields ``ready``
        again once the sandbox runs (changes while it slept are not told)."""
        resp = self._t.request(
            "GET",
            f"/v1/sandboxes/{b.seg(self._sb.id)}/files/watch",
            params={"path": path, "recursive": "true" if recursive else "false"},
            headers={"Accept": "text/event-stream"},
            timeout=b.exec_stream_timeout(None),
            stream=True,
        )
        dec = b.SSEDecoder()
        try:
            try:
                for line in resp.iter_lines():
                    pair = dec.feed(line)
                    if pair is None:
                        continue
                    ev = b.watch_event(*pair)
                    if ev is not None:
                        yield ev
            except httpx.TransportError as e:
                raise b.error_from_exception(e, "file watch") from e
        finally:
            resp.close()

    def rename(self, src: str, dst: str, *, overwrite: bool = False) -> None:
        """Moves ``src`` to ``dst`` (fails if ``dst`` exists unless ``overwrite=True``)."""
        body: _wire.RenameRequest = {"from": src, "to": dst, "overwrite": overwrite}
        self._t.request("POST", f"{self._p}/rename", json=body)
