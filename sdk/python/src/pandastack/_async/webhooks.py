"""``client.webhooks``: :class:`AsyncWebhooks`, endpoints the server POSTs the workspace's
events to, and their deliveries."""

from __future__ import annotations

from typing import Optional, Sequence

from .. import _base as b
from ..types import Page, Webhook, WebhookDelivery
from .client import AsyncPandaStack
from .pagination import AsyncPaginator


class AsyncWebhooks:
    """``client.webhooks``: each event whose type matches a webhook's ``events`` is POSTed to
    its URL, signed per Standard Webhooks with the webhook's secret (``webhook-id``,
    ``webhook-timestamp``, ``webhook-signature`` headers), retried for about a day, at least
    once (drop doubles by ``webhook-id``)::

        wh = await client.webhooks.create("https://example.com/hooks", events=["sandbox.*"])
        save(wh.secret)                                   # shown by the create only
        async for d in client.webhooks.deliveries(wh.id):  # newest event first
            print(d.event_type, d.state, d.attempts, d.last_error)

    Another workspace's webhook, or an unknown id, raises :class:`~pandastack.NotFoundError`."""

    def __init__(self, client: "AsyncPandaStack") -> None:
        self._t = client._t

    def _p(self, webhook_id: str, rest: str = "") -> str:
        return f"/v1/webhooks/{b.seg(webhook_id)}{rest}"

    async def create(
        self,
        url: str,
        events: Sequence[str],
        *,
        secret: Optional[str] = None,
        idempotency_key: Optional[str] = None,
    ) -> Webhook:
        """A new webhook, with its ``secret`` (``whsec_`` + base64; generated unless given):
        this answer is the only one that shows it. ``events`` are 1-64 patterns: exact types
        (``sandbox.created``), ``<kind>.*`` or ``*``. ``url`` must be ``http(s)`` to a public
        address unless the operator allows an internal one; a refused URL or pattern raises
        :class:`~pandastack.InvalidArgumentError`. A retry of the same call (same
        ``idempotency_key``, generated when not given) returns the same webhook."""
        body = b.webhook_body(url, events, secret)
        key = idempotency_key or b.new_idempotency_key()
        return Webhook.from_json(
            await self._t.json(
                "POST",
                "/v1/webhooks",
                json=body,
                headers={"Idempotency-Key": key},
                retry=b.RETRY_IDEMPOTENT,
            )
        )

    def list(self, *, limit: Optional[int] = None, cursor: Optional[str] = None) -> AsyncPaginator[Webhook]:
        """Every webhook of the workspace (without secrets), fetched ``limit`` per page as you
        iterate.

        Async: not a coroutine: ``async for wh in client.webhooks.list()``."""

        async def fetch(c: Optional[str]) -> Page[Webhook]:
            data = await self._t.json("GET", "/v1/webhooks", params=b.list_params(limit, c))
            return Page([Webhook.from_json(x) for x in data.get("data", [])], data.get("next_cursor"))

        return AsyncPaginator(fetch, cursor)

    async def get(self, webhook_id: str) -> Webhook:
        """The webhook (without its secret)."""
        return Webhook.from_json(await self._t.json("GET", self._p(webhook_id)))

    async def delete(self, webhook_id: str) -> None:
        """Deletes the webhook: no more deliveries to it."""
        await self._t.request("DELETE", self._p(webhook_id))

    def deliveries(
        self, webhook_id: str, *, limit: Optional[int] = None, cursor: Optional[str] = None
    ) -> AsyncPaginator[WebhookDelivery]:
        """The webhook's deliveries, newest event first, ``limit`` per page as you iterate.

        Async: not a coroutine: ``async for d in client.webhooks.deliveries(wh.id)``."""

        async def fetch(c: Optional[str]) -> Page[WebhookDelivery]:
            data = await self._t.json("GET", self._p(webhook_id, "/deliveries"), params=b.list_params(limit, c))
            return Page([WebhookDelivery.from_json(x) for x in data.get("data", [])], data.get("next_cursor"))

        return AsyncPaginator(fetch, cursor)

    async def redeliver(self, webhook_id: str, delivery_id: str) -> WebhookDelivery:
        """Sends a delivery again (delivered or failed ones too): it is ``pending`` again, due
        now, with a fresh round of attempts; returns it."""
        path = self._p(webhook_id, f"/deliveries/{b.seg(delivery_id)}/redeliver")
        return WebhookDelivery.from_json(await self._t.json("POST", path, retry=b.RETRY_IDEMPOTENT))
