/**
 * The client: configuration (explicit options, else `PANDASTACK_API_KEY`/`PANDASTACK_TOKEN` and
 * `PANDASTACK_BASE_URL`) and the resource collections `sandboxes`, `snapshots`, `templates`
 * (including template builds), `volumes` (in volumes.ts), `databases` (in databases.ts),
 * `apps` (in apps.ts), `functions` (in functions.ts), `schedules` (in schedules.ts), `hosts`
 * (in hosts.ts; the operator routes, admin keys only), `events`, `webhooks`, `keys`, `members`
 * (in members.ts) and `audit` (in audit.ts).
 */

import {
  AuthenticationError,
  InvalidArgumentError,
  NotFoundError,
  TemplateBuildError,
  TemplateBuildTimeoutError,
} from "./errors.js";
import { HttpClient, type FetchLike, type Query, type RequestOptions } from "./http.js";
import { Paginator, type Page } from "./pagination.js";
import { LogFollower, abortReason } from "./follow.js";
import { LONG_OPERATION_TIMEOUT_MS, Sandbox, type CallOptions, type SandboxContext } from "./sandbox.js";
import {
  sandboxFromWire,
  snapshotFromWire,
  templateFromWire,
  type OnHostLoss,
  type OnTimeout,
  type SandboxState,
  type SnapshotInfo,
  type TemplateInfo,
  type VolumeMount,
} from "./types.js";
import { Apps } from "./apps.js";
import { Audit } from "./audit.js";
import { Databases } from "./databases.js";
import { Events } from "./events.js";
import { Functions } from "./functions.js";
import { Hosts } from "./hosts.js";
import { Keys } from "./keys.js";
import { Members } from "./members.js";
import { Schedules } from "./schedules.js";
import { Volumes, volumeMountsToWire } from "./volumes.js";
import { Webhooks } from "./webhooks.js";
import type { WireBody } from "./wire.js";

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
  /**
   * What becomes of it if its host is lost (a cluster's host declared dead): `lost` (default:
   * it waits for its host) or `restore` (it runs again on another host, same id and preview
   * URL, from its newest durable snapshot, else from its template). Not with `volumes`.
   */
  onHostLoss?: OnHostLoss;
  metadata?: Record<string, string>;
  /** Environment variables of every command in the sandbox. */
  env?: Record<string, string>;
  /**
   * Volumes to mount before the create resolves (up to 3; not with `snapshotId`). A read-write
   * volume is mounted by one sandbox at a time (a second throws {@link VolumeBusyError});
   * `readOnly` mounts a copy as of now, in any number of sandboxes.
   */
  volumes?: VolumeMount[];
  /**
   * Disk limits of its VM, root disk and volumes together: MiB/s and I/O operations per
   * second (default: the template's, else the server's; not with `snapshotId`: a sandbox from
   * a snapshot, like a fork, has its source's). The sandbox's `diskMbps` and `diskIops` show
   * what it runs with.
   */
  diskMbps?: number;
  diskIops?: number;
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
  readonly volumes: Volumes;
  readonly databases: Databases;
  readonly apps: Apps;
  readonly functions: Functions;
  readonly schedules: Schedules;
  /** The platform's hosts (operator routes: an admin key only). */
  readonly hosts: Hosts;
  /** The workspace's lifecycle events (pages and a resumable stream). */
  readonly events: Events;
  /** Endpoints the workspace's events are POSTed to, and their deliveries. */
  readonly webhooks: Webhooks;
  /** The workspace's API keys. */
  readonly keys: Keys;
  /** The workspace's members and their roles. */
  readonly members: Members;
  /** The workspace's audit log (keys with `audit:read`). */
  readonly audit: Audit;
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
    this.volumes = new Volumes(this.http, newIdempotencyKey);
    this.databases = new Databases(this.http, newIdempotencyKey);
    this.apps = new Apps(this.http);
    this.functions = new Functions(this.http);
    this.schedules = new Schedules(this.http);
    this.hosts = new Hosts(this.http);
    this.events = new Events(this.http);
    this.webhooks = new Webhooks(this.http, newIdempotencyKey);
    this.keys = new Keys(this.http);
    this.members = new Members(this.http);
    this.audit = new Audit(this.http);
  }

  /**
   * The workspace's usage against its limits and, in `metered`, what it used over
   * `[from, to)` (default: this calendar month, UTC, to now): vCPU-seconds, GiB-seconds of
   * memory, storage GiB-hours, egress bytes, function invocations, database seconds — in totals
   * and, with `groupBy`, in groups. Fields as the server names them (snake_case).
   */
  async usage(opts: UsageOptions = {}): Promise<WireBody<"Usage">> {
    return await this.http.request<WireBody<"Usage">>({ method: "GET", path: "/v1/usage", query: usageQuery(opts), ...callOf(opts) });
  }

  /** The metered part of {@link PandaStack.usage} as CSV text: a header row, then a row per group. */
  async usageCsv(opts: UsageOptions = {}): Promise<string> {
    const query = { ...usageQuery(opts), format: "csv" };
    return await this.http.request({ method: "GET", path: "/v1/usage", query, responseType: "text", ...callOf(opts) });
  }
}

/** Options of {@link PandaStack.usage}. */
export interface UsageOptions extends CallOptions {
  /** Start of the metered window (RFC 3339 or a `Date`; default: the start of this month, UTC). */
  from?: string | Date;
  /** End of the window (default: now); at most 366 days after `from`. */
  to?: string | Date;
  /** `"none"`, or some of `"kind"`, `"resource"`, and `"day"` or `"hour"`. */
  groupBy?: string | string[];
}

function usageQuery(opts: UsageOptions): Record<string, string | undefined> {
  const t = (v: string | Date | undefined) => (v instanceof Date ? v.toISOString() : v);
  const g = Array.isArray(opts.groupBy) ? opts.groupBy.join(",") : opts.groupBy;
  return { from: t(opts.from), to: t(opts.to), group_by: g };
}

function callOf(opts: CallOptions): { timeoutMs?: number; signal?: AbortSignal } {
  const o: { timeoutMs?: number; signal?: AbortSignal } = {};
  if (opts.timeoutMs !== undefined) o.timeoutMs = opts.timeoutMs;
  if (opts.signal !== undefined) o.signal = opts.signal;
  return o;
}

export class Sandboxes {
  /** @internal */
  constructor(private readonly ctx: SandboxContext) {}

  /** Creates a sandbox and returns once it is ready for commands. */
  async create(opts: CreateSandboxOptions = {}): Promise<Sandbox> {
    const body: WireBody<"CreateSandboxRequest"> = {};
    if (opts.template !== undefined) body.template = opts.template;
    if (opts.snapshotId !== undefined) body.snapshot_id = opts.snapshotId;
    if (opts.ttlSeconds !== undefined) body.ttl_seconds = opts.ttlSeconds;
    if (opts.idleTimeoutSeconds !== undefined) body.idle_timeout_seconds = opts.idleTimeoutSeconds;
    if (opts.onTimeout !== undefined) body.on_timeout = opts.onTimeout;
    if (opts.onHostLoss !== undefined) body.on_host_loss = opts.onHostLoss;
    if (opts.metadata !== undefined) body.metadata = opts.metadata;
    if (opts.env !== undefined) body.env = opts.env;
    if (opts.volumes !== undefined) body.volumes = volumeMountsToWire(opts.volumes);
    if (opts.diskMbps !== undefined) body.disk_mbps = opts.diskMbps;
    if (opts.diskIops !== undefined) body.disk_iops = opts.diskIops;
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

/** What {@link Templates.build} takes as the image: a local path (streamed from disk, Node only), a Blob, or bytes. */
export type TarballSource = string | Blob | Uint8Array;

/** Options of {@link Templates.build}. Give exactly one of `tarball` and `spec`. */
export interface BuildTemplateOptions extends CallOptions {
  /** Template name (a new version if it exists). Required with `tarball`; with `spec`, default: the spec's. */
  name?: string;
  /**
   * An OCI image layout or `docker save` tarball (plain or gzip): a local path (streamed with
   * `fs.createReadStream`, never held in memory), a `Blob` or bytes. The image's `Env` becomes
   * the sandboxes' environment.
   */
  tarball?: TarballSource;
  /** A template spec's TOML text (Debian packages and inline files only over the API). */
  spec?: string;
  /** vCPUs, 1-16 (tarball builds; default 1). */
  cpu?: number;
  /** Memory in MiB, 128-65536 (tarball builds; default 512). */
  memoryMb?: number;
  /** Root filesystem size in MiB (tarball builds; default: the image plus room). */
  diskMb?: number;
  /** One line (tarball builds). */
  description?: string;
  /** Follow the build and resolve once it is ready (default `true`); `false` resolves with the queued template. */
  wait?: boolean;
  /** Called with each new piece of build log text while waiting. */
  onLog?: (text: string) => void | Promise<void>;
  /** Give up waiting after this long (counted from the server's accepting the build): {@link TemplateBuildTimeoutError}. */
  timeoutSeconds?: number;
}

/** Options of {@link Templates.logs}. */
export interface TemplateLogsOptions extends CallOptions {
  /** The build version whose log to read (default: the newest). */
  version?: number;
}

/** States of a template build still under way. */
const BUILD_ACTIVE_STATES = new Set(["queued", "building", "baking"]);
/** The short request that fetches the template's state when a wait runs out of time. */
const PEEK_TIMEOUT_MS = 10_000;

export class Templates {
  /** @internal */
  constructor(private readonly http: HttpClient) {}

  /** The templates this server can create sandboxes from: the catalog's, then the workspace's own. */
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
        path: templatePath(name),
        ...call(opts),
      });
      return templateFromWire(w ?? {});
    } catch (e) {
      // A server without the single-template route answers "no such route" (`not_found`).
      if (!(e instanceof NotFoundError) || e.code !== "not_found") throw e;
    }
    for await (const t of this.list(opts)) if (t.name === name) return t;
    throw new NotFoundError(`template ${name} not found`, { code: "template_not_found", status: 404 });
  }

  /**
   * Builds a template on the server (a new version if the name exists) from an OCI image
   * tarball or a spec, and by default waits until it is ready:
   *
   * ```ts
   * const t = await client.templates.build({ name: "my-app", tarball: "my-app.tar", memoryMb: 1024,
   *   onLog: (s) => process.stderr.write(s) });
   * await client.sandboxes.create({ template: t.name });
   * ```
   *
   * The build runs in the background on the server. Waiting follows the build log
   * (`GET …/logs?follow=1`, Server-Sent Events; reopened if the connection breaks) and calls
   * `onLog` with each new piece. A build that ends `failed` throws {@link TemplateBuildError};
   * running out of `timeoutSeconds` throws {@link TemplateBuildTimeoutError} (the build goes
   * on). A build of the name already under way, or a catalog template's name, throws
   * {@link ConflictError}. `timeoutMs` bounds the upload request (default: none for tarballs);
   * `signal` aborts the upload and the wait.
   */
  async build(opts: BuildTemplateOptions): Promise<TemplateInfo> {
    const body = await buildRequest(opts);
    const w = await this.http.request<Record<string, unknown>>({
      method: "POST",
      path: "/v1/templates",
      ...body,
      ...(opts.signal ? { signal: opts.signal } : {}),
    });
    const queued = templateFromWire(w ?? {});
    if (opts.wait === false) return queued;
    return this.follow(queued, opts);
  }

  /** Follows a build to its end through its log stream; see {@link build}. */
  private async follow(queued: TemplateInfo, opts: BuildTemplateOptions): Promise<TemplateInfo> {
    const deadline = opts.timeoutSeconds === undefined ? undefined : Date.now() + opts.timeoutSeconds * 1000;
    const f = new LogFollower(
      this.http,
      `${templatePath(queued.name)}/logs`,
      { follow: 1, version: queued.version ?? undefined },
      `build log of template ${queued.name}`,
      deadline,
    );
    let reason: string | undefined;
    let settled: TemplateInfo | undefined; // the template as fetched when the time ran out
    while (reason === undefined) {
      if (opts.signal?.aborted) throw abortReason(opts.signal);
      if (f.expired()) {
        const latest = await this.peek(queued);
        const ours = queued.version === null || latest.version === queued.version;
        if (ours && (latest.state === "ready" || latest.state === "failed")) {
          // It ended just as the time ran out: its result, not a timeout.
          reason = latest.state;
          settled = latest;
          break;
        }
        throw new TemplateBuildTimeoutError(
          `${describe(queued)}: still ${latest.state || "building"} after timeoutSeconds=${opts.timeoutSeconds}; the build goes on on the server (templates.get(name) shows its state)`,
          latest,
        );
      }
      await f.once(opts.onLog, opts.signal);
      reason = f.reason;
    }
    const latest =
      settled ?? (reason === "deleted" ? queued : await this.get(queued.name, opts.signal ? { signal: opts.signal } : {}));
    if (reason === "ready") return latest;
    const same = queued.version === null || latest.version === queued.version;
    if (reason === "failed") {
      const why = same && latest.error ? latest.error : "see templates.logs(name)";
      throw new TemplateBuildError(`${describe(queued)}: build failed: ${why}`, latest);
    }
    throw new TemplateBuildError(`${describe(queued)}: build ended: ${reason}`, latest, { code: "template_build_ended" });
  }

  /** The template's state now, or `fallback` if the server does not say quickly. */
  private async peek(fallback: TemplateInfo): Promise<TemplateInfo> {
    try {
      const w = await this.http.request<Record<string, unknown>>({
        method: "GET",
        path: templatePath(fallback.name),
        timeoutMs: PEEK_TIMEOUT_MS,
        retry: "never",
      });
      return templateFromWire(w ?? {});
    } catch {
      return fallback;
    }
  }

  /** The build log of the template's newest build (or of build `version`) so far. */
  async logs(name: string, opts: TemplateLogsOptions = {}): Promise<string> {
    return this.http.request({
      method: "GET",
      path: `${templatePath(name)}/logs`,
      query: { version: opts.version },
      headers: { accept: "text/plain" },
      responseType: "text",
      ...call(opts),
    });
  }

  /**
   * Re-bakes a template (a cold boot and a new snapshot; catalog templates from their spec,
   * built ones from the newest ready version's image). New sandboxes get the new bake; running
   * ones keep theirs.
   */
  async bake(name: string, opts: CallOptions = {}): Promise<TemplateInfo> {
    const w = await this.http.request<Record<string, unknown>>({
      method: "POST",
      path: `${templatePath(name)}/bake`,
      timeoutMs: opts.timeoutMs ?? Math.max(this.http.timeoutMs, LONG_OPERATION_TIMEOUT_MS),
      ...(opts.signal ? { signal: opts.signal } : {}),
    });
    return templateFromWire(w ?? {});
  }

  /**
   * Deletes a built template, every version (running sandboxes made from it keep running);
   * false if it did not exist. Catalog templates, and templates with a build under way, throw
   * {@link ConflictError}.
   */
  async delete(name: string, opts: CallOptions = {}): Promise<boolean> {
    try {
      await this.http.request({
        method: "DELETE",
        path: templatePath(name),
        responseType: "none",
        ...call(opts),
      });
      return true;
    } catch (e) {
      if (e instanceof NotFoundError) return false;
      throw e;
    }
  }
}

/** Whether a template's newest build is still under way. */
export function isBuilding(t: TemplateInfo): boolean {
  return BUILD_ACTIVE_STATES.has(t.state);
}

function templatePath(name: string): string {
  if (typeof name !== "string" || name === "") {
    throw new InvalidArgumentError(`expected a template name, got ${JSON.stringify(name)}`, { code: "invalid_argument" });
  }
  return `/v1/templates/${encodeURIComponent(name)}`;
}

function describe(t: TemplateInfo): string {
  return `template ${t.name}${t.version !== null ? ` version ${t.version}` : ""}`;
}

/** The request of {@link Templates.build}: a spec as JSON, or a tarball with query parameters. */
async function buildRequest(opts: BuildTemplateOptions): Promise<Omit<RequestOptions, "method" | "path" | "responseType">> {
  if ((opts.tarball === undefined) === (opts.spec === undefined)) {
    throw new InvalidArgumentError(
      "give tarball (an OCI image layout or `docker save` tarball) or spec (TOML text), exactly one",
      { code: "invalid_argument" },
    );
  }
  if (opts.spec !== undefined) {
    if (typeof opts.spec !== "string") throw new InvalidArgumentError("spec: the spec's TOML text", { code: "invalid_argument" });
    const extra = (["cpu", "memoryMb", "diskMb", "description"] as const).filter((k) => opts[k] !== undefined);
    if (extra.length > 0) {
      throw new InvalidArgumentError(`${extra.join(", ")}: only for tarball builds (a spec says its own shape and description)`, {
        code: "invalid_argument",
      });
    }
    const json: WireBody<"CreateTemplateRequest"> = { spec: opts.spec };
    if (opts.name !== undefined) json.name = opts.name;
    return { json, ...(opts.timeoutMs !== undefined ? { timeoutMs: opts.timeoutMs } : {}) };
  }
  if (!opts.name) {
    throw new InvalidArgumentError("name: a tarball build needs the template's name", { code: "invalid_argument" });
  }
  const query: Query = {
    name: opts.name,
    cpu: opts.cpu,
    memory_mb: opts.memoryMb,
    disk_mb: opts.diskMb,
    description: opts.description,
  };
  const tarball = opts.tarball!;
  let head: Uint8Array;
  let body: RequestOptions["body"];
  if (typeof tarball === "string") {
    const fs = await import("node:fs");
    const { Readable } = await import("node:stream");
    const fh = await fs.promises.open(tarball, "r");
    try {
      head = new Uint8Array(2);
      const { bytesRead } = await fh.read(head, 0, 2, 0);
      head = head.subarray(0, bytesRead);
    } finally {
      await fh.close();
    }
    // Reopened on every attempt, so a retried upload starts from the beginning.
    body = () => Readable.toWeb(fs.createReadStream(tarball)) as unknown as ReadableStream<Uint8Array>;
  } else if (tarball instanceof Uint8Array) {
    head = tarball.subarray(0, 2);
    body = tarball;
  } else if (typeof Blob !== "undefined" && tarball instanceof Blob) {
    head = new Uint8Array(await tarball.slice(0, 2).arrayBuffer());
    body = tarball;
  } else {
    throw new InvalidArgumentError("tarball: a path, a Blob or a Uint8Array", { code: "invalid_argument" });
  }
  return {
    query,
    body,
    contentType: head[0] === 0x1f && head[1] === 0x8b ? "application/gzip" : "application/x-tar",
    timeoutMs: opts.timeoutMs ?? 0,
  };
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
