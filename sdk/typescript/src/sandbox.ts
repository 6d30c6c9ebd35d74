/**
 * A live sandbox: run commands, move files, snapshot, fork, and drive its lifecycle. Obtained
 * from `client.sandboxes.create()`, `.get()`, `.connect()` or `.list()`.
 *
 * `await using sandbox = await client.sandboxes.create()` kills the sandbox when the block ends.
 */

import "./dispose.js";
import {
  APIConnectionError,
  CommandExitError,
  CommandTimeoutError,
  InvalidArgumentError,
  NotFoundError,
  PandaStackError,
} from "./errors.js";
import { Filesystem } from "./filesystem.js";
import { Git } from "./git.js";
import type { HttpClient } from "./http.js";
import { parseSse } from "./sse.js";
import {
  Execution,
  Result,
  codeContextFromWire,
  executionErrorFromWire,
  executionFromWire,
  execResultFromWire,
  metricsFromWire,
  portUrlFromWire,
  type PortUrl,
  sandboxFromWire,
  snapshotFromWire,
  type CodeContext,
  type ExecEvent,
  type ExecResult,
  type ExecutionError,
  type SandboxInfo,
  type VolumeMount,
  type SandboxMetrics,
  type SandboxState,
  type SnapshotInfo,
} from "./types.js";
import type { WireBody } from "./wire.js";

/** The server's command timeout when `timeoutSeconds` is not given. */
export const DEFAULT_EXEC_TIMEOUT_SECONDS = 60;

/** Lifecycle calls that move a whole VM (create, fork, snapshot, hibernate, wake) get at least this long. */
export const LONG_OPERATION_TIMEOUT_MS = 600_000;

/** Options of {@link Sandbox.exec} and {@link Sandbox.execStream}. */
export interface ExecOptions {
  /** Kill the command after this many seconds (server default 60, max 3600). */
  timeoutSeconds?: number;
  /** Extra environment variables for the command. */
  env?: Record<string, string>;
  /** Absolute working directory. */
  cwd?: string;
  /** User to run as (default: the template's user). */
  user?: string;
  /** Standard input, sent whole and then closed (UTF-8 text on the wire). */
  stdin?: string | Uint8Array;
  /** Aborts the request; for a running command this also kills it. */
  signal?: AbortSignal;
}

/** Options of {@link Sandbox.exec}. */
export interface ExecRunOptions extends ExecOptions {
  /** Called with each chunk of standard output as it arrives (the command streams). */
  onStdout?: (data: string) => void;
  /** Called with each chunk of standard error as it arrives (the command streams). */
  onStderr?: (data: string) => void;
  /** Throw {@link CommandExitError} on a non-zero exit (default: the exit code is data). */
  check?: boolean;
}

/** The server's bound on a code run when `timeoutSeconds` is not given. */
const DEFAULT_CODE_TIMEOUT_SECONDS = 300;

/** Starting or stopping a code context (the server bounds it at 60 s; the sandbox may wake first). */
const CODE_CONTEXT_TIMEOUT_MS = 120_000;

/** The languages of the code interpreter. */
export type CodeLanguage = "python" | "javascript" | "typescript" | "bash";

/** Options of {@link Sandbox.runCode}. */
export interface RunCodeOptions {
  /**
   * `python` (the default), `javascript`, `typescript` or `bash`. JavaScript and TypeScript
   * allow top-level `await` and `import` and return the final expression's value; Bash keeps
   * its working directory, variables and functions (a failing last command is an
   * `ExitStatus` error). Every language needs `python3` in the template; JavaScript and
   * TypeScript Node.js 20.12+ with Debian's `node-acorn` and `node-typescript` (the `app` and
   * `code-interpreter` templates have them).
   */
  language?: CodeLanguage;
  /**
   * The context (kernel) to run in: one from {@link Sandbox.createCodeContext}, or its id (its
   * language is used). Default: the language's default context (`default` for Python,
   * `default-javascript`, …), which needs no creating.
   */
  context?: CodeContext | string;
  /** Environment of the kernel when this call starts it (a running kernel keeps its own). */
  env?: Record<string, string>;
  /**
   * Interrupt the run after this many seconds (server default 300, max 3600). The run then
   * ends with `error.name === "TimeoutError"`; the kernel and its variables stay.
   */
  timeoutSeconds?: number;
  /** Called with each chunk of standard output as it arrives (the run streams). */
  onStdout?: (data: string) => void;
  /** Called with each chunk of standard error as it arrives (the run streams). */
  onStderr?: (data: string) => void;
  /** Called with each rich result as it arrives (the run streams). */
  onResult?: (result: Result) => void;
  /** Called with the exception the code raised, if any (the run streams). */
  onError?: (error: ExecutionError) => void;
  /** Aborts the request; the kernel then interrupts the code. */
  signal?: AbortSignal;
}

/** Options of {@link Sandbox.createCodeContext}. */
export interface CodeContextOptions extends CallOptions {
  /** `python` (the default), `javascript`, `typescript` or `bash`. */
  language?: CodeLanguage;
  /** Environment of the context's kernel. */
  env?: Record<string, string>;
}

/** Options of calls that accept a request timeout and a signal. */
export interface CallOptions {
  /** Request timeout override in milliseconds (`0`: none). */
  timeoutMs?: number;
  signal?: AbortSignal;
}

/**
 * Options of `metrics()` (of a sandbox, and of `client.databases`, `client.apps`,
 * `client.functions`).
 */
export interface MetricsOptions extends CallOptions {
  /**
   * How far back: a span (`"90s"`, `"15m"`, `"1h"`) or a time (a `Date`, or an RFC 3339
   * string). Default 10 minutes, at most 6 hours.
   */
  since?: string | Date;
  /** Seconds per point, 1 to 86400 (default 5; the server reads every VM every 5 s). */
  step?: number;
}

/**
 * The query of a metrics call. Only the types are checked here (a whole number of seconds, a
 * non-empty string or a valid `Date`); the server checks the ranges and answers
 * `invalid_argument`. @internal
 */
export function metricsQuery(opts: MetricsOptions): Record<string, string | number | undefined> {
  const q: Record<string, string | number | undefined> = {};
  const { since, step } = opts;
  if (since !== undefined) {
    if (since instanceof Date) {
      if (Number.isNaN(since.getTime())) throw new InvalidArgumentError("since: an invalid Date", { code: "invalid_argument" });
      q.since = since.toISOString();
    } else if (typeof since === "string" && since !== "") {
      q.since = since;
    } else {
      throw new InvalidArgumentError(`since: a span such as "15m", a Date or an RFC 3339 string, got ${JSON.stringify(since)}`, {
        code: "invalid_argument",
      });
    }
  }
  if (step !== undefined) {
    if (typeof step !== "number" || !Number.isInteger(step)) {
      throw new InvalidArgumentError(`step: whole seconds per point, got ${JSON.stringify(step)}`, { code: "invalid_argument" });
    }
    q.step = step;
  }
  return q;
}

/** The pieces of the client a sandbox needs. @internal */
export interface SandboxContext {
  http: HttpClient;
  newIdempotencyKey(): Promise<string>;
}

/** One message of {@link Sandbox.jsonSse}: the event, its raw data and its JSON payload. */
interface JsonSseMessage {
  event: string;
  data: string;
  payload: Record<string, unknown>;
  status: number;
  requestId: string | undefined;
}

export class Sandbox {
  /** The sandbox id (`sb-…`). */
  readonly id: string;
  /** Files in the sandbox. */
  readonly filesystem: Filesystem;
  /** Git in the sandbox: clone, status, add, commit, push, pull, branches (see {@link Git}). */
  readonly git: Git;
  private _data: SandboxInfo;

  /** @internal */
  constructor(private readonly ctx: SandboxContext, data: SandboxInfo) {
    this.id = data.id;
    this._data = data;
    this.filesystem = new Filesystem(ctx.http, data.id);
    this.git = new Git(this);
  }

  /** Alias of {@link filesystem}. */
  get files(): Filesystem {
    return this.filesystem;
  }

  /** What the server said about this sandbox last (see {@link info} for a fresh view). */
  get data(): SandboxInfo {
    return this._data;
  }
  /** The last known state. */
  get state(): SandboxState {
    return this._data.state;
  }
  get template(): string {
    return this._data.template;
  }
  get metadata(): Record<string, string> {
    return this._data.metadata;
  }
  /** The volumes mounted in the sandbox (from its create). */
  get volumes(): VolumeMount[] {
    return this._data.volumes;
  }

  private get path(): string {
    return `/v1/sandboxes/${encodeURIComponent(this.id)}`;
  }

  private longTimeout(opts: CallOptions): number {
    return opts.timeoutMs ?? Math.max(this.ctx.http.timeoutMs, LONG_OPERATION_TIMEOUT_MS);
  }

  /** Fetches the sandbox's current description. */
  async info(opts: CallOptions = {}): Promise<SandboxInfo> {
    const w = await this.ctx.http.request<Record<string, unknown>>({
      method: "GET",
      path: this.path,
      ...call(opts),
    });
    this._data = sandboxFromWire(w);
    return this._data;
  }

  /** Whether the sandbox is running (false once it is gone). */
  async isRunning(opts: CallOptions = {}): Promise<boolean> {
    try {
      return (await this.info(opts)).state === "running";
    } catch (e) {
      if (e instanceof NotFoundError) return false;
      throw e;
    }
  }

  /**
   * Runs a command: a string goes through `/bin/sh -c`, an array runs as argv without a shell.
   * A non-zero exit and a timeout are returned as data (`exitCode`, `timedOut`: a command that
   * runs past `timeoutSeconds` is killed and its output so far returned), as in the Python SDK.
   * With `check` a timeout throws {@link CommandTimeoutError} and a non-zero exit
   * {@link CommandExitError}, both carrying the result. With `onStdout`/`onStderr` the output is
   * streamed to the callbacks while the command runs.
   */
  async exec(cmd: string | readonly string[], opts: ExecRunOptions = {}): Promise<ExecResult> {
    let result: ExecResult;
    if (opts.onStdout || opts.onStderr) {
      result = await this.collect(cmd, opts);
    } else {
      const w = await this.ctx.http.request<Record<string, unknown>>({
        method: "POST",
        path: `${this.path}/exec`,
        json: execBody(cmd, opts),
        retry: "rejected-only",
        timeoutMs: execRequestTimeout(this.ctx.http.timeoutMs, opts.timeoutSeconds),
        ...(opts.signal ? { signal: opts.signal } : {}),
      });
      result = execResultFromWire(w);
    }
    if (opts.check && result.timedOut) throw new CommandTimeoutError(result, opts.timeoutSeconds);
    if (opts.check && result.exitCode !== 0) throw new CommandExitError(result);
    return result;
  }

  private async collect(cmd: string | readonly string[], opts: ExecRunOptions): Promise<ExecResult> {
    let stdout = "";
    let stderr = "";
    for await (const ev of this.execStream(cmd, opts)) {
      switch (ev.type) {
        case "stdout":
          stdout += ev.data;
          opts.onStdout?.(ev.data);
          break;
        case "stderr":
          stderr += ev.data;
          opts.onStderr?.(ev.data);
          break;
        case "exit":
          return {
            stdout,
            stderr,
            exitCode: ev.exitCode,
            timedOut: ev.timedOut,
            truncated: ev.truncated,
            durationMs: ev.durationMs,
          };
      }
    }
    throw new APIConnectionError("exec stream ended without an exit event", { code: "stream_incomplete" });
  }

  /**
   * Runs a command and yields its output as it happens: `stdout`/`stderr` events, then one
   * `exit` event (also when the command timed out: see `timedOut`). Stopping the iteration early
   * (`break`) closes the stream, and the server kills the command.
   *
   * ```ts
   * for await (const ev of sandbox.execStream("make test")) {
   *   if (ev.type === "stdout") process.stdout.write(ev.data);
   *   else if (ev.type === "exit") console.log("exit", ev.exitCode);
   * }
   * ```
   */
  async *execStream(cmd: string | readonly string[], opts: ExecOptions = {}): AsyncGenerator<ExecEvent, void, undefined> {
    for await (const msg of this.jsonSse("exec", "exec/stream", execBody(cmd, opts), opts.signal, "exit")) {
      const payload = msg.payload;
      switch (msg.event) {
        case "stdout":
        case "stderr":
          yield { type: msg.event, data: typeof payload.data === "string" ? payload.data : "" };
          break;
        case "exit": {
          const r = execResultFromWire(payload);
          yield {
            type: "exit",
            exitCode: r.exitCode,
            timedOut: r.timedOut,
            truncated: r.truncated,
            durationMs: r.durationMs,
          };
          return;
        }
        case "error":
          throw new PandaStackError(
            `exec stream: ${typeof payload.message === "string" ? payload.message : msg.data}`,
            { code: typeof payload.code === "string" ? payload.code : "exec_error", status: msg.status, requestId: msg.requestId },
          );
        default:
          break; // unknown events from a newer server
      }
    }
  }

  /**
   * The events of a server-sent-event stream of JSON payloads (`POST {path}` of this sandbox),
   * ending after the `last` event. A broken or cut-short stream throws {@link APIConnectionError}
   * (an aborted `signal` throws its reason).
   */
  private async *jsonSse(
    what: string,
    path: string,
    body: unknown,
    signal: AbortSignal | undefined,
    last: string,
  ): AsyncGenerator<JsonSseMessage, void, undefined> {
    const res = await this.ctx.http.request({
      method: "POST",
      path: `${this.path}/${path}`,
      json: body,
      retry: "rejected-only",
      responseType: "stream",
      ...(signal ? { signal } : {}),
    });
    const requestId = res.headers.get("x-request-id") ?? undefined;
    if (!res.body) {
      throw new APIConnectionError(`${what} stream: empty response`, { code: "stream_incomplete", requestId });
    }
    try {
      for await (const msg of parseSse(res.body)) {
        let payload: unknown;
        try {
          payload = JSON.parse(msg.data);
        } catch {
          payload = { data: msg.data };
        }
        if (payload === null || typeof payload !== "object") payload = { data: payload };
        yield { event: msg.event, data: msg.data, payload: payload as Record<string, unknown>, status: res.status, requestId };
        if (msg.event === last) return;
      }
    } catch (e) {
      if (e instanceof PandaStackError) throw e;
      if (signal?.aborted) throw signal.reason ?? e;
      throw new APIConnectionError(`${what} stream broke: ${e instanceof Error ? e.message : String(e)}`, {
        code: "connection_error",
        requestId,
        cause: e,
      });
    }
    throw new APIConnectionError(`${what} stream ended without a ${last} event`, { code: "stream_incomplete", requestId });
  }

  /**
   * Runs code in the sandbox's code interpreter: a long-lived kernel (Python; the template
   * needs `python3`), so variables, imports and open files stay for the next call in the same
   * context.
   *
   * ```ts
   * await sandbox.runCode("x = 21");
   * (await sandbox.runCode("x * 2")).text;   // "42"
   * ```
   *
   * The value of a final expression, `display(…)` calls and matplotlib figures come back in
   * `results`. An exception in the code is data (`error`), not thrown; so is a run past
   * `timeoutSeconds` (`error.name === "TimeoutError"`). With any of the callbacks the run is
   * streamed and they are called as output, results and the error arrive; the returned
   * {@link Execution} still holds everything. A context that does not exist (or was deleted)
   * throws {@link NotFoundError}.
   */
  async runCode(code: string, opts: RunCodeOptions = {}): Promise<Execution> {
    const body = codeBody(code, opts);
    if (opts.onStdout || opts.onStderr || opts.onResult || opts.onError) {
      return this.collectCode(body, opts);
    }
    const w = await this.ctx.http.request<Record<string, unknown>>({
      method: "POST",
      path: `${this.path}/code`,
      json: body,
      retry: "rejected-only",
      timeoutMs: codeRequestTimeout(this.ctx.http.timeoutMs, opts.timeoutSeconds),
      ...(opts.signal ? { signal: opts.signal } : {}),
    });
    return executionFromWire(w ?? {});
  }

  private async collectCode(body: Record<string, unknown>, opts: RunCodeOptions): Promise<Execution> {
    let stdout = "";
    let stderr = "";
    const results: Result[] = [];
    let error: ExecutionError | null = null;
    for await (const ev of this.codeStream(body, opts.signal)) {
      switch (ev.type) {
        case "stdout":
          stdout += ev.data;
          opts.onStdout?.(ev.data);
          break;
        case "stderr":
          stderr += ev.data;
          opts.onStderr?.(ev.data);
          break;
        case "result":
          results.push(ev.result);
          opts.onResult?.(ev.result);
          break;
        case "error":
          error = ev.error;
          opts.onError?.(ev.error);
          break;
        case "done":
          return new Execution({ stdout, stderr, results, error, truncated: ev.truncated, durationMs: ev.durationMs });
      }
    }
    throw new APIConnectionError("code stream ended without a done event", { code: "stream_incomplete" });
  }

  /** The events of `…/code/stream`, ending with `done`. */
  private async *codeStream(body: Record<string, unknown>, signal: AbortSignal | undefined): AsyncGenerator<CodeEvent, void, undefined> {
    for await (const msg of this.jsonSse("code", "code/stream", body, signal, "done")) {
      const payload = msg.payload;
      switch (msg.event) {
        case "stdout":
        case "stderr":
          yield { type: msg.event, data: typeof payload.data === "string" ? payload.data : "" };
          break;
        case "result":
          yield { type: "result", result: new Result(payload) };
          break;
        case "error": {
          const error = executionErrorFromWire(payload);
          if (error.name === "ContextNotFound") {
            // What the blocking call answers with a 404.
            throw new NotFoundError(`code context ${error.value} not found (create it with createCodeContext())`, {
              code: "not_found",
              status: 404,
              requestId: msg.requestId,
            });
          }
          yield { type: "error", error };
          break;
        }
        case "done":
          yield {
            type: "done",
            truncated: payload.truncated === true,
            durationMs: typeof payload.duration_ms === "number" ? payload.duration_ms : 0,
          };
          return;
        default:
          break; // unknown events from a newer server
      }
    }
  }

  /**
   * Creates a code context: a kernel of its own, whose variables no other context sees. Pass it
   * as `context` to {@link runCode}; {@link deleteCodeContext} stops it.
   */
  async createCodeContext(opts: CodeContextOptions = {}): Promise<CodeContext> {
    const body: WireBody<"CodeContextRequest"> = { language: opts.language ?? "python" };
    if (opts.env && Object.keys(opts.env).length > 0) body.env = opts.env;
    const w = await this.ctx.http.request<Record<string, unknown>>({
      method: "POST",
      path: `${this.path}/code/contexts`,
      json: body,
      retry: "rejected-only",
      timeoutMs: opts.timeoutMs ?? codeContextTimeout(this.ctx.http.timeoutMs),
      ...(opts.signal ? { signal: opts.signal } : {}),
    });
    return codeContextFromWire(w ?? {});
  }

  /**
   * Stops a context's kernel; its variables are gone and a later {@link runCode} in it throws
   * {@link NotFoundError}. Deleting `"default"` resets the default context. A context that does
   * not exist (deleted already) throws {@link NotFoundError}.
   */
  async deleteCodeContext(context: CodeContext | string, opts: CallOptions = {}): Promise<void> {
    const id = contextId(context);
    if (!id) throw new InvalidArgumentError("deleteCodeContext: a context or a context id is required", { code: "invalid_argument" });
    await this.ctx.http.request({
      method: "DELETE",
      path: `${this.path}/code/contexts/${encodeURIComponent(id)}`,
      responseType: "none",
      timeoutMs: opts.timeoutMs ?? codeContextTimeout(this.ctx.http.timeoutMs),
      ...(opts.signal ? { signal: opts.signal } : {}),
    });
  }

  /** Snapshots memory and disk; create sandboxes from it with `snapshotId`. */
  async snapshot(opts: CallOptions = {}): Promise<SnapshotInfo> {
    const w = await this.ctx.http.request<Record<string, unknown>>({
      method: "POST",
      path: `${this.path}/snapshots`,
      idempotencyKey: await this.ctx.newIdempotencyKey(),
      retry: "rejected-only",
      timeoutMs: this.longTimeout(opts),
      ...(opts.signal ? { signal: opts.signal } : {}),
    });
    return snapshotFromWire(w);
  }

  /**
   * Forks the running sandbox: `fork()` gives one child, `fork(n)` an array of n (at most 16),
   * each a copy of this sandbox's memory and disk at this moment, running independently. The
   * snapshot the fork takes (each child's `data.snapshotId`) is deleted by the server with the
   * last sandbox restored from it, unless `keepSnapshot` is set.
   */
  fork(): Promise<Sandbox>;
  fork(count: number, opts?: ForkOptions): Promise<Sandbox[]>;
  async fork(count?: number, opts: ForkOptions = {}): Promise<Sandbox | Sandbox[]> {
    const r = await this.forkDetailed(count ?? 1, opts);
    return count === undefined ? r.children[0]! : r.children;
  }

  /** Like {@link fork}, with the snapshot the children were made from. */
  async forkDetailed(count = 1, opts: ForkOptions = {}): Promise<ForkResult> {
    const body: WireBody<"ForkRequest"> = { count };
    if (opts.metadata) body.metadata = opts.metadata;
    if (opts.keepSnapshot) body.keep_snapshot = true;
    if (opts.spread) body.spread = true;
    const w = await this.ctx.http.request<Record<string, unknown>>({
      method: "POST",
      path: `${this.path}/fork`,
      json: body,
      idempotencyKey: await this.ctx.newIdempotencyKey(),
      retry: "rejected-only",
      timeoutMs: this.longTimeout(opts),
      ...(opts.signal ? { signal: opts.signal } : {}),
    });
    const children = Array.isArray(w.children) ? w.children : [];
    return {
      parentId: typeof w.parent_id === "string" ? w.parent_id : this.id,
      snapshotId: typeof w.snapshot_id === "string" ? w.snapshot_id : "",
      keepSnapshot: w.keep_snapshot === true,
      children: children.map((c) => new Sandbox(this.ctx, sandboxFromWire(c as Record<string, unknown>))),
    };
  }

  /** Freezes the vCPUs in place (memory stays resident). */
  pause(opts: CallOptions = {}): Promise<this> {
    return this.verb("pause", opts);
  }
  /** Unfreezes a paused sandbox. */
  resume(opts: CallOptions = {}): Promise<this> {
    return this.verb("resume", opts);
  }
  /** Saves the sandbox to disk and frees its memory; any later call wakes it. */
  hibernate(opts: CallOptions = {}): Promise<this> {
    return this.verb("hibernate", opts);
  }
  /** Brings a hibernated sandbox back. */
  wake(opts: CallOptions = {}): Promise<this> {
    return this.verb("wake", opts);
  }

  /**
   * Moves the sandbox to another host of a cluster (`opts.host`, or the one placement chooses)
   * with its memory, processes and files; it comes back running if it was running, else
   * hibernated. A single-host server answers 409 `conflict` (`ConflictError`).
   */
  async migrate(opts: CallOptions & { host?: string } = {}): Promise<this> {
    const w = await this.ctx.http.request<Record<string, unknown>>({
      method: "POST",
      path: `${this.path}/migrate`,
      json: opts.host === undefined ? {} : { host: opts.host },
      retry: "rejected-only",
      timeoutMs: this.longTimeout(opts),
      ...(opts.signal ? { signal: opts.signal } : {}),
    });
    this._data = sandboxFromWire(w);
    return this;
  }

  private async verb(name: string, opts: CallOptions): Promise<this> {
    const w = await this.ctx.http.request<Record<string, unknown>>({
      method: "POST",
      path: `${this.path}/${name}`,
      retry: "rejected-only",
      timeoutMs: this.longTimeout(opts),
      ...(opts.signal ? { signal: opts.signal } : {}),
    });
    this._data = sandboxFromWire(w);
    return this;
  }

  /**
   * Destroys the sandbox. Returns false if it was already gone (not an error: killing is
   * idempotent).
   */
  async kill(opts: CallOptions = {}): Promise<boolean> {
    try {
      await this.ctx.http.request({ method: "DELETE", path: this.path, responseType: "none", ...call(opts) });
      this._data = { ...this._data, state: "stopped" };
      return true;
    } catch (e) {
      if (e instanceof NotFoundError && e.code !== "not_found") {
        this._data = { ...this._data, state: "stopped" };
        return false;
      }
      throw e;
    }
  }

  /** Sets the time to live: the sandbox expires `seconds` from now. */
  async setTimeout(seconds: number, opts: CallOptions = {}): Promise<SandboxInfo> {
    return this.update({ ttlSeconds: seconds }, opts);
  }

  /** Changes the TTL, the idle timeout or the metadata (replaced as a whole). */
  async update(
    changes: { ttlSeconds?: number; idleTimeoutSeconds?: number; metadata?: Record<string, string> },
    opts: CallOptions = {},
  ): Promise<SandboxInfo> {
    const body: WireBody<"PatchSandboxRequest"> = {};
    if (changes.ttlSeconds !== undefined) body.ttl_seconds = changes.ttlSeconds;
    if (changes.idleTimeoutSeconds !== undefined) body.idle_timeout_seconds = changes.idleTimeoutSeconds;
    if (changes.metadata !== undefined) body.metadata = changes.metadata;
    const w = await this.ctx.http.request<Record<string, unknown>>({
      method: "PATCH",
      path: this.path,
      json: body,
      ...call(opts),
    });
    this._data = sandboxFromWire(w);
    return this._data;
  }

  /** The guest console output so far. */
  async logs(opts: CallOptions = {}): Promise<string> {
    return this.ctx.http.request({ method: "GET", path: `${this.path}/logs`, responseType: "text", ...call(opts) });
  }

  /**
   * The sandbox's resource use over time, and its host-side figures now: `samples` (CPU, memory,
   * disk, network; oldest first, `step` seconds apart) since `since` (default 10 minutes back),
   * and `state`, `hostRssBytes`, `hostPssBytes`, `cpuTimeMs` of its VM now. Values the server
   * refuses throw {@link InvalidArgumentError}.
   *
   * ```ts
   * const m = await sandbox.metrics({ since: "15m", step: 60 });
   * for (const p of m.samples) console.log(p.t, p.cpuPct, p.memBytes, p.memTotalBytes);
   * ```
   */
  async metrics(opts: MetricsOptions = {}): Promise<SandboxMetrics> {
    const w = await this.ctx.http.request<Record<string, unknown>>({
      method: "GET",
      path: `${this.path}/metrics`,
      query: metricsQuery(opts),
      ...call(opts),
    });
    return metricsFromWire(w ?? {});
  }

  /** The preview URL of `port` inside the sandbox, whether it is public, and the token that
   * opens it while private (whether or not anything listens there yet). */
  async getPort(port: number, opts: CallOptions = {}): Promise<PortUrl> {
    const w = await this.ctx.http.request<Record<string, unknown>>({
      method: "GET",
      path: `${this.path}/ports/${checkPort(port)}/url`,
      ...call(opts),
    });
    return portUrlFromWire(w ?? {});
  }

  /** The preview URL of `port`: `https://<port>-<id>.<domain>`. Private ports need the token of
   * {@link getPort} in the `X-PandaStack-Access-Token` header. */
  async getUrl(port: number, opts: CallOptions = {}): Promise<string> {
    return (await this.getPort(port, opts)).url;
  }

  /** Makes `port` reachable without a token (or, with `isPublic = false`, private again). */
  async setPortPublic(port: number, isPublic = true, opts: CallOptions = {}): Promise<PortUrl> {
    const w = await this.ctx.http.request<Record<string, unknown>>({
      method: "PATCH",
      path: `${this.path}/ports/${checkPort(port)}`,
      json: { public: isPublic === true } satisfies WireBody<"PortUpdate">,
      ...call(opts),
    });
    return portUrlFromWire(w ?? {});
  }

  /** Kills the sandbox: what `await using` calls at the end of its block. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.kill();
  }

  toJSON(): SandboxInfo {
    return this._data;
  }
}

export interface ForkOptions extends CallOptions {
  /** Metadata of the children (default: the parent's). */
  metadata?: Record<string, string>;
  /**
   * Keep the fork's snapshot until `client.snapshots.delete(id)` (default: the server deletes
   * it with the last sandbox restored from it).
   */
  keepSnapshot?: boolean;
  /** In a cluster, put the children on other hosts than the parent's (each child's `host` says where). */
  spread?: boolean;
}

export interface ForkResult {
  parentId: string;
  /** The snapshot the fork took; the children were restored from it. */
  snapshotId: string;
  /** Whether that snapshot is kept (`keepSnapshot`); if not, it goes with the last child. */
  keepSnapshot: boolean;
  children: Sandbox[];
}

function call(opts: CallOptions): { timeoutMs?: number; signal?: AbortSignal } {
  const o: { timeoutMs?: number; signal?: AbortSignal } = {};
  if (opts.timeoutMs !== undefined) o.timeoutMs = opts.timeoutMs;
  if (opts.signal !== undefined) o.signal = opts.signal;
  return o;
}

function execBody(cmd: string | readonly string[], opts: ExecOptions): Record<string, unknown> {
  const body: WireBody<"ExecRequest"> = typeof cmd === "string" ? { cmd } : { argv: [...cmd] };
  if (opts.env && Object.keys(opts.env).length > 0) body.env = opts.env;
  if (opts.cwd !== undefined) body.cwd = opts.cwd;
  if (opts.user !== undefined) body.user = opts.user;
  if (opts.stdin !== undefined) {
    body.stdin = typeof opts.stdin === "string" ? opts.stdin : new TextDecoder("utf-8").decode(opts.stdin);
  }
  if (opts.timeoutSeconds !== undefined) body.timeout_seconds = opts.timeoutSeconds;
  return body;
}

/** The HTTP wait for a blocking exec: the command's own limit plus slack, never less than the client's. */
function execRequestTimeout(clientTimeoutMs: number, timeoutSeconds: number | undefined): number {
  if (clientTimeoutMs === 0) return 0;
  const cmd = (timeoutSeconds ?? DEFAULT_EXEC_TIMEOUT_SECONDS) * 1000 + 30_000;
  return Math.max(clientTimeoutMs, cmd);
}

/** An event of `…/code/stream`. */
type CodeEvent =
  | { type: "stdout" | "stderr"; data: string }
  | { type: "result"; result: Result }
  | { type: "error"; error: ExecutionError }
  | { type: "done"; truncated: boolean; durationMs: number };

function contextId(context: CodeContext | string | undefined): string | undefined {
  if (context === undefined) return undefined;
  return typeof context === "string" ? context : context.id;
}

function codeBody(code: string, opts: RunCodeOptions): Record<string, unknown> {
  if (typeof code !== "string") throw new InvalidArgumentError("runCode: code must be a string", { code: "invalid_argument" });
  const body: WireBody<"CodeRequest"> = { code };
  if (opts.language !== undefined) body.language = opts.language;
  const ctx = contextId(opts.context);
  if (ctx !== undefined) body.context_id = ctx;
  if (opts.env && Object.keys(opts.env).length > 0) body.env = opts.env;
  if (opts.timeoutSeconds !== undefined) body.timeout_seconds = opts.timeoutSeconds;
  return body;
}

/**
 * The HTTP wait for a blocking code run: the run's own bound plus the server's 30 s grace and
 * slack, never less than the client's.
 */
function codeRequestTimeout(clientTimeoutMs: number, timeoutSeconds: number | undefined): number {
  if (clientTimeoutMs === 0) return 0;
  const run = (timeoutSeconds ?? DEFAULT_CODE_TIMEOUT_SECONDS) * 1000 + 60_000;
  return Math.max(clientTimeoutMs, run);
}

function codeContextTimeout(clientTimeoutMs: number): number {
  return clientTimeoutMs === 0 ? 0 : Math.max(clientTimeoutMs, CODE_CONTEXT_TIMEOUT_MS);
}

/** A TCP port number (1 to 65535), checked before any request. */
function checkPort(port: unknown): number {
  if (typeof port !== "number" || !Number.isInteger(port) || port < 1 || port > 65535) {
    throw new InvalidArgumentError(`port: a TCP port, 1 to 65535, got ${String(port)}`, { code: "invalid_argument" });
  }
  return port;
}
