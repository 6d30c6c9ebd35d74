"""Preview URLs against a real server: a web server inside the sandbox reached at the URL the
SDK returns, through the server's preview proxy (``PANDASTACK_PROXY``, set by
``scripts/dev-server.sh``: the address the proxy listens on, since ``*.localhost`` names need
not resolve here)."""

from __future__ import annotations

import os
import time
from urllib.parse import urlsplit

import httpx
import pytest


def _proxy() -> str:
    p = os.environ.get("PANDASTACK_PROXY")
    if not p:
        pytest.fail("PANDASTACK_PROXY is not set (scripts/dev-server.sh prints it)")
    return p


def _get(url: str, path: str, token: str = "") -> httpx.Response:
    host = urlsplit(url).netloc
    headers = {"Host": host}
    if token:
        headers["X-PandaStack-Access-Token"] = token
    return httpx.get(f"http://{_proxy()}{path}", headers=headers, timeout=120)


def test_get_url_reaches_a_server_in_the_sandbox(make_sandbox):
    sb = make_sandbox()
    sb.files.write("/srv/www/index.html", "hello from the sandbox\n")
    sb.exec(
        "setsid python3 -m http.server 8000 --bind 127.0.0.1 -d /srv/www </dev/null >/dev/null 2>&1 &",
        check=True,
    )
    deadline = time.monotonic() + 60
    while sb.exec("python3 -c \"import socket; socket.create_connection(('127.0.0.1', 8000))\"").exit_code:
        assert time.monotonic() < deadline, "the web server did not start"
        time.sleep(0.2)

    url = sb.get_url(8000)
    assert url.split("://")[1].startswith(f"8000-{sb.id}.")
    p = sb.get_port(8000)
    assert (p.url, p.port, p.public) == (url, 8000, False)
    assert len(p.token) == 32

    assert _get(url, "/").status_code == 401
    r = _get(url, "/index.html", p.token)
    assert r.status_code == 200 and r.text == "hello from the sandbox\n"

    assert sb.set_port_public(8000).public is True
    assert _get(url, "/index.html").status_code == 200
    assert sb.set_port_public(8000, False).public is False
    assert _get(url, "/index.html").status_code == 401

    # Nothing listening on another port: 502 with the server's code.
    r = _get(sb.get_url(8001), "/", p.token)
    assert r.status_code == 502 and r.json()["error"]["code"] == "port_not_listening"
