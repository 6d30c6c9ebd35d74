"""The client's HTTP transport: every request, with retries, and errors raised as
:class:`~pandastack.PandaStackError`.

Async: also the upload bodies httpx's async client needs (local files read in a worker
thread)."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Callable, Iterable, Mapping, Optional

import httpx

from .. import _base as b


# unasync: async-only
async def _file_chunks(path: str, size: int) -> AsyncIterator[bytes]:
    loop = asyncio.get_running_loop()
    f = await loop.run_in_executor(None, open, path, "rb")
    try:
        while True:
            chunk = await loop.run_in_executor(None, f.read, size)
            if not chunk:
                return
            yield chunk
    finally:
        f.close()


async def _reader_chunks(f: Any, size: int) -> AsyncIterator[bytes]:
    """A binary file object's content, read in a worker thread (the event loop never blocks on
    a slow disk)."""
    loop = asyncio.get_running_loop()
    while True:
        chunk = await loop.run_in_executor(None, f.read, size)
        if not chunk:
            return
        yield bytes(chunk)


async def _aiter_sync(it: Iterable[bytes]) -> AsyncIterator[bytes]:
    for chunk in it:
        yield bytes(chunk)


def _stream_body(data: Any) -> Any:
    """A caller's stream as an upload body: async iterables as they are, file objects and plain
    iterables wrapped (httpx's async client sends async iterables only)."""
    if hasattr(data, "read"):
        reader = data.read
        return _aiter_sync(iter(lambda: reader(b.CHUNK_SIZE), b""))
    if not hasattr(data, "__aiter__"):
        return _aiter_sync(data)
    return data


# unasync: end
class _AsyncTransport:
    def __init__(
        self,
        cfg: b.Config,
        http_client: Optional[httpx.AsyncClient],
        headers: Optional[Mapping[str, str]],
    ) -> None:
        self.cfg = cfg
        self._own = http_client is None
        self.http = http_client or httpx.AsyncClient(timeout=b.timeout_for(None, cfg.timeout))
        self.headers = {**b.default_headers(cfg), **dict(headers or {})}

    async def close(self) -> None:
        if self._own:
            await self.http.aclose()

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Optional[Mapping[str, str]] = None,
        json: Any = None,
        content: Any = None,
        content_factory: Optional[Callable[[], Any]] = None,
        headers: Optional[Mapping[str, str]] = None,
        timeout: Optional[httpx.Timeout] = None,
        retry: Optional[str] = None,
        stream: bool = False,
    ) -> httpx.Response:
        """Sends a request with retries. Raises a :class:`PandaStackError` for error statuses.
        With ``stream=True`` the caller must close the returned response."""
        if retry is None:
            if method in ("GET", "HEAD"):
                retry = b.RETRY_READ
            elif method in ("PUT", "PATCH", "DELETE"):
                retry = b.RETRY_IDEMPOTENT
            else:
                retry = b.RETRY_UNSAFE
        cfg = self.cfg
        url = cfg.base_url + path
        hdrs = {**self.headers, **dict(headers or {})}
        what = f"{method} {path}"
        attempt = 0
        while True:
            body = content_factory() if content_factory is not None else content
            try:
                req = self.http.build_request(
                    method,
                    url,
                    params=params,
                    json=json,
                    content=body,
                    headers=hdrs,
                    timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
                )
                try:
                    resp = await self.http.send(req, stream=True)
                    if resp.status_code < 400 and not stream:
                        try:
                            await resp.aread()
                        finally:
                            await resp.aclose()
                except httpx.TransportError as e:
                    if attempt < cfg.max_retries and b.retryable_exception(retry, e):
                        await asyncio.sleep(b.backoff(cfg, attempt, None) or 0.0)
                        attempt += 1
                        continue
                    raise b.error_from_exception(e, what) from e
            finally:
                if content_factory is not None and hasattr(body, "aclose"):
                    await body.aclose()
            if resp.status_code >= 400:
                try:
                    data = await resp.aread()
                except httpx.TransportError:
                    data = b""
                finally:
                    await resp.aclose()
                err = b.error_from_response(resp, data)
                if (
                    attempt < cfg.max_retries
                    and b.retryable_status(retry, resp.status_code)
                    and err.code != "limit_reached"
                ):
                    wait = b.backoff(cfg, attempt, getattr(err, "retry_after", None))
                    if wait is not None:
                        await asyncio.sleep(wait)
                        attempt += 1
                        continue
                raise err
            return resp

    async def json(self, method: str, path: str, **kw: Any) -> Any:
        resp = await self.request(method, path, **kw)
        if resp.status_code == 204 or not resp.content:
            return None
        return resp.json()
