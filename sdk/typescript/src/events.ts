/**
 * `client.events`: every lifecycle change of the workspace's resources (`sandbox.created`,
 * `deploy.live`, `schedule.failed`, …; the server's docs/events.md lists them), oldest first, a
 * page at a time or as a resumable Server-Sent Events stream:
 *
 * ```ts
 * for await (const ev of client.events.list({ type: "sandbox.*" })) console.log(ev.id, ev.type, ev.resource.id);
 * for await (const ev of client.events.stream({ after: lastId })) handle(ev);   // waits for new ones
 * ```
 *
 * `type` filters by an exact type, `<kind>.*` or `*`; `resource` by a resource's id (a sandbox's
 * `sb-…`; templates, apps, functions and schedules by name).
 */

import { APIConnectionError, PandaStackError } from "./errors.js";
import type { HttpClient } from "./http.js";
import { Paginator, type Page } from "./pagination.js";
import type { CallOptions } from "./sandbox.js";
import { parseSse } from "./sse.js";
import { eventFromWire, type EventInfo } from "./types.js";

/** The filters of {@link Events.list} and {@link Events.stream}. */
export interface EventFilterOptions {
  /** An exact type (`sandbox.created`), `<kind>.*` or `*`. */
  type?: string;
  /** A resource's id (or, for resources addressed by name, its name). */
  resource?: string;
}

/** Options of {@link Events.list}. */
export interface ListEventsOptions extends EventFilterOptions, CallOptions {
  /** Page size (1-1000, default 100). */
  limit?: number;
  /** Start after this event id (`"0"` or none: the oldest kept; events are kept 30 days). */
  cursor?: string;
}

/** Options of {@link Events.stream}. */
export interface StreamEventsOptions extends EventFilterOptions {
  /** Start after this event id (`"0"`: every event kept); none: the events from now on. */
  after?: string;
  /** Ends the stream (the iteration throws the abort reason). */
  signal?: AbortSignal;
  /** Pause before reopening a broken connection (default 1000). */
  retryDelayMs?: number;
}

/** A stream carries a keep-alive at least every 15 s: this long without a byte means the connection is gone. */
const STREAM_IDLE_MS = 60_000;
/** Pause before reopening a broken event stream. */
const STREAM_RETRY_DELAY_MS = 1_000;
/** Reopenings in a row without a new event before the connection's error is thrown. */
export const EVENT_STREAM_MAX_FAILURES = 5;

export class Events {
  /** @internal */
  constructor(private readonly http: HttpClient) {}

  /** The events after `cursor`, oldest first, fetched page by page as you iterate. */
  list(opts: ListEventsOptions = {}): Paginator<EventInfo> {
    return new Paginator<EventInfo>(async (cursor) => {
      const page = await this.http.request<{ data?: unknown[]; next_cursor?: string | null }>({
        method: "GET",
        path: "/v1/events",
        query: { limit: opts.limit, cursor, type: opts.type, resource: opts.resource },
        ...call(opts),
      });
      const out: Page<EventInfo> = {
        data: (page?.data ?? []).filter(isObject).map((w) => eventFromWire(w)),
        nextCursor: typeof page?.next_cursor === "string" && page.next_cursor ? page.next_cursor : null,
      };
      return out;
    }, opts.cursor);
  }

  /**
   * Yields events as they happen, until you stop iterating or abort `signal`: those after the
   * event id `after` first, or, without it, the events from now on. A broken connection is
   * reopened where it left off (`Last-Event-ID`: the server sends exactly the events after the
   * last one yielded); after {@link EVENT_STREAM_MAX_FAILURES} reopenings in a row without an
   * event, the connection's error is thrown. An error answer (401, 403, …) is thrown at once.
   * To resume later, keep the last event's `id` and pass it as `after`.
   */
  async *stream(opts: StreamEventsOptions = {}): AsyncGenerator<EventInfo, void, undefined> {
    const signal = opts.signal;
    let last = opts.after;
    let failures = 0;
    for (;;) {
      const ctl = new AbortController();
      const onAbort = () => ctl.abort(signal?.reason);
      if (signal?.aborted) throw abortReason(signal);
      signal?.addEventListener("abort", onAbort, { once: true });
      let idle: ReturnType<typeof setTimeout> | undefined;
      const disarm = () => {
        if (idle !== undefined) clearTimeout(idle);
        idle = undefined;
      };
      const arm = () => {
        disarm();
        idle = setTimeout(() => ctl.abort(), STREAM_IDLE_MS);
      };
      let broken: unknown;
      try {
        arm();
        const headers: Record<string, string> = { accept: "text/event-stream" };
        if (last !== undefined) headers["last-event-id"] = last;
        const res = await this.http.request({
          method: "GET",
          path: "/v1/events",
          query: { cursor: last, type: opts.type, resource: opts.resource },
          headers,
          responseType: "stream",
          timeoutMs: STREAM_IDLE_MS,
          signal: ctl.signal,
        });
        if (!res.body) throw new APIConnectionError("event stream: empty response", { code: "stream_incomplete" });
        // Any byte (keep-alives included) shows the connection is alive.
        const body = res.body.pipeThrough(
          new TransformStream<Uint8Array, Uint8Array>({
            transform(chunk, c) {
              if (idle !== undefined) arm();
              c.enqueue(chunk);
            },
          }),
        );
        for await (const msg of parseSse(body)) {
          let w: unknown;
          try {
            w = JSON.parse(msg.data);
          } catch {
            continue;
          }
          if (!isObject(w) || typeof w.id !== "string") continue;
          const ev = eventFromWire(w);
          last = ev.id;
          failures = 0;
          // The consumer's time is not the connection's idleness.
          disarm();
          yield ev;
          arm();
        }
      } catch (e) {
        if (signal?.aborted) throw abortReason(signal);
        // A broken connection (or one the idle watchdog tore down) is reopened; an answer from
        // the server (401, 403, 5xx after retries, …) is final.
        if (e instanceof PandaStackError && !(e instanceof APIConnectionError)) throw e;
        broken = e;
      } finally {
        disarm();
        signal?.removeEventListener("abort", onAbort);
        ctl.abort();
      }
      failures += 1;
      if (failures > EVENT_STREAM_MAX_FAILURES) {
        if (broken instanceof PandaStackError) throw broken;
        throw new APIConnectionError(
          broken === undefined
            ? "event stream: the server keeps ending it"
            : `event stream: ${broken instanceof Error ? broken.message : String(broken)}`,
          { code: broken === undefined ? "stream_incomplete" : "connection_error", ...(broken !== undefined ? { cause: broken } : {}) },
        );
      }
      await sleep(opts.retryDelayMs ?? STREAM_RETRY_DELAY_MS, signal);
    }
  }
}

function isObject(v: unknown): v is Record<string, unknown> {
  return !!v && typeof v === "object" && !Array.isArray(v);
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(abortReason(signal));
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(abortReason(signal!));
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

function abortReason(signal: AbortSignal): unknown {
  return signal.reason ?? new DOMException("This operation was aborted", "AbortError");
}

function call(opts: CallOptions): { timeoutMs?: number; signal?: AbortSignal } {
  const o: { timeoutMs?: number; signal?: AbortSignal } = {};
  if (opts.timeoutMs !== undefined) o.timeoutMs = opts.timeoutMs;
  if (opts.signal !== undefined) o.signal = opts.signal;
  return o;
}
