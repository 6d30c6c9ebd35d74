"""Webhook deliveries checked with the Standard Webhooks reference library (``standardwebhooks``).

Two checks, neither needing the SDK to know webhooks yet (the API is called with httpx):

* ``test_a_captured_delivery_verifies`` (offline): a delivery the Rust fast test captured —
  ``PANDASTACK_WEBHOOK_CAPTURE=/tmp/delivery.json cargo test -p pandastack-testkit --test
  api_fast events::a_receiver_that_fails`` writes it — verifies with the library. Skipped when
  the variable is not set.
* ``test_deliveries_from_the_server_verify`` (a real server): a receiver on
  ``127.0.0.1:$PANDASTACK_TEST_WEBHOOK_PORT`` gets a sandbox's ``sandbox.created`` and
  ``sandbox.killed``, each verified with the library. The server must allow that address
  (``--allow-internal-fetch 127.0.0.1:PORT``, as scripts/test-clients.sh starts it); skipped when
  the variable is not set.
"""

from __future__ import annotations

import json
import os
import threading
import time
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Dict, List, Tuple

import httpx
import pytest
from standardwebhooks.webhooks import Webhook

from conftest import CREATED


@pytest.mark.offline
def test_a_captured_delivery_verifies() -> None:
    path = os.environ.get("PANDASTACK_WEBHOOK_CAPTURE")
    if not path or not os.path.exists(path):
        pytest.skip("PANDASTACK_WEBHOOK_CAPTURE names no captured delivery")
    with open(path) as f:
        cap = json.load(f)
    wh = Webhook(cap["secret"])
    headers = cap["headers"]
    body = cap["body"].encode()
    # The library's own signature of what was received equals the one sent.
    ts = datetime.fromtimestamp(int(headers["webhook-timestamp"]), tz=timezone.utc)
    assert wh.sign(headers["webhook-id"], ts, body) in headers["webhook-signature"].split(" ")
    # And its verification accepts it while the timestamp is within its 5 minutes' tolerance.
    if abs(time.time() - int(headers["webhook-timestamp"])) < 300:
        event = wh.verify(body, headers)
        assert event["id"] == headers["webhook-id"]
    # One byte changed, or another secret: refused.
    with pytest.raises(Exception):
        Webhook(cap["secret"]).verify(body + b" ", {**headers, "webhook-timestamp": str(int(time.time()))})
    with pytest.raises(Exception):
        Webhook("whsec_" + "A" * 32).verify(body, {**headers, "webhook-timestamp": str(int(time.time()))})


class _Receiver(BaseHTTPRequestHandler):
    got: List[Tuple[Dict[str, str], bytes]] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        n = int(self.headers.get("content-length", "0"))
        body = self.rfile.read(n)
        type(self).got.append(({k.lower(): v for k, v in self.headers.items()}, body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_deliveries_from_the_server_verify(client, template: str, tags: Dict[str, str]) -> None:
    port = os.environ.get("PANDASTACK_TEST_WEBHOOK_PORT")
    if not port:
        pytest.skip("PANDASTACK_TEST_WEBHOOK_PORT is not set (the server must allow 127.0.0.1:PORT)")
    _Receiver.got = []
    server = HTTPServer(("127.0.0.1", int(port)), _Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = os.environ["PANDASTACK_BASE_URL"].rstrip("/")
    auth = {"authorization": f"Bearer {os.environ['PANDASTACK_API_KEY']}"}
    with httpx.Client(base_url=base, headers=auth, timeout=30) as http:
        r = http.post(
            "/v1/webhooks",
            json={"url": f"http://127.0.0.1:{port}/hook", "events": ["sandbox.created", "sandbox.killed"]},
        )
        assert r.status_code == 201, r.text
        hook = r.json()
        try:
            sb = client.sandboxes.create(template=template, metadata=tags)
            CREATED.add(sb.id)
            sb.kill()
            wh = Webhook(hook["secret"])
            deadline = time.time() + 30
            mine: List[dict] = []
            while time.time() < deadline:
                mine = []
                for headers, body in list(_Receiver.got):
                    event = wh.verify(body, headers)  # raises on a bad signature
                    assert event["id"] == headers["webhook-id"]
                    if event["resource"]["id"] == sb.id:
                        mine.append(event)
                if len(mine) >= 2:
                    break
                time.sleep(0.2)
            assert [e["type"] for e in mine] == ["sandbox.created", "sandbox.killed"], mine
            # Recorded once the receiver answered: the history says delivered, one attempt each.
            ids = {e["id"] for e in mine}
            ours: List[dict] = []
            for _ in range(50):
                deliveries = http.get(f"/v1/webhooks/{hook['id']}/deliveries").json()["data"]
                ours = [d for d in deliveries if d["event_id"] in ids]
                if len(ours) == 2 and all(d["state"] == "delivered" for d in ours):
                    break
                time.sleep(0.2)
            assert [(d["state"], d["attempts"]) for d in ours] == [("delivered", 1)] * 2, ours
        finally:
            http.delete(f"/v1/webhooks/{hook['id']}")
            server.shutdown()
