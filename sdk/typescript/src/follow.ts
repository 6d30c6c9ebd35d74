/**
 * Following a log to its end: `GET …/logs?follow=1` answers Server-Sent Events, `log` events
 * `{"data": text}` with the log from its start and then every piece appended, and one `end`
 * event `{"reason": …}` when the log ends (a template build, a deploy, an app's VM). A broken
 * connection is reopened; the new one sends the log from the top again, and what was passed on
 * already is skipped. Template builds (`templates.build`) and apps (`apps.deployLogs`,
 * `apps.logs`) follow their logs with this.
 */

import { APIConnectionError, PandaStackError } from "./errors.js";
import type { HttpClient, Query } from "./http.js";
import { parseSse } from "./sse.js";

/** A followed log carries a keep-alive at least every 15 s: this long without a byte means the connection is gone. */
const FOLLOW_IDLE_MS = 60_000;
/** Pause before reopening a broken log stream. */
const FOLLOW_RETRY_DELAY_MS = 1_000;
/** Reopenings in a row without new log text before giving up. */
const FOLLOW_MAX_FAILURES = 5;

/** What gets each new piece of a followed log. */
export type LogCallback = (text: string) => void | Promise<void>;

/** @internal */
export class LogFollower {
  /** Characters of log passed on so far. */
  seen = 0;
  /** Why the log ended (`undefined` while it goes on). */
  reason: string | undefined;
  private failures = 0;

  /**
   * `what` names the log in errors; `deadline` (a `Date.now()` time, or none) bounds the whole
   * follow: a connection open at the deadline is closed.
   */
  constructor(
    private readonly http: HttpClient,
    readonly path: string,
    readonly query: Query,
    readonly what: string,
    readonly deadline?: number,
  ) {}

  expired(): boolean {
    return this.deadline !== undefined && Date.now() >= this.deadline;
  }

  /**
   * One connection: passes each new piece of text to `onLog` until the `end` event (then
   * {@link reason} is set), the deadline, or a broken stream; then, unless the log ended or the
   * time ran out, pauses before the caller reconnects. Throws once the stream keeps breaking
   * without new text, on an error answer of the server (404, 5xx after retries, …), when
   * `signal` aborts, and whatever `onLog` throws.
   */
  async once(onLog: LogCallback | undefined, signal: AbortSignal | undefined): Promise<void> {
    const deadline = this.deadline;
    const ctl = new AbortController();
    const onAbort = () => ctl.abort(signal?.reason);
    signal?.addEventListener("abort", onAbort, { once: true });
    let idle: ReturnType<typeof setTimeout> | undefined;
    const arm = () => {
      if (idle !== undefined) clearTimeout(idle);
      idle = setTimeout(() => ctl.abort(), FOLLOW_IDLE_MS);
    };
    const stop = deadline === undefined ? undefined : setTimeout(() => ctl.abort(), Math.max(0, deadline - Date.now()));
    const seenAtStart = this.seen;
    let offset = 0;
    let callbackError: { e: unknown } | undefined;
    let broken: unknown;
    try {
      arm();
      const res = await this.http.request({
        method: "GET",
        path: this.path,
        query: this.query,
        responseType: "stream",
        timeoutMs: FOLLOW_IDLE_MS,
        signal: ctl.signal,
      });
      if (!res.body) throw new APIConnectionError(`${this.what}: empty response`, { code: "stream_incomplete" });
      // Any byte (keep-alives included) shows the connection is alive.
      const body = res.body.pipeThrough(
        new TransformStream<Uint8Array, Uint8Array>({
          transform(chunk, c) {
            arm();
            c.enqueue(chunk);
          },
        }),
      );
      for await (const msg of parseSse(body)) {
        const payload = jsonObject(msg.data);
        if (msg.event === "end") {
          this.reason = typeof payload.reason === "string" && payload.reason ? payload.reason : "ended";
          break;
        }
        if (msg.event !== "log") continue;
        const text = typeof payload.data === "string" ? payload.data : "";
        const start = offset;
        offset += text.length;
        if (offset <= this.seen) continue;
        const piece = text.slice(Math.max(0, this.seen - start));
        this.seen = offset;
        if (onLog) {
          try {
            await onLog(piece);
          } catch (e) {
            callbackError = { e };
            throw e;
          }
        }
      }
    } catch (e) {
      if (callbackError) throw callbackError.e;
      if (signal?.aborted) throw abortReason(signal);
      // A stream torn down by the deadline or the idle watchdog, or a broken connection, is
      // reopened; an answer from the server (404, 5xx after retries, …) is final.
      if (e instanceof PandaStackError && !(e instanceof APIConnectionError)) throw e;
      broken = e;
    } finally {
      if (idle !== undefined) clearTimeout(idle);
      if (stop !== undefined) clearTimeout(stop);
      signal?.removeEventListener("abort", onAbort);
    }
    if (this.reason !== undefined || this.expired()) return;
    if (this.seen > seenAtStart) this.failures = 0;
    this.failures += 1;
    if (this.failures > FOLLOW_MAX_FAILURES) {
      if (broken instanceof PandaStackError) throw broken;
      throw new APIConnectionError(
        `${this.what}: ${broken === undefined ? "the stream keeps ending without an end event" : describeError(broken)}`,
        { code: broken === undefined ? "stream_incomplete" : "connection_error", cause: broken },
      );
    }
    const wait = deadline === undefined ? FOLLOW_RETRY_DELAY_MS : Math.max(0, Math.min(FOLLOW_RETRY_DELAY_MS, deadline - Date.now()));
    await sleep(wait, signal);
  }
}

function jsonObject(data: string): Record<string, unknown> {
  try {
    const v = JSON.parse(data) as unknown;
    if (v !== null && typeof v === "object") return v as Record<string, unknown>;
  } catch {
    // not JSON: the text itself
  }
  return { data };
}

/** @internal */
export function abortReason(signal: AbortSignal): unknown {
  return signal.reason ?? new DOMException("This operation was aborted", "AbortError");
}

function describeError(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

/** @internal */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(abortReason(signal));
    const onAbort = () => {
      clearTimeout(t);
      reject(abortReason(signal!));
    };
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
