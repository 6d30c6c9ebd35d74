"""A small RFC 6455 WebSocket client (sync over ``socket``, async over ``asyncio`` streams) for
the interactive routes ``…/exec/ws`` and ``…/pty``, so the SDK needs no dependency beyond httpx.

It speaks what those routes need: a client handshake with headers (the API key goes in
``Authorization``), masked text and binary frames, fragmented messages, ping/pong and the close
handshake. Extensions and subprotocols are not negotiated.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import socket
import ssl
import struct
import threading
from typing import Dict, Mapping, Optional, Tuple
from urllib.parse import urlencode, urlsplit

from . import _base as b
from .errors import APIConnectionError, PandaStackError

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
MAX_HEADER = 64 * 1024

Message = Tuple[int, bytes]  # (OP_TEXT | OP_BINARY | OP_CLOSE, payload)


class WebSocketClosed(APIConnectionError):
    """The WebSocket closed (or broke) before the stream was over."""


def _target(base_url: str, path: str, params: Optional[Mapping[str, str]]) -> Tuple[str, int, bool, str, str]:
    u = urlsplit(base_url)
    tls = u.scheme == "https"
    host = u.hostname or "localhost"
    port = u.port or (443 if tls else 80)
    full = (u.path.rstrip("/") + path) or "/"
    if params:
        full += "?" + urlencode(params)
    host_header = host if u.port is None else f"{host}:{u.port}"
    if ":" in host and not host.startswith("["):
        host_header = f"[{host}]" + (f":{u.port}" if u.port else "")
    return host, port, tls, full, host_header


def _handshake(target: str, host_header: str, headers: Mapping[str, str]) -> Tuple[bytes, str]:
    key = base64.b64encode(os.urandom(16)).decode()
    lines = [
        f"GET {target} HTTP/1.1",
        f"Host: {host_header}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Key: {key}",
        "Sec-WebSocket-Version: 13",
    ]
    skip = {"host", "upgrade", "connection", "accept", "content-type"}
    for k, v in headers.items():
        if k.lower() not in skip:
            lines.append(f"{k}: {v}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"), key


def _parse_head(head: bytes) -> Tuple[int, str, Dict[str, str]]:
    text = head.decode("latin-1")
    status_line, _, rest = text.partition("\r\n")
    parts = status_line.split(" ", 2)
    if len(parts) < 2 or not parts[1].isdigit():
        raise APIConnectionError(f"websocket: bad status line {status_line!r}", code="connection_error")
    hdrs: Dict[str, str] = {}
    for line in rest.split("\r\n"):
        if ":" in line:
            k, _, v = line.partition(":")
            hdrs[k.strip().lower()] = v.strip()
    return int(parts[1]), parts[2] if len(parts) > 2 else "", hdrs


def _check_accept(key: str, hdrs: Mapping[str, str]) -> None:
    want = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()
    if hdrs.get("sec-websocket-accept") != want:
        raise APIConnectionError("websocket: bad Sec-WebSocket-Accept", code="connection_error")


def _frame(opcode: int, payload: bytes) -> bytes:
    n = len(payload)
    head = bytearray([0x80 | opcode])
    if n < 126:
        head.append(0x80 | n)
    elif n < 1 << 16:
        head.append(0x80 | 126)
        head += struct.pack(">H", n)
    else:
        head.append(0x80 | 127)
        head += struct.pack(">Q", n)
    mask = os.urandom(4)
    head += mask
    return bytes(head) + _xor(payload, mask)


def _xor(data: bytes, mask: bytes) -> bytes:
    if not data:
        return b""
    n = len(data)
    m = (mask * (n // 4 + 1))[:n]
    return (int.from_bytes(data, "big") ^ int.from_bytes(m, "big")).to_bytes(n, "big")


def _lengths(b1: int) -> Tuple[bool, int]:
    return bool(b1 & 0x80), b1 & 0x7F


def _close_payload(code: int = 1000) -> bytes:
    return struct.pack(">H", code)


class SyncWebSocket:
    """A blocking WebSocket. ``send_*`` may be called from another thread than ``recv``."""

    def __init__(self, sock: socket.socket, buffered: bytes) -> None:
        self._sock = sock
        self._buf = bytearray(buffered)
        self._wlock = threading.Lock()
        self.closed = False
        self._close_sent = False

    @classmethod
    def connect(
        cls,
        base_url: str,
        path: str,
        params: Optional[Mapping[str, str]],
        headers: Mapping[str, str],
        connect_timeout: float,
    ) -> "SyncWebSocket":
        host, port, tls, target, host_header = _target(base_url, path, params)
        try:
            sock = socket.create_connection((host, port), timeout=connect_timeout)
            if tls:
                sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
            req, key = _handshake(target, host_header, headers)
            sock.sendall(req)
            buf = bytearray()
            while b"\r\n\r\n" not in buf:
                chunk = sock.recv(4096)
                if not chunk:
                    raise APIConnectionError("websocket: connection closed during handshake", code="connection_error")
                buf += chunk
                if len(buf) > MAX_HEADER:
                    raise APIConnectionError("websocket: response head too large", code="connection_error")
        except OSError as e:
            raise APIConnectionError(f"websocket {path}: {type(e).__name__}: {e}", code="connection_error") from e
        head, _, rest = bytes(buf).partition(b"\r\n\r\n")
        status, reason, hdrs = _parse_head(head)
        if status != 101:
            body = bytearray(rest)
            want = int(hdrs.get("content-length") or 0)
            try:
                while len(body) < want:
                    chunk = sock.recv(want - len(body))
                    if not chunk:
                        break
                    body += chunk
            except OSError:
                pass
            sock.close()
            raise b.error_from_parts(status, hdrs.get("x-request-id"), hdrs.get("retry-after"), bytes(body), reason)
        _check_accept(key, hdrs)
        sock.settimeout(None)
        return cls(sock, rest)

    def _read(self, n: int) -> bytes:
        while len(self._buf) < n:
            try:
                chunk = self._sock.recv(max(65536, n - len(self._buf)))
            except OSError as e:
                self.closed = True
                raise WebSocketClosed(f"websocket: {type(e).__name__}: {e}", code="connection_error") from e
            if not chunk:
                self.closed = True
                raise WebSocketClosed("websocket: connection closed by the server", code="connection_error")
            self._buf += chunk
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    def _send(self, opcode: int, payload: bytes) -> None:
        with self._wlock:
            if self.closed or self._close_sent:
                raise WebSocketClosed("websocket: already closed", code="connection_error")
            try:
                self._sock.sendall(_frame(opcode, payload))
            except OSError as e:
                self.closed = True
                raise WebSocketClosed(f"websocket: {type(e).__name__}: {e}", code="connection_error") from e
            if opcode == OP_CLOSE:
                self._close_sent = True

    def send_text(self, text: str) -> None:
        self._send(OP_TEXT, text.encode("utf-8"))

    def send_binary(self, data: bytes) -> None:
        self._send(OP_BINARY, data)

    def recv(self) -> Message:
        """The next whole message: ``(OP_TEXT|OP_BINARY, payload)`` or ``(OP_CLOSE, payload)``."""
        parts = []
        first_op = None
        while True:
            b0, b1 = self._read(2)
            fin, opcode = bool(b0 & 0x80), b0 & 0x0F
            masked, n = _lengths(b1)
            if n == 126:
                (n,) = struct.unpack(">H", self._read(2))
            elif n == 127:
                (n,) = struct.unpack(">Q", self._read(8))
            mask = self._read(4) if masked else b""
            payload = self._read(n) if n else b""
            if masked:
                payload = _xor(payload, mask)
            if opcode == OP_PING:
                try:
                    self._send(OP_PONG, payload)
                except WebSocketClosed:
                    pass
                continue
            if opcode == OP_PONG:
                continue
            if opcode == OP_CLOSE:
                if not self._close_sent:
                    try:
                        self._send(OP_CLOSE, payload[:2] or _close_payload())
                    except WebSocketClosed:
                        pass
                self._shutdown()
                return OP_CLOSE, payload
            if opcode != OP_CONT:
                first_op = opcode
            parts.append(payload)
            if fin:
                return first_op or OP_BINARY, b"".join(parts)

    def close(self, code: int = 1000) -> None:
        if self.closed:
            return
        try:
            if not self._close_sent:
                self._send(OP_CLOSE, _close_payload(code))
        except PandaStackError:
            pass
        self._shutdown()

    def _shutdown(self) -> None:
        self.closed = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()


class AsyncWebSocket:
    """An asyncio WebSocket; one task should ``recv`` while others may ``send_*``."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, buffered: bytes) -> None:
        self._reader = reader
        self._writer = writer
        self._buf = bytearray(buffered)
        self._wlock = asyncio.Lock()
        self.closed = False
        self._close_sent = False

    @classmethod
    async def connect(
        cls,
        base_url: str,
        path: str,
        params: Optional[Mapping[str, str]],
        headers: Mapping[str, str],
        connect_timeout: float,
    ) -> "AsyncWebSocket":
        host, port, tls, target, host_header = _target(base_url, path, params)
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(
                    host, port, ssl=ssl.create_default_context() if tls else None,
                    limit=1 << 20,
                ),
                connect_timeout,
            )
            req, key = _handshake(target, host_header, headers)
            writer.write(req)
            await writer.drain()
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), connect_timeout)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as e:
            raise APIConnectionError(f"websocket {path}: {type(e).__name__}: {e}", code="connection_error") from e
        status, reason, hdrs = _parse_head(head[:-4])
        if status != 101:
            want = int(hdrs.get("content-length") or 0)
            body = b""
            try:
                if want:
                    body = await asyncio.wait_for(reader.readexactly(want), connect_timeout)
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError):
                pass
            writer.close()
            raise b.error_from_parts(status, hdrs.get("x-request-id"), hdrs.get("retry-after"), body, reason)
        _check_accept(key, hdrs)
        return cls(reader, writer, b"")

    async def _read(self, n: int) -> bytes:
        try:
            return await self._reader.readexactly(n)
        except (OSError, asyncio.IncompleteReadError) as e:
            self.closed = True
            raise WebSocketClosed("websocket: connection closed by the server", code="connection_error") from e

    async def _send(self, opcode: int, payload: bytes) -> None:
        async with self._wlock:
            if self.closed or self._close_sent:
                raise WebSocketClosed("websocket: already closed", code="connection_error")
            try:
                self._writer.write(_frame(opcode, payload))
                await self._writer.drain()
            except OSError as e:
                self.closed = True
                raise WebSocketClosed(f"websocket: {type(e).__name__}: {e}", code="connection_error") from e
            if opcode == OP_CLOSE:
                self._close_sent = True

    async def send_text(self, text: str) -> None:
        await self._send(OP_TEXT, text.encode("utf-8"))

    async def send_binary(self, data: bytes) -> None:
        await self._send(OP_BINARY, data)

    async def recv(self) -> Message:
        parts = []
        first_op = None
        while True:
            b0, b1 = await self._read(2)
            fin, opcode = bool(b0 & 0x80), b0 & 0x0F
            masked, n = _lengths(b1)
            if n == 126:
                (n,) = struct.unpack(">H", await self._read(2))
            elif n == 127:
                (n,) = struct.unpack(">Q", await self._read(8))
            mask = await self._read(4) if masked else b""
            payload = await self._read(n) if n else b""
            if masked:
                payload = _xor(payload, mask)
            if opcode == OP_PING:
                try:
                    await self._send(OP_PONG, payload)
                except WebSocketClosed:
                    pass
                continue
            if opcode == OP_PONG:
                continue
            if opcode == OP_CLOSE:
                if not self._close_sent:
                    try:
                        await self._send(OP_CLOSE, payload[:2] or _close_payload())
                    except WebSocketClosed:
                        pass
                await self._shutdown()
                return OP_CLOSE, payload
            if opcode != OP_CONT:
                first_op = opcode
            parts.append(payload)
            if fin:
                return first_op or OP_BINARY, b"".join(parts)

    async def close(self, code: int = 1000) -> None:
        if self.closed:
            return
        try:
            if not self._close_sent:
                await self._send(OP_CLOSE, _close_payload(code))
        except PandaStackError:
            pass
        await self._shutdown()

    async def _shutdown(self) -> None:
        self.closed = True
        try:
            self._writer.close()
            await self._writer.wait_closed()
        except (OSError, asyncio.CancelledError):
            pass
