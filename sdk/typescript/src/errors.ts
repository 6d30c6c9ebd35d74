/**
 * Typed errors. Every error the SDK throws is a {@link PandaStackError}; API errors carry the
 * server's machine-readable `code`, the HTTP `status` and the `requestId` to quote in bug
 * reports. Test with `instanceof`:
 *
 * ```ts
 * try { await client.sandboxes.get("sb-nope"); }
 * catch (e) { if (e instanceof NotFoundError) … }
 * ```
 */

import type { DeployInfo, ExecResult, FunctionVersionInfo, TemplateInfo, VolumeBackupInfo } from "./types.js";

export interface PandaStackErrorOptions {
  code?: string;
  status?: number;
  requestId?: string;
  cause?: unknown;
}

/** Base class of every error thrown by the SDK. */
export class PandaStackError extends Error {
  /** Machine-readable code (`sandbox_not_found`, `invalid_argument`, …). */
  readonly code: string;
  /** HTTP status, when the error came from an HTTP response. */
  readonly status: number | undefined;
  /** The server's `X-Request-Id` for the failed request, when known. */
  readonly requestId: string | undefined;

  constructor(message: string, options: PandaStackErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = options.code ?? "error";
    this.status = options.status;
    this.requestId = options.requestId;
  }
}

/** 401: the API key is missing, malformed or revoked. */
export class AuthenticationError extends PandaStackError {}

/** 403: the key may not do this. */
export class PermissionDeniedError extends PandaStackError {}

/**
 * 404: the sandbox, snapshot, template, file or route does not exist (or belongs to another
 * workspace). `code` tells which: `sandbox_not_found`, `snapshot_not_found`, `not_found`, ….
 */
export class NotFoundError extends PandaStackError {}

/** 404 `database_not_found`: no database of that id or name in the workspace. */
export class DatabaseNotFoundError extends NotFoundError {}

/** 404 `app_not_found`: no app of that name or id in the workspace. */
export class AppNotFoundError extends NotFoundError {}

/** 409: a conflicting state (`conflict`, `sandbox_state`), e.g. resuming a running sandbox. */
export class ConflictError extends PandaStackError {}

/**
 * 409 `volume_busy`: the volume is mounted read-write by a sandbox (the message names it), so
 * it cannot be mounted read-write again, grown or deleted until that sandbox is gone. Mount it
 * `readOnly` to share a copy.
 */
export class VolumeBusyError extends ConflictError {}

/**
 * 507 `quota_exceeded`: a workspace storage quota is full: the total size of its volumes, or the
 * host disk its snapshots, hibernated sandboxes and template builds take (the message says
 * which).
 */
export class QuotaExceededError extends PandaStackError {}

const PG_ERROR = /^([A-Z]+) ([0-9A-Z]{5}): ([\s\S]*)$/;

/**
 * 400 `query_failed`: PostgreSQL refused a query of `client.databases.query()` (a syntax error,
 * a constraint violation, a missing table, …). The statement did not take effect.
 *
 * {@link sqlstate} is PostgreSQL's five-character error code (`"42601"` syntax error, `"23505"`
 * unique violation, `"42P01"` undefined table, …), {@link severity} its severity (`"ERROR"`) and
 * {@link pgMessage} PostgreSQL's own message, parsed from the server's message
 * `"ERROR 42601: syntax error at or near …"` (`undefined` if it has another shape).
 */
export class QueryError extends PandaStackError {
  readonly sqlstate: string | undefined;
  readonly severity: string | undefined;
  readonly pgMessage: string;

  /** `serverMessage`: the server's `error.message` when `message` adds to it. */
  constructor(message: string, options: PandaStackErrorOptions & { serverMessage?: string } = {}) {
    super(message, { code: "query_failed", ...options });
    const raw = options.serverMessage ?? message;
    const m = PG_ERROR.exec(raw);
    this.severity = m?.[1];
    this.sqlstate = m?.[2];
    this.pgMessage = m?.[3] ?? raw;
  }
}

/** 400/413/422: the request was rejected; the message names the offending field. */
export class InvalidArgumentError extends PandaStackError {}

/** 429: a workspace limit or rate was hit. */
export class RateLimitError extends PandaStackError {
  /** Seconds the server asked to wait (`Retry-After`), if it said. */
  readonly retryAfter: number | undefined;

  constructor(message: string, options: PandaStackErrorOptions & { retryAfter?: number } = {}) {
    super(message, options);
    this.retryAfter = options.retryAfter;
  }
}

/**
 * 429 `limit_reached`: the workspace keeps as many snapshots, hibernated sandboxes or template
 * builds as its quota allows (the message names which). It lasts until something is deleted, so
 * the client does not retry it.
 */
export class LimitReachedError extends RateLimitError {}

/** 5xx: the server failed. Retried automatically for 502 and 503. */
export class ServerError extends PandaStackError {}

/** The server could not be reached, or the connection broke mid-response. */
export class APIConnectionError extends PandaStackError {}

/**
 * The HTTP request took longer than the client's `timeoutMs` (the request timeout, not a
 * command's `timeoutSeconds` nor a sandbox's TTL).
 */
export class RequestTimeoutError extends APIConnectionError {}

/**
 * A command ran past its `timeoutSeconds` and was killed (thrown by `exec` with `check: true`;
 * without it the result says `timedOut`). The output it produced until then is kept in
 * {@link result}.
 */
export class CommandTimeoutError extends PandaStackError {
  readonly result: ExecResult;

  constructor(result: ExecResult, timeoutSeconds: number | undefined) {
    const limit = timeoutSeconds === undefined ? "the default command timeout (60 s)" : `timeoutSeconds=${timeoutSeconds}`;
    super(`command timed out after ${result.durationMs} ms (${limit}) and was killed`, {
      code: "command_timeout",
    });
    this.result = result;
  }

  get stdout(): string {
    return this.result.stdout;
  }
  get stderr(): string {
    return this.result.stderr;
  }
}

/** A command exited non-zero and `check: true` was set. The result is in {@link result}. */
export class CommandExitError extends PandaStackError {
  readonly result: ExecResult;

  constructor(result: ExecResult) {
    const tail = result.stderr.trim().split("\n").slice(-3).join("\n");
    super(`command exited with code ${result.exitCode}${tail ? `: ${tail}` : ""}`, {
      code: "command_exit",
    });
    this.result = result;
  }

  get exitCode(): number {
    return this.result.exitCode;
  }
  get stdout(): string {
    return this.result.stdout;
  }
  get stderr(): string {
    return this.result.stderr;
  }
}

/**
 * A template build waited for by `client.templates.build()` ended `failed`. {@link template} is
 * the template as the server reported it at the end; {@link error} is the server's reason. The
 * whole build log is `client.templates.logs(name)`.
 */
export class TemplateBuildError extends PandaStackError {
  readonly template: TemplateInfo;

  constructor(message: string, template: TemplateInfo, options: PandaStackErrorOptions = {}) {
    super(message, { code: "template_build_failed", ...options });
    this.template = template;
  }

  /** Why the build failed (`template.error`). */
  get error(): string | null {
    return this.template.error;
  }
}

/**
 * `client.templates.build({ timeoutSeconds })` gave up waiting: the build had not finished in
 * time. It goes on on the server; {@link TemplateBuildError.template} is its last known state.
 */
export class TemplateBuildTimeoutError extends TemplateBuildError {
  constructor(message: string, template: TemplateInfo, options: PandaStackErrorOptions = {}) {
    super(message, template, { code: "template_build_timeout", ...options });
  }
}

/**
 * A backup waited for with `client.volumes.waitBackup()` (or `backup(name, { wait: true })`)
 * ended `failed`. {@link backup} is the backup as the server reported it; {@link error} the
 * server's reason.
 */
export class VolumeBackupError extends PandaStackError {
  readonly backup: VolumeBackupInfo;

  constructor(message: string, backup: VolumeBackupInfo, options: PandaStackErrorOptions = {}) {
    super(message, { code: "volume_backup_failed", ...options });
    this.backup = backup;
  }

  /** Why the backup failed (`backup.error`). */
  get error(): string | null {
    return this.backup.error;
  }
}

/**
 * `client.volumes.waitBackup(…, { timeoutSeconds })` gave up: the upload had not ended in
 * time. It goes on on the server; {@link VolumeBackupError.backup} is its last known state.
 */
export class VolumeBackupTimeoutError extends VolumeBackupError {
  constructor(message: string, backup: VolumeBackupInfo, options: PandaStackErrorOptions = {}) {
    super(message, backup, { code: "volume_backup_timeout", ...options });
  }
}

/**
 * `client.apps.waitForDeploy(…, { timeoutSeconds })` (or `deploy(name, { wait: true })`) gave
 * up: the deploy was still under way. It goes on on the server; {@link deploy} is its last
 * known state (follow it with `apps.getDeploy(name, deploy.id)`).
 */
export class DeployTimeoutError extends PandaStackError {
  readonly deploy: DeployInfo;

  constructor(message: string, deploy: DeployInfo, options: PandaStackErrorOptions = {}) {
    super(message, { code: "deploy_timeout", ...options });
    this.deploy = deploy;
  }
}

/**
 * `functions.waitForVersion(…, { timeoutSeconds })` (or `functions.createVersion` with `wait`)
 * gave up: the version was still being built. The build goes on on the server; {@link version}
 * is its last known state (follow it with `functions.getVersion(name, version.version)`).
 */
export class FunctionVersionTimeoutError extends PandaStackError {
  readonly version: FunctionVersionInfo;

  constructor(message: string, version: FunctionVersionInfo, options: PandaStackErrorOptions = {}) {
    super(message, { code: "function_version_timeout", ...options });
    this.version = version;
  }
}

/** What a {@link GitError} carries besides the message. */
export interface GitErrorOptions extends PandaStackErrorOptions {
  /** The argv that ran (it never holds a token). */
  command?: readonly string[];
  /** The command's result. */
  result?: ExecResult;
}

/**
 * A git command that `sandbox.git` ran in the sandbox failed. The message is git's own (its
 * standard error, or its output when that is empty) after the command; {@link command} is the
 * argv that ran (it never holds a token) and {@link result} the whole exec result. A token
 * given to the call is replaced by `***` wherever git echoed it.
 */
export class GitError extends PandaStackError {
  readonly command: readonly string[];
  readonly result: ExecResult | undefined;

  constructor(message: string, options: GitErrorOptions = {}) {
    const { command, result, ...rest } = options;
    super(message, { code: "git_failed", ...rest });
    this.command = command ?? [];
    this.result = result;
  }

  get exitCode(): number | undefined {
    return this.result?.exitCode;
  }
  get stderr(): string {
    return this.result?.stderr ?? "";
  }
}

/**
 * The remote refused the credentials, or wanted some and none were given (git says
 * "Authentication failed", "could not read Username", "terminal prompts disabled", or the
 * server answered 401 / 403). Git never prompts: the command fails at once.
 */
export class GitAuthError extends GitError {
  constructor(message: string, options: GitErrorOptions = {}) {
    super(message, { code: "git_auth_failed", ...options });
  }
}

/**
 * A pull (a merge) stopped on conflicts. {@link files} are the conflicting paths, relative to
 * the repository; the working tree is left mid-merge with conflict markers in them: resolve,
 * `add` and `commit`, or run `git merge --abort`.
 */
export class GitConflictError extends GitError {
  readonly files: readonly string[];

  constructor(message: string, files: readonly string[], options: GitErrorOptions = {}) {
    super(message, { code: "git_conflict", ...options });
    this.files = files;
  }
}

/** Parses a `Retry-After` header (delta-seconds or an HTTP date) into seconds. */
export function parseRetryAfter(value: string | null | undefined): number | undefined {
  if (value == null || value.trim() === "") return undefined;
  const n = Number(value.trim());
  if (Number.isFinite(n)) return Math.max(0, n);
  const date = Date.parse(value);
  if (Number.isNaN(date)) return undefined;
  return Math.max(0, (date - Date.now()) / 1000);
}

/**
 * Builds the typed error for an HTTP error response from its status, headers and body text
 * (the `{"error":{code,message,request_id}}` envelope when the server sent one).
 */
export function errorFromResponse(status: number, headers: Headers, bodyText: string): PandaStackError {
  let code: string | undefined;
  let message: string | undefined;
  let requestId: string | undefined = headers.get("x-request-id") ?? undefined;
  try {
    const parsed = JSON.parse(bodyText) as unknown;
    const err = (parsed as { error?: unknown } | null)?.error;
    if (err && typeof err === "object") {
      const e = err as { code?: unknown; message?: unknown; request_id?: unknown };
      if (typeof e.code === "string") code = e.code;
      if (typeof e.message === "string") message = e.message;
      if (typeof e.request_id === "string" && e.request_id) requestId = e.request_id;
    } else if (typeof err === "string") {
      message = err;
    }
  } catch {
    // not JSON: keep a bounded piece of the text
  }
  if (message === undefined) {
    const text = bodyText.trim();
    message = text ? text.slice(0, 500) : `HTTP ${status}`;
  }
  const opts = { code: code ?? defaultCode(status), status, requestId };
  const text = requestId ? `${message} (request ${requestId})` : message;
  switch (true) {
    case status === 401:
      return new AuthenticationError(text, opts);
    case status === 403:
      return new PermissionDeniedError(text, opts);
    case status === 404 && opts.code === "database_not_found":
      return new DatabaseNotFoundError(text, opts);
    case status === 404 && opts.code === "app_not_found":
      return new AppNotFoundError(text, opts);
    case status === 404:
      return new NotFoundError(text, opts);
    case status === 409 && opts.code === "volume_busy":
      return new VolumeBusyError(text, opts);
    case status === 409:
      return new ConflictError(text, opts);
    case opts.code === "quota_exceeded":
      return new QuotaExceededError(text, opts);
    case opts.code === "query_failed":
      return new QueryError(text, { ...opts, serverMessage: message });
    case status === 429 && opts.code === "limit_reached":
      return new LimitReachedError(text, opts);
    case status === 429:
      return new RateLimitError(text, { ...opts, retryAfter: parseRetryAfter(headers.get("retry-after")) });
    case status === 400 || status === 413 || status === 422:
      return new InvalidArgumentError(text, opts);
    case status >= 500:
      return new ServerError(text, opts);
    default:
      return new PandaStackError(text, opts);
  }
}

function defaultCode(status: number): string {
  switch (status) {
    case 400:
      return "invalid_json";
    case 401:
      return "unauthorized";
    case 403:
      return "permission_denied";
    case 404:
      return "not_found";
    case 409:
      return "conflict";
    case 413:
      return "payload_too_large";
    case 422:
      return "invalid_argument";
    case 429:
      return "rate_limited";
    case 503:
      return "unavailable";
    default:
      return status >= 500 ? "internal" : "http_error";
  }
}
