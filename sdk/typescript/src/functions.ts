/**
 * `client.functions`: handlers in Python or Node.js, each version built with its dependencies
 * in a VM, baked with the handler imported (a VM snapshot), and invoked over HTTP: a warm
 * instance answers at once, a new one is restored from the baked snapshot:
 *
 * ```ts
 * await client.functions.create({
 *   name: "hello", runtime: "python", handler: "main.handler",
 *   files: { "main.py": "def handler(event, context):\n    return {'hi': event}\n" },
 *   dependencies: "requests\n",                                    // requirements.txt (package.json)
 * });
 * const v = await client.functions.waitForVersion("hello", 1);     // live, or failed (v.error)
 * const r = await client.functions.invoke("hello", { name: "x" });
 * console.log(r.status, r.result, r.cold);                         // ok { hi: { name: "x" } } true
 * const q = await client.functions.submit("hello", { name: "y" });  // queued; retried on failure
 * console.log((await client.functions.getInvocation("hello", q.id!)).status);
 * await client.functions.createVersion("hello", { files, wait: true });
 * await client.functions.rollback("hello");                        // the version before is back
 * ```
 *
 * A handler that throws (or runs past `timeoutSeconds`) is data: the {@link Invocation}'s
 * `status` is `error` (or `timeout`) and `error` holds its type, message and traceback. An
 * unknown function throws {@link NotFoundError}.
 */

import { FunctionVersionTimeoutError, InvalidArgumentError, NotFoundError } from "./errors.js";
import { sleep } from "./follow.js";
import type { HttpClient } from "./http.js";
import { Paginator, type Page } from "./pagination.js";
import { metricsQuery, type CallOptions, type MetricsOptions } from "./sandbox.js";
import { gitToWire } from "./apps.js";
import {
  functionFromWire,
  functionVersionFromWire,
  invocationFromWire,
  metricsFromWire,
  type AppGit,
  type FunctionInfo,
  type FunctionRuntime,
  type FunctionVersionInfo,
  type Invocation,
  type SandboxMetrics,
} from "./types.js";
import type { WireBody } from "./wire.js";

/** The states of a version still being built (any other is where its build ended). */
const VERSION_ACTIVE_STATES = new Set(["queued", "cloning", "building", "baking", "checking"]);
const DEFAULT_VERSION_TIMEOUT_SECONDS = 1800;
const DEFAULT_VERSION_POLL_MS = 1000;
/**
 * A call may run up to the function's `timeoutSeconds` (at most 900) and waits up to 60 s for a
 * free instance (and a restore): {@link Functions.invoke} waits at least this long, milliseconds.
 */
export const INVOKE_TIMEOUT_MS = 1_020_000;

/** The source of a function or of a new version: inline files, or a git repository. */
export interface FunctionSourceOptions {
  /** Files by relative path (UTF-8 text, at most 4 MiB in all), e.g. `{ "main.py": "def handler(event, context): …" }`. */
  files?: Record<string, string>;
  /** A repository instead of files: its URL, or `{ url, ref }` (as for apps). */
  git?: string | AppGit;
  /** Branch, tag or commit of `git`; overrides `git.ref`. */
  ref?: string;
  /** `requirements.txt` (Python) or `package.json` (Node.js) contents, installed in the build. */
  dependencies?: string;
  /** Environment of the build and of every call (a new version replaces it whole). */
  env?: Record<string, string>;
  /** Like `env`, but never shown by the API (only their names, `secretNames`). */
  secrets?: Record<string, string>;
}

/** Limits and visibility: what {@link Functions.create} and {@link Functions.update} take. */
export interface FunctionLimitOptions {
  /** Per-call time limit, 1 to 900 (default 60): a call past it ends with status `timeout`. */
  timeoutSeconds?: number;
  /** Calls one instance serves at once, 1 to 64 (default 1). */
  concurrency?: number;
  /** Most instances at once, 1 to 64 (default 4); calls beyond `concurrency × maxInstances` wait. */
  maxInstances?: number;
  /** Seconds a warm instance is kept without calls (default 300). */
  idleSeconds?: number;
  /** Serve `fn-<name>.<domain>` to anyone (default false: only `invoke` with a key). */
  public?: boolean;
}

/** Options of {@link Functions.create}. */
export interface CreateFunctionOptions extends FunctionSourceOptions, FunctionLimitOptions, CallOptions {
  /** 1-37 of `[a-z0-9-]`, starting with a letter; its endpoint is `fn-<name>.<domain>`. */
  name: string;
  runtime: FunctionRuntime;
  /**
   * `module.function`: `main.handler` is `handler` in `main.py` (Python); `index.handler` the
   * export `handler` of `index.js` or `index.mjs` (Node.js).
   */
  handler: string;
  /** Memory of an instance, MiB: a multiple of 256 from 256 to 16384 (default 1024). */
  memoryMb?: number;
}

/** Options of {@link Functions.update}: each field given replaces the function's; the others stay. */
export interface UpdateFunctionOptions extends FunctionLimitOptions, CallOptions {}

/** Paging of {@link Functions.list} and {@link Functions.versions}. */
export interface ListFunctionsOptions extends CallOptions {
  /** Page size (1-1000). */
  limit?: number;
  /** Start after this cursor (from a previous page's `nextCursor`). */
  cursor?: string;
}

/** Options of {@link Functions.waitForVersion} (and of {@link Functions.createVersion} with `wait`). */
export interface WaitVersionOptions extends CallOptions {
  /** Give up after this long: {@link FunctionVersionTimeoutError} (the build goes on). Default 1800. */
  timeoutSeconds?: number;
  /** Pause between two polls, milliseconds (default 1000). */
  pollMs?: number;
}

/** Options of {@link Functions.createVersion}: the fields given replace the function's. */
export interface CreateVersionOptions extends FunctionSourceOptions, WaitVersionOptions {
  /** A new `module.function`. */
  handler?: string;
  /** Resolve once the build has ended (see {@link Functions.waitForVersion}) instead of once it is queued. */
  wait?: boolean;
}

/** Options of {@link Functions.rollback}. */
export interface RollbackFunctionOptions extends CallOptions {
  /** The version to make live (default: the one before the live one). */
  version?: number;
}

/** Options of {@link Functions.submit}. */
export interface SubmitOptions extends CallOptions {
  /** Further attempts after a failed one, 0 to 10 (server default 2). */
  retries?: number;
}

/** Whether a version is still being built (`queued`, `cloning`, `building`, `baking` or `checking`). */
export function isVersionBuilding(v: FunctionVersionInfo): boolean {
  return VERSION_ACTIVE_STATES.has(v.state);
}

export class Functions {
  /** @internal */
  constructor(private readonly http: HttpClient) {}

  /**
   * Creates a function and starts building its first version (version 1: wait for it with
   * {@link waitForVersion}); resolves with the function at once. A name in use throws
   * {@link ConflictError}; a bad field {@link InvalidArgumentError} naming it.
   */
  async create(opts: CreateFunctionOptions): Promise<FunctionInfo> {
    if (typeof opts?.name !== "string" || opts.name === "") {
      throw new InvalidArgumentError("name: the function's name", { code: "invalid_argument" });
    }
    if (opts.runtime !== "python" && opts.runtime !== "node") {
      throw new InvalidArgumentError(`runtime: "python" or "node", got ${JSON.stringify(opts.runtime)}`, { code: "invalid_argument" });
    }
    if (typeof opts.handler !== "string" || opts.handler === "") {
      throw new InvalidArgumentError("handler: `module.function`, e.g. main.handler", { code: "invalid_argument" });
    }
    const source = sourceToWire(opts);
    if (!source.files && !source.git) {
      throw new InvalidArgumentError("files: give the handler's files (or git)", { code: "invalid_argument" });
    }
    const body: WireBody<"CreateFunctionRequest"> = { name: opts.name, runtime: opts.runtime, handler: opts.handler, ...source };
    if (opts.memoryMb !== undefined) body.memory_mb = opts.memoryMb;
    Object.assign(body, limitsToWire(opts));
    const w = await this.http.request<Record<string, unknown>>({ method: "POST", path: "/v1/functions", json: body, ...call(opts) });
    return functionFromWire(w ?? {});
  }

  /** The workspace's functions (by name), fetched page by page as you iterate. */
  list(opts: ListFunctionsOptions = {}): Paginator<FunctionInfo> {
    return this.paginate("/v1/functions", opts, functionFromWire);
  }

  /** One function; throws {@link NotFoundError} if there is none. */
  async get(name: string, opts: CallOptions = {}): Promise<FunctionInfo> {
    const w = await this.http.request<Record<string, unknown>>({ method: "GET", path: functionPath(name), ...call(opts) });
    return functionFromWire(w ?? {});
  }

  /**
   * The resource use of a function's instances over time: `samples` sum them (oldest first,
   * `step` seconds apart), each listed in `instances`.
   * `since`: a span (`"90s"`, `"15m"`, `"1h"`), a `Date` or an RFC 3339 string (default 10
   * minutes back, at most 6 hours); `step`: seconds per point (1 to 86400, default 5). Values the
   * server refuses throw {@link InvalidArgumentError}.
   */
  async metrics(name: string, opts: MetricsOptions = {}): Promise<SandboxMetrics> {
    const w = await this.http.request<Record<string, unknown>>({
      method: "GET",
      path: functionPath(name, "/metrics"),
      query: metricsQuery(opts),
      ...call(opts),
    });
    return metricsFromWire(w ?? {});
  }

  /**
   * Changes a function's limits or visibility and resolves with the function. Nothing is
   * rebuilt: the next call and instance use them. New code, handler or environment is a new
   * version ({@link createVersion}).
   */
  async update(name: string, opts: UpdateFunctionOptions): Promise<FunctionInfo> {
    const w = await this.http.request<Record<string, unknown>>({
      method: "PATCH",
      path: functionPath(name),
      json: limitsToWire(opts),
      ...call(opts),
    });
    return functionFromWire(w ?? {});
  }

  /** Deletes a function: its instances, its versions' snapshots and logs; false if it did not exist. */
  async delete(name: string, opts: CallOptions = {}): Promise<boolean> {
    try {
      await this.http.request({
        method: "DELETE",
        path: functionPath(name),
        responseType: "none",
        timeoutMs: opts.timeoutMs ?? Math.max(this.http.timeoutMs, 120_000),
        ...(opts.signal ? { signal: opts.signal } : {}),
      });
      return true;
    } catch (e) {
      if (e instanceof NotFoundError) return false;
      throw e;
    }
  }

  /**
   * Builds a new version: each field given replaces the function's (`env` and `secrets` whole);
   * without `files`, `git` or `dependencies` the previous version's source is built again. It
   * goes live once built and its handler imports; one that fails leaves the live version
   * serving. Resolves with the version `queued`; with `wait: true`, once its build has ended.
   */
  async createVersion(name: string, opts: CreateVersionOptions = {}): Promise<FunctionVersionInfo> {
    const body: WireBody<"CreateVersionRequest"> = {};
    if (opts.handler !== undefined) body.handler = opts.handler;
    Object.assign(body, sourceToWire(opts));
    const w = await this.http.request<Record<string, unknown>>({
      method: "POST",
      path: functionPath(name, "/versions"),
      json: body,
      ...call(opts),
    });
    const v = functionVersionFromWire(w ?? {});
    return opts.wait ? this.waitForVersion(name, v.version, opts) : v;
  }

  /** The function's versions, newest first, fetched page by page as you iterate. */
  versions(name: string, opts: ListFunctionsOptions = {}): Paginator<FunctionVersionInfo> {
    return this.paginate(functionPath(name, "/versions"), opts, functionVersionFromWire);
  }

  /** One version of the function, as it is now ({@link NotFoundError} if there is no such version). */
  async getVersion(name: string, version: number, opts: CallOptions = {}): Promise<FunctionVersionInfo> {
    const w = await this.http.request<Record<string, unknown>>({ method: "GET", path: versionPath(name, version), ...call(opts) });
    return functionVersionFromWire(w ?? {});
  }

  /**
   * Polls a version until its build has ended and resolves with it: `live`, `failed` (`error`
   * says why; {@link versionLogs} says more) or `standby`. One still being built after
   * `timeoutSeconds` (default 1800) throws {@link FunctionVersionTimeoutError} (`version`; the
   * build goes on).
   */
  async waitForVersion(name: string, version: number, opts: WaitVersionOptions = {}): Promise<FunctionVersionInfo> {
    const timeoutSeconds = opts.timeoutSeconds ?? DEFAULT_VERSION_TIMEOUT_SECONDS;
    const deadline = Date.now() + timeoutSeconds * 1000;
    const poll = opts.pollMs ?? DEFAULT_VERSION_POLL_MS;
    const callOpts = call(opts);
    for (;;) {
      const v = await this.getVersion(name, version, callOpts);
      if (!isVersionBuilding(v)) return v;
      if (Date.now() >= deadline) {
        throw new FunctionVersionTimeoutError(
          `version ${v.version} of function ${name} still ${v.state} after timeoutSeconds=${timeoutSeconds}; the build goes on on the server (functions.getVersion shows its state)`,
          v,
        );
      }
      await sleep(Math.max(0, Math.min(poll, deadline - Date.now())), opts.signal);
    }
  }

  /** A version's build log: fetch, install, the runtime's import of the handler, bake. */
  async versionLogs(name: string, version: number, opts: CallOptions = {}): Promise<string> {
    return this.http.request({
      method: "GET",
      path: versionPath(name, version, "/logs"),
      headers: { accept: "text/plain" },
      responseType: "text",
      ...call(opts),
    });
  }

  /**
   * Makes an earlier version live again (default: the one before the live one); nothing is
   * rebuilt, its baked snapshot serves the next call. Resolves with that version, now `live`.
   * With no version to go back to throws {@link ConflictError}.
   */
  async rollback(name: string, opts: RollbackFunctionOptions = {}): Promise<FunctionVersionInfo> {
    const w = await this.http.request<Record<string, unknown>>({
      method: "POST",
      path: functionPath(name, "/rollback"),
      json: (opts.version !== undefined ? { version: versionNumber(opts.version) } : {}) satisfies WireBody<"FunctionRollbackRequest">,
      ...call(opts),
    });
    return functionVersionFromWire(w ?? {});
  }

  /**
   * Calls the function's live version with `event` (any JSON value; none: `null`) and resolves
   * with the outcome: `status` `ok` with `result` (the handler's return value), `error` (the
   * handler threw: `error.type`, `error.message`, `error.traceback`) or `timeout`; `stdout`,
   * `stderr` and `cold` either way. Only what stops the call from being made throws: an unknown
   * function ({@link NotFoundError}), no live version ({@link ConflictError}), an event over
   * 6 MiB. Waits at least {@link INVOKE_TIMEOUT_MS} (`timeoutMs` overrides); not retried once
   * sent (the handler may have run).
   */
  async invoke(name: string, event?: unknown, opts: CallOptions = {}): Promise<Invocation> {
    const w = await this.http.request<Record<string, unknown>>({
      method: "POST",
      path: functionPath(name, "/invoke"),
      ...(event !== undefined ? { json: event } : {}),
      timeoutMs: opts.timeoutMs ?? Math.max(this.http.timeoutMs, INVOKE_TIMEOUT_MS),
      ...(opts.signal ? { signal: opts.signal } : {}),
    });
    return invocationFromWire(w ?? {});
  }

  /**
   * Queues a call of the function with `event` and resolves at once with the {@link Invocation}
   * `queued` and its `id`. The call runs on the function's host even across a restart of the
   * server, and is tried again up to `retries` times (server default 2, at most 10) when it ends
   * in `error` or `timeout`; {@link getInvocation} fetches its outcome (`attempts` counts the tries).
   */
  async submit(name: string, event?: unknown, opts: SubmitOptions = {}): Promise<Invocation> {
    const w = await this.http.request<Record<string, unknown>>({
      method: "POST",
      path: functionPath(name, "/invoke"),
      query: { async: 1, retries: opts.retries },
      ...(event !== undefined ? { json: event } : {}),
      ...call(opts),
    });
    return invocationFromWire(w ?? {});
  }

  /** A queued call ({@link submit}): `queued` or `running` until it ends, then its outcome, like {@link invoke}'s. */
  async getInvocation(name: string, invocationId: string, opts: CallOptions = {}): Promise<Invocation> {
    if (typeof invocationId !== "string" || invocationId === "") {
      throw new InvalidArgumentError(`expected an invocation id, got ${JSON.stringify(invocationId)}`, { code: "invalid_argument" });
    }
    const w = await this.http.request<Record<string, unknown>>({
      method: "GET",
      path: functionPath(name, `/invocations/${encodeURIComponent(invocationId)}`),
      ...call(opts),
    });
    return invocationFromWire(w ?? {});
  }

  private paginate<T>(path: string, opts: ListFunctionsOptions, map: (w: Record<string, unknown>) => T): Paginator<T> {
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

/** The source fields of a create or a new version (typed as a create's, which an update's accept). */
type SourceBody = Pick<WireBody<"CreateFunctionRequest">, "files" | "git" | "dependencies" | "env" | "secrets">;

/** The source fields of a create or a new version; what is unset is left out. @internal */
export function sourceToWire(o: FunctionSourceOptions): SourceBody {
  const body: SourceBody = {};
  if (o.files !== undefined && o.git !== undefined) {
    throw new InvalidArgumentError("give files or git, not both", { code: "invalid_argument" });
  }
  if (o.ref !== undefined && o.git === undefined) {
    throw new InvalidArgumentError("ref: give git with it", { code: "invalid_argument" });
  }
  if (o.files !== undefined) {
    const files: unknown = o.files;
    if (!files || typeof files !== "object" || Array.isArray(files)) {
      throw new InvalidArgumentError("files: an object of relative path → text", { code: "invalid_argument" });
    }
    for (const [k, v] of Object.entries(files)) {
      if (typeof v !== "string") {
        throw new InvalidArgumentError(`files.${k}: text (a string), got ${typeof v}`, { code: "invalid_argument" });
      }
    }
    if (Object.keys(files).length > 0) body.files = { ...(files as Record<string, string>) };
  }
  if (o.git !== undefined) body.git = gitToWire(o.git, o.ref);
  if (o.dependencies !== undefined) body.dependencies = o.dependencies;
  if (o.env !== undefined) body.env = o.env;
  if (o.secrets !== undefined) body.secrets = o.secrets;
  return body;
}

/** The limits of a create or update (typed as a create's, which an update's accept). */
type LimitsBody = Pick<WireBody<"CreateFunctionRequest">, "timeout_seconds" | "concurrency" | "max_instances" | "idle_seconds" | "public">;

/** The limits of a create or update; what is unset is left out. @internal */
export function limitsToWire(o: FunctionLimitOptions): LimitsBody {
  const body: LimitsBody = {};
  if (o.timeoutSeconds !== undefined) body.timeout_seconds = o.timeoutSeconds;
  if (o.concurrency !== undefined) body.concurrency = o.concurrency;
  if (o.maxInstances !== undefined) body.max_instances = o.maxInstances;
  if (o.idleSeconds !== undefined) body.idle_seconds = o.idleSeconds;
  if (o.public !== undefined) body.public = o.public === true;
  return body;
}

function versionNumber(v: number): number {
  if (typeof v !== "number" || !Number.isInteger(v) || v < 1) {
    throw new InvalidArgumentError(`version: a version number (1 or more), got ${JSON.stringify(v)}`, { code: "invalid_argument" });
  }
  return v;
}

function functionPath(name: string, rest = ""): string {
  if (typeof name !== "string" || name === "") {
    throw new InvalidArgumentError(`expected a function name, got ${JSON.stringify(name)}`, { code: "invalid_argument" });
  }
  return `/v1/functions/${encodeURIComponent(name)}${rest}`;
}

function versionPath(name: string, version: number, rest = ""): string {
  return functionPath(name, `/versions/${versionNumber(version)}${rest}`);
}

function call(opts: CallOptions): { timeoutMs?: number; signal?: AbortSignal } {
  const o: { timeoutMs?: number; signal?: AbortSignal } = {};
  if (opts.timeoutMs !== undefined) o.timeoutMs = opts.timeoutMs;
  if (opts.signal !== undefined) o.signal = opts.signal;
  return o;
}
