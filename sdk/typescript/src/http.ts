/**
 * The one HTTP path of the SDK: auth header, request timeout, retries with exponential backoff
 * and jitter on 429/502/503 (honouring `Retry-After`), and mapping of error responses to typed
 * errors. Built on the platform `fetch`; no dependencies.
 */

import {
  APIConnectionError,
  PandaStackError,
  LimitReachedError,
  RateLimitError,
  RequestTimeoutError,
  errorFromResponse,
  parseRetryAfter,
} from "./errors.js";
import { VERSION } from "./version.js";

/** What `fetch` accepts as a request body. */
export type BodyInit = NonNullable<RequestInit["body"]>;

export type FetchLike = (input: string | URL, init?: RequestInit) => Promise<Response>;

/**
 * When a failed request may be sent again.
 * - `safe`: on 429, 502, 503 and connection failures (reads, deletes, idempotent writes,
 *   creates carrying an `Idempotency-Key`).
 * - `rejected-only`: only on 429, which the server sends before doing anything (exec, rename,
 *   anything that must not run twice).
 * - `never`: the body cannot be replayed.
 */
export type RetryPolicy = "safe" | "rejected-only" | "never";

export type ResponseType = "json" | "text" | "bytes" | "none" | "stream";

export type Query = Record<string, string | number | boolean | undefined | null>;

export interface RequestOptions {
  method: "GET" | "POST" | "PUT" | "PATCH" | "DELETE";
  path: string;
  query?: Query | URLSearchParams;
  /** A JSON body. */
  json?: unknown;
  /** A raw body; a function is called once per attempt (so a stream can be reopened). */
  body?: BodyInit | (() => BodyInit | Promise<BodyInit>);
  contentType?: string;
  headers?: Record<string, string>;
  /** Sends `Idempotency-Key`; the same key is reused on every retry. */
  idempotencyKey?: string;
  retry?: RetryPolicy;
  responseType?: ResponseType;
  /**
   * Milliseconds until the response (and, except for streams, its whole body) must have
   * arrived; `0` for none. Defaults to the client's `timeoutMs`.
   */
  timeoutMs?: number;
  signal?: AbortSignal;
}

export interface HttpConfig {
  apiKey: string;
  baseUrl: string;
  timeoutMs: number;
  maxRetries: number;
  fetch?: FetchLike;
  headers?: Record<string, string>;
}

/** Upper bound on one backoff wait; a `Retry-After` beyond {@link MAX_RETRY_AFTER_MS} is not waited for. */
const MAX_BACKOFF_MS = 8_000;
const MAX_RETRY_AFTER_MS = 60_000;
const BASE_BACKOFF_MS = 500;

/** @internal */
export class HttpClient {
  readonly baseUrl: string;
  readonly timeoutMs: number;
  readonly maxRetries: number;
  private readonly apiKey: string;
  private readonly fetchImpl: FetchLike;
  private readonly extraHeaders: Record<string, string>;

  constructor(cfg: HttpConfig) {
    this.apiKey = cfg.apiKey;
    this.baseUrl = cfg.baseUrl.replace(/\/+$/, "");
    this.timeoutMs = cfg.timeoutMs;
    this.maxRetries = Math.max(0, Math.floor(cfg.maxRetries));
    const f = cfg.fetch ?? (globalThis.fetch as FetchLike | undefined);
    if (typeof f !== "function") {
      throw new PandaStackError("no fetch implementation: use Node 18 or later, or pass `fetch`", {
        code: "no_fetch",
      });
    }
    this.fetchImpl = f;
    this.extraHeaders = cfg.headers ?? {};
  }

  url(path: string, query?: Query | URLSearchParams): string {
    let qs = "";
    if (query instanceof URLSearchParams) {
      qs = query.toString();
    } else if (query) {
      const p = new URLSearchParams();
      for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== null) p.append(k, String(v));
      qs = p.toString();
    }
    return `${this.baseUrl}${path}${qs ? `?${qs}` : ""}`;
  }

  async request<T = unknown>(opts: RequestOptions & { responseType?: "json" }): Promise<T>;
  async request(opts: RequestOptions & { responseType: "text" }): Promise<string>;
  async request(opts: RequestOptions & { responseType: "bytes" }): Promise<Uint8Array>;
  async request(opts: RequestOptions & { responseType: "none" }): Promise<void>;
  async request(opts: RequestOptions & { responseType: "stream" }): Promise<Response>;
  async request(opts: RequestOptions): Promise<unknown> {
    const policy: RetryPolicy =
      opts.retry ?? (opts.method === "POST" && !opts.idempotencyKey ? "rejected-only" : "safe");
    const type = opts.responseType ?? "json";
    const url = this.url(opts.path, opts.query);
    for (let attempt = 0; ; attempt++) {
      const canRetry = attempt < this.maxRetries && policy !== "never";
      if (opts.signal?.aborted) throw abortReason(opts.signal);
      const timeoutMs = opts.timeoutMs ?? this.timeoutMs;
      const ctl = new AbortController();
      let timedOut = false;
      const timer =
        timeoutMs > 0
          ? setTimeout(() => {
              timedOut = true;
              ctl.abort();
            }, timeoutMs)
          : undefined;
      const onAbort = () => ctl.abort(opts.signal?.reason);
      opts.signal?.addEventListener("abort", onAbort, { once: true });
      const cleanup = () => {
        if (timer !== undefined) clearTimeout(timer);
        opts.signal?.removeEventListener("abort", onAbort);
      };

      let res: Response;
      try {
        res = await this.fetchImpl(url, await this.init(opts, ctl.signal));
      } catch (e) {
        cleanup();
        if (opts.signal?.aborted) throw abortReason(opts.signal);
        if (timedOut) {
          throw new RequestTimeoutError(
            `${opts.method} ${opts.path}: no response within timeoutMs=${timeoutMs}`,
            { code: "request_timeout", cause: e },
          );
        }
        if (e instanceof PandaStackError) throw e;
        const err = new APIConnectionError(
          `${opts.method} ${url}: ${describeFetchError(e)}`,
          { code: "connection_error", cause: e },
        );
        if (canRetry && policy === "safe") {
          await sleep(backoff(attempt, undefined), opts.signal);
          continue;
        }
        throw err;
      }

      if (!res.ok) {
        let text = "";
        try {
          text = await res.text();
        } catch {
          // the status alone will do
        }
        cleanup();
        const err = errorFromResponse(res.status, res.headers, text);
        const retryable =
          (res.status === 429 && !(err instanceof LimitReachedError)) ||
          (policy === "safe" && (res.status === 502 || res.status === 503));
        if (canRetry && retryable) {
          const after =
            err instanceof RateLimitError ? err.retryAfter : parseRetryAfter(res.headers.get("retry-after"));
          const wait = backoff(attempt, after);
          if (wait <= MAX_RETRY_AFTER_MS) {
            await sleep(wait, opts.signal);
            continue;
          }
        }
        throw err;
      }

      if (type === "stream") {
        // The caller owns the body now: no request timeout, but the caller's signal (whose
        // listener stays attached) still cancels it.
        if (timer !== undefined) clearTimeout(timer);
        return res;
      }
      try {
        switch (type) {
          case "none":
            // Read (not cancel) the small body so that the connection can be reused.
            await res.arrayBuffer();
            return undefined;
          case "text":
            return await res.text();
          case "bytes":
            return new Uint8Array(await res.arrayBuffer());
          default: {
            const text = await res.text();
            if (text.trim() === "") return undefined;
            try {
              return JSON.parse(text) as unknown;
            } catch (e) {
              throw new PandaStackError(`${opts.method} ${opts.path}: response is not JSON`, {
                code: "invalid_response",
                status: res.status,
                requestId: res.headers.get("x-request-id") ?? undefined,
                cause: e,
              });
            }
          }
        }
      } catch (e) {
        if (e instanceof PandaStackError) throw e;
        if (opts.signal?.aborted) throw abortReason(opts.signal);
        if (timedOut) {
          throw new RequestTimeoutError(
            `${opts.method} ${opts.path}: response not complete within timeoutMs=${timeoutMs}`,
            { code: "request_timeout", cause: e },
          );
        }
        throw new APIConnectionError(`${opts.method} ${opts.path}: reading the response: ${describeFetchError(e)}`, {
          code: "connection_error",
          cause: e,
        });
      } finally {
        cleanup();
      }
    }
  }

  private async init(opts: RequestOptions, signal: AbortSignal): Promise<RequestInit> {
    const headers: Record<string, string> = {
      authorization: `Bearer ${this.apiKey}`,
      accept: opts.responseType === "stream" ? "text/event-stream, application/octet-stream" : "application/json",
      "user-agent": `pandastack-sdk-typescript/${VERSION} ${runtime()}`,
      ...this.extraHeaders,
      ...opts.headers,
    };
    if (opts.idempotencyKey) headers["idempotency-key"] = opts.idempotencyKey;
    const init: RequestInit & { duplex?: "half" } = { method: opts.method, headers, signal };
    if (opts.json !== undefined) {
      headers["content-type"] = "application/json";
      init.body = JSON.stringify(opts.json);
    } else if (opts.body !== undefined) {
      headers["content-type"] = opts.contentType ?? "application/octet-stream";
      const body = typeof opts.body === "function" ? await opts.body() : opts.body;
      init.body = body;
      if (isReadableStream(body)) init.duplex = "half";
    }
    return init;
  }
}

function isReadableStream(b: unknown): b is ReadableStream {
  return typeof b === "object" && b !== null && typeof (b as ReadableStream).getReader === "function";
}

/** Exponential backoff with jitter, or the server's `Retry-After` (seconds) if given. */
export function backoff(attempt: number, retryAfterSeconds: number | undefined): number {
  if (retryAfterSeconds !== undefined) {
    // A little jitter on top so that many clients told "1" do not return in lockstep.
    return retryAfterSeconds * 1000 + Math.random() * 250;
  }
  const exp = Math.min(MAX_BACKOFF_MS, BASE_BACKOFF_MS * 2 ** attempt);
  return exp / 2 + Math.random() * (exp / 2);
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

function describeFetchError(e: unknown): string {
  if (e instanceof Error) {
    const cause = (e as Error & { cause?: unknown }).cause;
    if (cause instanceof Error) {
      const code = (cause as Error & { code?: string }).code;
      return `${e.message}: ${code ? `${code} ` : ""}${cause.message}`;
    }
    return e.message;
  }
  return String(e);
}

function runtime(): string {
  const p = (globalThis as { process?: { versions?: { node?: string } } }).process;
  return p?.versions?.node ? `node/${p.versions.node}` : "js";
}
