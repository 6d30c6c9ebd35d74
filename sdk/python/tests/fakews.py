"""A scripted WebSocket server on localhost (one connection per test) for offline tests of the
SDK's WebSocket client, exec/ws Process and Pty handles."""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import struct
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class Conn:
    def __init__(self, sock: socket.socket, request: str) -> None:
        self.sock = sock
        self.request = request
        self.buf = b""

    def _read(self, n: int) -> bytes:
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def recv(self) -> Tuple[int, bytes]:
        b0, b1 = self._read(2)
        n = b1 & 0x7F
        if n == 126:
            (n,) = struct.unpack(">H", self._read(2))
        elif n == 127:
            (n,) = struct.unpack(">Q", self._read(8))
        assert b1 & 0x80, "client frames must be masked"
        mask = self._read(4)
        data = bytes(c ^ mask[i % 4] for i, c in enumerate(self._read(n)))
        return b0 & 0x0F, data

    def recv_json(self) -> Dict[str, Any]:
        while True:
            op, data = self.recv()
            if op == 1:
                return json.loads(data)

    def send(self, opcode: int, data: bytes, fin: bool = True) -> None:
        n = len(data)
        head = bytes([(0x80 if fin else 0) | opcode])
        if n < 126:
            head += bytes([n])
        elif n < 65536:
            head += bytes([126]) + struct.pack(">H", n)
        else:
            head += bytes([127]) + struct.pack(">Q", n)
        self.sock.sendall(head + data)

    def send_json(self, obj: Any) -> None:
        self.send(1, json.dumps(obj).encode())

    def close(self) -> None:
        try:
            self.send(8, struct.pack(">H", 1000))
        except OSError:
            pass


class FakeWS:
    """``handler(conn)`` runs for the one accepted connection. ``reject=(status, body)`` answers
    the handshake with an HTTP error instead."""

    def __init__(self, handler: Callable[[Conn], None], reject: Optional[Tuple[int, bytes]] = None):
        self.handler = handler
        self.reject = reject
        self.requests: List[str] = []
        self.error: Optional[BaseException] = None
        self.srv = socket.socket()
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(1)
        self.url = f"http://127.0.0.1:{self.srv.getsockname()[1]}"
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            sock, _ = self.srv.accept()
            data = b""
            while b"\r\n\r\n" not in data:
                data += sock.recv(4096)
            head = data.split(b"\r\n\r\n", 1)[0].decode()
            self.requests.append(head)
            if self.reject:
                status, body = self.reject
                sock.sendall(
                    f"HTTP/1.1 {status} Nope\r\nContent-Type: application/json\r\n"
                    f"X-Request-Id: req_ws\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body
                )
                sock.close()
                return
            key = next(
                line.split(":", 1)[1].strip()
                for line in head.split("\r\n")
                if line.lower().startswith("sec-websocket-key:")
            )
            accept = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()
            sock.sendall(
                (
                    "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                    f"Connection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n\r\n"
                ).encode()
            )
            conn = Conn(sock, head)
            try:
                self.handler(conn)
            finally:
                sock.close()
        except BaseException as e:  # surfaced by the test through .error
            self.error = e

    def __enter__(self) -> "FakeWS":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.thread.join(5)
        self.srv.close()
        if self.error and not exc[0]:
            raise self.error
