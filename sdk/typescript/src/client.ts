/**
 * The client: configuration (explicit options, else `PANDASTACK_API_KEY`/`PANDASTACK_TOKEN` and
 * `PANDASTACK_BASE_URL`) and the resource collections `sandboxes`, `snapshots`, `templates`.
 */

import { AuthenticationError, NotFoundError } from "./errors.js";
import { HttpClient, type FetchLike } from "./http.js";
import { Paginator, type Page } from "./pagination.js";
import { LONG_OPERATION_TIMEOUT_MS, Sandbox, type CallOptions, type SandboxContext } from "./sandbox.js";
import {
  sandboxFromWire,
  snapshotFromWire,
  templateFromWire,
  type OnTimeout,
  type SandboxState,
  type SnapshotInfo,
  type TemplateInfo,
} from "./types.js";

export const DEFAULT_BASE_URL = "http://localhost:8080";
export const DEFAULT_TIMEOUT_MS = 60_000;
export const DEFAULT_MAX_RETRIES = 2;

export interface PandaStackOptions {
  /** API key (`pds_…`). Default: `PANDASTACK_API_KEY`, then `PANDASTACK_TOKEN`. */
  apiKey?: string;
  /** Same as `apiKey`. */
  token?: string;
  /** Server URL. Default: `PANDASTACK_BASE_URL`, then `http://localhost:8080`. */
  baseUrl?: string;
  /**
   * HTTP request timeout in milliseconds (default 60 000; `0` for none). This is not a command's
   * timeout (`timeoutSeconds` of exec) nor a sandbox's lifetime (`ttlSeconds`). Blocking execs
   * wait for their command's timeout plus slack; creates, forks, snapshots and hibernate/wake
   * wait at least 10 minutes.
   */
  timeoutMs?: number;
  /** Retries on 429, 502, 503 and connection failures (default 2). */
  maxRetries?: number;
  /** A `fetch` to use instead of the global one. */
  fetch?: FetchLike;
  /** Extra headers on every request. */
  headers?: Record<string, string>;
}

/** Options of {@link Sandboxes.create}. */
export interface CreateSandboxOptions extends CallOptions {
  /** Template name (server default: `base`). */
  template?: string;
  /** Start from this snapshot (memory and disk) instead of a fresh template boot. */
  snapshotId?: string;
  /** Lifetime; the sandbox is killed (or hibernated, see `onTimeout`) this long after creation. */
  ttlSeconds?: number;
  /** Expire after this long without API activity. */
  idleTimeoutSeconds?: number;
  /** What expiry does: `kill` (default) or `hibernate`. */
  onTimeout?: OnTimeout;
  metadata?: Record<string, string>;
  /** Environment variables of every command in the sandbox. */
  env?: Record<string, string>;
  /** Default: a fresh random key, reused on retries, so a retried create never makes two. */
  idempotencyKey?: string;
}

/** Options of {@link Sandboxes.list}. */
export interface ListSandboxesOptions extends CallOptions {
  state?: SandboxState;
  /** Only sandboxes whose metadata has all these key/value pairs. */
  metadata?: Record<string, string>;
  /** Page size (1-1000). */
  limit?: number;
  /** Start after this cursor (from a previous page's `nextCursor`). */
  cursor?: string;
}

export class PandaStack {
  readonly sandboxes: Sandboxes;
  readonly snapshots: Snapshots;
  readonly templates: Templates;
  readonly baseUrl: string;
  /** @internal */
  readonly http: HttpClient;
  private readonly ctx: SandboxContext;

  constructor(options: PandaStackOptions = {}) {
    const env = processEnv();
    const apiKey = options.apiKey ?? options.token ?? env.PANDASTACK_API_KEY ?? env.PANDASTACK_TOKEN;
    if (!apiKey) {
      throw new AuthenticationError(
        "no API key: pass { apiKey } or set PANDASTACK_API_KEY (create one with `pandastack keys create`)",
        { code: "missing_api_key" },
      );
    }
    const baseUrl = options.baseUrl ?? env.PANDASTACK_BASE_URL ?? DEFAULT_BASE_URL;
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.http = new HttpClient({
      apiKey,
      baseUrl: this.baseUrl,
      timeoutMs: options.timeoutMs ?? DEFAULT_TIMEOUT_MS,
      maxRetries: options.maxRetries ?? DEFAULT_MAX_RETRIES,
      ...(options.fetch ? { fetch: options.fetch } : {}),
      ...(options.headers ? { headers: options.headers } : {}),
    });
    this.ctx = { http: this.http, newIdempotencyKey };
    this.sandboxes = new Sandboxes(this.ctx);
    this.snapshots = new Snapshots(this.http);
    this.templates = new Templates(this.http);
  }
}

export class Sandboxes {
  /** @internal */
  constructor(private readonly ctx: SandboxContext) {}

  /** Creates a sandbox and returns once it is ready for commands. */
  async create(opts: CreateSandboxOptions = {}): Promise<Sandbox> {
    const body: Record<string, unknown> = {};
    if (opts.template !== undefined) body.template = opts.template;
    if (opts.snapshotId !== undefined) body.snapshot_id = opts.snapshotId;
    if (opts.ttlSeconds !== undefined) body.ttl_seconds = opts.ttlSeconds;
    if (opts.idleTimeoutSeconds !== undefined) body.idle_timeout_seconds = opts.idleTimeoutSeconds;
    if (opts.onTimeout !== undefined) body.on_timeout = opts.onTimeout;
    if (opts.metadata !== undefined) body.metadata = opts.metadata;
    if (opts.env !== undefined) body.env = opts.env;
    const w = await this.ctx.http.request<Record<string, unknown>>({
      method: "POST",
      path: "/v1/sandboxes",
      json: body,
      idempotencyKey: opts.idempotencyKey ?? (await this.ctx.newIdempotencyKey()),
      retry: "safe",
      timeoutMs: opts.timeoutMs ?? Math.max(this.ctx.http.timeoutMs, LONG_OPERATION_TIMEOUT_MS),
      ...(opts.signal ? { signal: opts.signal } : {}),
    });
    return new Sandbox(this.ctx, sandboxFromWire(w));
  }

  /** A sandbox by id, as it is (a hibernated one stays hibernated until used). */
  async get(id: string, opts: CallOptions = {}): Promise<Sandbox> {
    const w = await this.ctx.http.request<Record<string, unknown>>({
      method: "GET",
      path: `/v1/sandboxes/${encodeURIComponent(id)}`,
      ...call(opts),
    });
    return new Sandbox(this.ctx, sandboxFromWire(w));
  }

  /** A sandbox by id, made ready for work: a hibernated one is woken, a paused one resumed. */
  async connect(id: string, opts: CallOptions = {}): Promise<Sandbox> {
    const sb = await this.get(id, opts);
    if (sb.state === "hibernated") await sb.wake(opts);
    else if (sb.state === "paused") await sb.resume(opts);
    return sb;
  }

  /** Destroys a sandbox by id; false if it was already gone. */
  async kill(id: string, opts: CallOptions = {}): Promise<boolean> {
    const sb = new Sandbox(this.ctx, sandboxFromWire({ id }));
    return sb.kill(opts);
  }

  /** The workspace's sandboxes, oldest first, fetched page by page as you iterate. */
  list(opts: ListSandboxesOptions = {}): Paginator<Sandbox> {
    return new Paginator<Sandbox>(async (cursor) => {
      const q = new URLSearchParams();
      if (opts.limit !== undefined) q.set("limit", String(opts.limit));
      if (cursor !== undefined) q.set("cursor", cursor);
      if (opts.state !== undefined) q.set("state", opts.state);
      for (const [k, v] of Object.entries(opts.metadata ?? {})) q.set(`metadata.${k}`, v);
      const page = await this.ctx.http.request<WirePage>({
        method: "GET",
        path: "/v1/sandboxes",
        query: q,
        ...call(opts),
      });
      return toPage(page, (w) => new Sandbox(this.ctx, sandboxFromWire(w)));
    }, opts.cursor);
  }
}

export class Snapshots {
  /** @internal */
  constructor(private readonly http: HttpClient) {}

  /** The workspace's snapshots, oldest first. */
  list(opts: CallOptions & { limit?: number; cursor?: string } = {}): Paginator<SnapshotInfo> {
    return new Paginator<SnapshotInfo>(async (cursor) => {
      const page = await this.http.request<WirePage>({
        method: "GET",
        path: "/v1/snapshots",
        query: { limit: opts.limit, cursor },
        ...call(opts),
      });
      return toPage(page, snapshotFromWire);
    }, opts.cursor);
  }

  /** Deletes a snapshot (sandboxes already created from it keep running). */
  async delete(id: string, opts: CallOptions = {}): Promise<void> {
    await this.http.request({
      method: "DELETE",
      path: `/v1/snapshots/${encodeURIComponent(id)}`,
      responseType: "none",
      ...call(opts),
    });
  }
}

export class Templates {
  /** @internal */
  constructor(private readonly http: HttpClient) {}

  /** The templates this server can create sandboxes from. */
  list(opts: CallOptions = {}): Paginator<TemplateInfo> {
    return new Paginator<TemplateInfo>(async (cursor) => {
      const page = await this.http.request<WirePage>({
        method: "GET",
        path: "/v1/templates",
        query: { cursor },
        ...call(opts),
      });
      return toPage(page, templateFromWire);
    });
  }

  /** One template by name; throws {@link NotFoundError} (`template_not_found`) if unknown. */
  async get(name: string, opts: CallOptions = {}): Promise<TemplateInfo> {
    try {
      const w = await this.http.request<Record<string, unknown>>({
        method: "GET",
        path: `/v1/templates/${encodeURIComponent(name)}`,
        ...call(opts),
      });
      return templateFromWire(w);
    } catch (e) {
      // A server without the single-template route answers "no such route" (`not_found`).
      if (!(e instanceof NotFoundError) || e.code !== "not_found") throw e;
    }
    for await (const t of this.list(opts)) if (t.name === name) return t;
    throw new NotFoundError(`template ${name} not found`, { code: "template_not_found", status: 404 });
  }
}

interface WirePage {
  data?: unknown[];
  next_cursor?: string | null;
}

function toPage<T>(page: WirePage | undefined, map: (w: Record<string, unknown>) => T): Page<T> {
  return {
    data: (page?.data ?? []).map((w) => map(w as Record<string, unknown>)),
    nextCursor: typeof page?.next_cursor === "string" && page.next_cursor ? page.next_cursor : null,
  };
}

function call(opts: CallOptions): { timeoutMs?: number; signal?: AbortSignal } {
  const o: { timeoutMs?: number; signal?: AbortSignal } = {};
  if (opts.timeoutMs !== undefined) o.timeoutMs = opts.timeoutMs;
  if (opts.signal !== undefined) o.signal = opts.signal;
  return o;
}

function processEnv(): Record<string, string | undefined> {
  const p = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process;
  return p?.env ?? {};
}

/** A random UUID (v4) for `Idempotency-Key`. */
async function newIdempotencyKey(): Promise<string> {
  const c = (globalThis as { crypto?: { randomUUID?: () => string } }).crypto;
  if (typeof c?.randomUUID === "function") return c.randomUUID();
  try {
    // Node 18 has no global `crypto` unless a flag is set.
    const nodeCrypto = await import("node:crypto");
    return nodeCrypto.randomUUID();
  } catch {
    let s = "";
    for (let i = 0; i < 32; i++) s += Math.floor(Math.random() * 16).toString(16);
    return `${s.slice(0, 8)}-${s.slice(8, 12)}-4${s.slice(13, 16)}-a${s.slice(17, 20)}-${s.slice(20, 32)}`;
  }
}
