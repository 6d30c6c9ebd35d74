/**
 * `client.webhooks`: endpoints the server POSTs the workspace's events to. Each event whose
 * type matches a webhook's `events` is sent signed per Standard Webhooks with the webhook's
 * secret (`webhook-id`, `webhook-timestamp`, `webhook-signature` headers), retried for about a
 * day, at least once (drop doubles by `webhook-id`):
 *
 * ```ts
 * const wh = await client.webhooks.create({ url: "https://example.com/hooks", events: ["sandbox.*"] });
 * save(wh.secret);                                         // shown by the create only
 * for await (const d of client.webhooks.deliveries(wh.id)) console.log(d.eventType, d.state, d.lastError);
 * ```
 *
 * Another workspace's webhook, or an unknown id, throws {@link NotFoundError}.
 */

import { InvalidArgumentError } from "./errors.js";
import type { HttpClient } from "./http.js";
import { Paginator, type Page } from "./pagination.js";
import type { CallOptions } from "./sandbox.js";
import { webhookDeliveryFromWire, webhookFromWire, type Webhook, type WebhookDelivery } from "./types.js";
import type { WireBody } from "./wire.js";

/** Options of {@link Webhooks.create}. */
export interface CreateWebhookOptions extends CallOptions {
  /** `http(s)://…` to a public address (an internal one only if the operator allows it). */
  url: string;
  /** 1-64 patterns: exact types (`sandbox.created`), `<kind>.*` or `*`. */
  events: string[];
  /** `whsec_` + base64 of 24-64 bytes; generated when not given. */
  secret?: string;
  /** A retry with the same key returns the same webhook (one is generated when not given). */
  idempotencyKey?: string;
}

/** Paging of {@link Webhooks.list} and {@link Webhooks.deliveries}. */
export interface ListWebhooksOptions extends CallOptions {
  /** Page size (1-1000). */
  limit?: number;
  /** Start after this cursor (from a previous page's `nextCursor`). */
  cursor?: string;
}

export class Webhooks {
  /** @internal */
  constructor(
    private readonly http: HttpClient,
    private readonly newIdempotencyKey: () => Promise<string>,
  ) {}

  /**
   * A new webhook, with its `secret`: this answer is the only one that shows it. A refused URL
   * or pattern throws {@link InvalidArgumentError}.
   */
  async create(opts: CreateWebhookOptions): Promise<Webhook> {
    if (typeof opts?.url !== "string" || opts.url === "") {
      throw new InvalidArgumentError("url: where the events are POSTed", { code: "invalid_argument" });
    }
    if (!Array.isArray(opts.events)) {
      throw new InvalidArgumentError("events: an array of event types or patterns", { code: "invalid_argument" });
    }
    const body: WireBody<"CreateWebhookRequest"> = { url: opts.url, events: [...opts.events] };
    if (opts.secret !== undefined) body.secret = opts.secret;
    const w = await this.http.request<Record<string, unknown>>({
      method: "POST",
      path: "/v1/webhooks",
      json: body,
      idempotencyKey: opts.idempotencyKey ?? (await this.newIdempotencyKey()),
      retry: "safe",
      ...call(opts),
    });
    return webhookFromWire(w ?? {});
  }

  /** The workspace's webhooks (without secrets), fetched page by page as you iterate. */
  list(opts: ListWebhooksOptions = {}): Paginator<Webhook> {
    return this.paginate("/v1/webhooks", opts, webhookFromWire);
  }

  /** One webhook (without its secret). */
  async get(id: string, opts: CallOptions = {}): Promise<Webhook> {
    const w = await this.http.request<Record<string, unknown>>({ method: "GET", path: webhookPath(id), ...call(opts) });
    return webhookFromWire(w ?? {});
  }

  /** Deletes a webhook: no more deliveries to it. An unknown one throws {@link NotFoundError}. */
  async delete(id: string, opts: CallOptions = {}): Promise<void> {
    await this.http.request({ method: "DELETE", path: webhookPath(id), responseType: "none", ...call(opts) });
  }

  /** The webhook's deliveries, newest event first, fetched page by page as you iterate. */
  deliveries(id: string, opts: ListWebhooksOptions = {}): Paginator<WebhookDelivery> {
    return this.paginate(webhookPath(id, "/deliveries"), opts, webhookDeliveryFromWire);
  }

  /**
   * Sends a delivery again (a delivered or failed one too): it is `pending` again, due now,
   * with a fresh round of attempts. Resolves with it.
   */
  async redeliver(id: string, deliveryId: string, opts: CallOptions = {}): Promise<WebhookDelivery> {
    const w = await this.http.request<Record<string, unknown>>({
      method: "POST",
      path: webhookPath(id, `/deliveries/${segment("delivery id", deliveryId)}/redeliver`),
      retry: "safe",
      ...call(opts),
    });
    return webhookDeliveryFromWire(w ?? {});
  }

  private paginate<T>(path: string, opts: ListWebhooksOptions, map: (w: Record<string, unknown>) => T): Paginator<T> {
    return new Paginator<T>(async (cursor) => {
      const page = await this.http.request<{ data?: unknown[]; next_cursor?: string | null }>({
        method: "GET",
        path,
        query: { limit: opts.limit, cursor },
        ...call(opts),
      });
      const out: Page<T> = {
        data: (page?.data ?? []).map((w) => map(w as Record<string, unknown>)),
        nextCursor: typeof page?.next_cursor === "string" && page.next_cursor ? page.next_cursor : null,
      };
      return out;
    }, opts.cursor);
  }
}

function webhookPath(id: string, rest = ""): string {
  return `/v1/webhooks/${segment("webhook id", id)}${rest}`;
}

function segment(what: string, s: string): string {
  if (typeof s !== "string" || s === "") {
    throw new InvalidArgumentError(`expected a ${what}, got ${JSON.stringify(s)}`, { code: "invalid_argument" });
  }
  return encodeURIComponent(s);
}

function call(opts: CallOptions): { timeoutMs?: number; signal?: AbortSignal } {
  const o: { timeoutMs?: number; signal?: AbortSignal } = {};
  if (opts.timeoutMs !== undefined) o.timeoutMs = opts.timeoutMs;
  if (opts.signal !== undefined) o.signal = opts.signal;
  return o;
}
