# Generated from _async/transport.py by scripts/gen-sync-client.py: do not edit by hand.
# Change _async/transport.py, then run `python3 scripts/gen-sync-client.py` (CI runs it with --check).
"""The client's HTTP transport: every request, with retries, and errors raised as
:class:`~pandastack.PandaStackError`."""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping, Optional

import httpx

from .. import _base as b


class _Transport:
    def __init__(
        self,
        cfg: b.Config,
        http_client: Optional[httpx.Client],
        headers: Optional[Mapping[str, str]],
    ) -> None:
        self.cfg = cfg
        self._own = http_client is None
        self.http = http_client or httpx.Client(timeout=b.timeout_for(None, cfg.timeout))
        self.headers = {**b.default_headers(cfg), **dict(headers or {})}

    def close(self) -> None:
        if self._own:
            self.http.close()

    def request(
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
                    resp = self.http.send(req, stream=True)
                    if resp.status_code < 400 and not stream:
                        try:
                            resp.read()
                        finally:
                            resp.close()
                except httpx.TransportError as e:
                    if attempt < cfg.max_retries and b.retryable_exception(retry, e):
                        time.sleep(b.backoff(cfg, attempt, None) or 0.0)
                        attempt += 1
                        continue
                    raise b.error_from_exception(e, what) from e
            finally:
                if content_factory is not None and hasattr(body, "close"):
                    body.close()
            if resp.status_code >= 400:
                try:
                    data = resp.read()
                except httpx.TransportError:
                    data = b""
                finally:
                    resp.close()
                err = b.error_from_response(resp, data)
                if (
                    attempt < cfg.max_retries
                    and b.retryable_status(retry, resp.status_code)
                    and err.code != "limit_reached"
                ):
                    wait = b.backoff(cfg, attempt, getattr(err, "retry_after", None))
                    if wait is not None:
                        time.sleep(wait)
                        attempt += 1
                        continue
                raise err
            return resp

    def json(self, method: str, path: str, **kw: Any) -> Any:
        resp = self.request(method, path, **kw)
        if resp.status_code == 204 or not resp.content:
            return None
        return resp.json()
