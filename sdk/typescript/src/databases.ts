/**
 * `client.databases`: managed PostgreSQL databases, each in a microVM of its own with its data
 * on a durable volume, reached with a `postgres://` connection string (TLS) by any driver, or
 * over HTTP with {@link Databases.query}:
 *
 * ```ts
 * const db = await client.databases.create({ name: "app" });
 * await client.databases.query(db.id, "create table t (id int primary key, note text)");
 * await client.databases.query(db.id, "insert into t values ($1, $2)", [1, "hello"]);
 * const { rows } = await client.databases.query(db.id, "select * from t"); // [[1, "hello"]]
 * ```
 *
 * Every call takes the database's id or its name. A database idle for `idleSeconds` hibernates;
 * the next connection or query wakes it.
 */

import { InvalidArgumentError, NotFoundError, VolumeBackupError, VolumeBackupTimeoutError } from "./errors.js";
import type { HttpClient } from "./http.js";
import { Paginator, type Page } from "./pagination.js";
import { LONG_OPERATION_TIMEOUT_MS, metricsQuery, type CallOptions, type MetricsOptions } from "./sandbox.js";
import {
  databaseExtensionsFromWire,
  databaseFromWire,
  metricsFromWire,
  queryResultFromWire,
  volumeBackupFromWire,
  type DatabaseExtensions,
  type DatabaseInfo,
  type QueryResult,
  type SandboxMetrics,
  type VolumeBackupInfo,
} from "./types.js";
import type { BackupOptions, WaitBackupOptions } from "./volumes.js";
import type { WireBody } from "./wire.js";

/**
 * A database create (and a branch) may build and bake the `postgres` template first, which
 * takes minutes: it waits at least this long, milliseconds.
 */
export const DATABASE_CREATE_TIMEOUT_MS = 900_000;
/** The server's statement timeout of a query when `timeoutMs` of {@link QueryOptions} is not given. */
const SERVER_DEFAULT_QUERY_TIMEOUT_MS = 30_000;
/** Extra time a query's HTTP request gets beyond its statement timeout: a hibernated database wakes, a stopped one gets a new VM. */
const QUERY_HTTP_MARGIN_MS = 300_000;
const DEFAULT_BACKUP_TIMEOUT_SECONDS = 3600;
const DEFAULT_BACKUP_POLL_MS = 500;

/** Options of {@link Databases.create}. */
export interface CreateDatabaseOptions extends CallOptions {
  /** The database's name, also its owner role's: 1-40 of `[a-z0-9_]`, starting with a letter. */
  name: string;
  /** PostgreSQL major version (default and only choice today: 17). */
  version?: number;
  /** Size of its data volume, GiB (default 1). */
  sizeGb?: number;
  /**
   * Memory of its VM, MiB: a multiple of 256 from 256 to 16384 (default 1024). The first
   * database of a size bakes the `postgres` template at that size.
   */
  memoryMb?: number;
  /** Seconds without connections or queries before it hibernates (default 300; `0`: never). */
  idleSeconds?: number;
  /** Default: a fresh random key, reused on retries, so a retried create never makes two. */
  idempotencyKey?: string;
}

/** Options of {@link Databases.branch}. */
export interface BranchDatabaseOptions extends CallOptions {
  /** The branch's name (default `<name>_<6 hex>`). */
  name?: string;
  /**
   * Branch from the archive as of this time (a `Date`, or an RFC 3339 string) instead of now:
   * point-in-time, inside the restore window.
   */
  fromTime?: Date | string;
  /** Seconds without connections or queries before the branch hibernates. */
  idleSeconds?: number;
  /** Default: a fresh random key, reused on retries. */
  idempotencyKey?: string;
}

/** Options of {@link Databases.restore}. */
export interface RestoreDatabaseOptions extends CallOptions {
  /** Default: a fresh random key, reused on retries. */
  idempotencyKey?: string;
}

/** Options of {@link Databases.query}. */
export interface QueryOptions extends CallOptions {
  /** Statement timeout, milliseconds (server default 30000, at most 300000). Not the HTTP request's timeout (`timeoutMs`). */
  statementTimeoutMs?: number;
}

/** Paging of {@link Databases.list}. */
export interface ListDatabasesOptions extends CallOptions {
  /** Page size (1-1000). */
  limit?: number;
  /** Start after this cursor (from a previous page's `nextCursor`). */
  cursor?: string;
}

export class Databases {
  /** @internal */
  constructor(
    private readonly http: HttpClient,
    private readonly newIdempotencyKey: () => Promise<string>,
  ) {}

  /**
   * Creates a database and resolves once it is ready for connections. The first create on a
   * server builds and bakes the `postgres` template, which takes minutes: the request waits up
   * to `timeoutMs` (default 15 minutes). A name in use throws {@link ConflictError}; a bad name,
   * version or size {@link InvalidArgumentError}.
   */
  async create(opts: CreateDatabaseOptions): Promise<DatabaseInfo> {
    if (typeof opts?.name !== "string" || opts.name === "") {
      throw new InvalidArgumentError("name: the database's name", { code: "invalid_argument" });
    }
    const body: WireBody<"CreateDatabaseRequest"> = { name: opts.name };
    if (opts.version !== undefined) body.version = opts.version;
    if (opts.sizeGb !== undefined) body.size_gb = opts.sizeGb;
    if (opts.memoryMb !== undefined) body.memory_mb = opts.memoryMb;
    if (opts.idleSeconds !== undefined) body.idle_seconds = opts.idleSeconds;
    const w = await this.http.request<Record<string, unknown>>({
      method: "POST",
      path: "/v1/databases",
      json: body,
      idempotencyKey: opts.idempotencyKey ?? (await this.newIdempotencyKey()),
      retry: "safe",
      timeoutMs: opts.timeoutMs ?? Math.max(this.http.timeoutMs, DATABASE_CREATE_TIMEOUT_MS),
      ...(opts.signal ? { signal: opts.signal } : {}),
    });
    return databaseFromWire(w ?? {});
  }

  /** The workspace's databases (by name), fetched page by page as you iterate. */
  list(opts: ListDatabasesOptions = {}): Paginator<DatabaseInfo> {
    return this.paginate("/v1/databases", opts, databaseFromWire);
  }

  /** One database, by id or name; throws {@link DatabaseNotFoundError} if there is none. */
  async get(id: string, opts: CallOptions = {}): Promise<DatabaseInfo> {
    const w = await this.http.request<Record<string, unknown>>({ method: "GET", path: databasePath(id), ...call(opts) });
    return databaseFromWire(w ?? {});
  }

  /**
   * The resource use of a database's VM over time (by id or name): `samples`, oldest first,
   * `step` seconds apart, and its VMs one by one in `instances`. `since`: a span (`"90s"`,
   * `"15m"`, `"1h"`), a `Date` or an RFC 3339 string (default 10 minutes back, at most 6 hours);
   * `step`: seconds per point (1 to 86400, default 5). Values the server refuses throw
   * {@link InvalidArgumentError}.
   */
  async metrics(id: string, opts: MetricsOptions = {}): Promise<SandboxMetrics> {
    const w = await this.http.request<Record<string, unknown>>({
      method: "GET",
      path: databasePath(id, "/metrics"),
      query: metricsQuery(opts),
      ...call(opts),
    });
    return metricsFromWire(w ?? {});
  }

  /** Deletes a database: its VM and its data volume (backups stay in the object store); false if it did not exist. */
  async delete(id: string, opts: CallOptions = {}): Promise<boolean> {
    try {
      await this.http.request({
        method: "DELETE",
        path: databasePath(id),
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
   * Branches a database as of now: a new database (`parent` set) on a copy-on-write copy of its
   * data, with the same owner role, its own password and its own VM; resolves once ready.
   * With `fromTime`, the branch has the data as of that time instead (point-in-time, from the
   * database's base backups and archived WAL); a time outside the restore window throws
   * {@link InvalidArgumentError} (422) whose message names the window.
   */
  async branch(id: string, opts: BranchDatabaseOptions = {}): Promise<DatabaseInfo> {
    const body: WireBody<"CreateBranchRequest"> = {};
    if (opts.name !== undefined) body.name = opts.name;
    if (opts.fromTime !== undefined) body.from_time = rfc3339("fromTime", opts.fromTime);
    if (opts.idleSeconds !== undefined) body.idle_seconds = opts.idleSeconds;
    const w = await this.http.request<Record<string, unknown>>({
      method: "POST",
      path: databasePath(id, "/branches"),
      json: body,
      idempotencyKey: opts.idempotencyKey ?? (await this.newIdempotencyKey()),
      retry: "safe",
      timeoutMs: opts.timeoutMs ?? Math.max(this.http.timeoutMs, DATABASE_CREATE_TIMEOUT_MS),
      ...(opts.signal ? { signal: opts.signal } : {}),
    });
    return databaseFromWire(w ?? {});
  }

  /**
   * Restores a database in place to its data as of `toTime` (a `Date`, or an RFC 3339 string)
   * and resolves with it ready: the same id, password and connection strings, on a new
   * timeline (open connections to the old data are closed). The restore window runs from the
   * oldest base backup kept to now; a time outside it throws {@link InvalidArgumentError}
   * (422, `invalid_argument`) whose message names the window.
   */
  async restore(id: string, toTime: Date | string, opts: RestoreDatabaseOptions = {}): Promise<DatabaseInfo> {
    const body: WireBody<"RestoreDatabaseRequest"> = { to_time: rfc3339("toTime", toTime) };
    const w = await this.http.request<Record<string, unknown>>({
      method: "POST",
      path: databasePath(id, "/restore"),
      json: body,
      idempotencyKey: opts.idempotencyKey ?? (await this.newIdempotencyKey()),
      retry: "safe",
      timeoutMs: opts.timeoutMs ?? Math.max(this.http.timeoutMs, DATABASE_CREATE_TIMEOUT_MS),
      ...(opts.signal ? { signal: opts.signal } : {}),
    });
    return databaseFromWire(w ?? {});
  }

  /**
   * Gives the owner role a new password; resolves with the database and its new connection
   * strings. The old password stops working at once (open sessions stay).
   */
  async rotatePassword(id: string, opts: CallOptions = {}): Promise<DatabaseInfo> {
    const w = await this.http.request<Record<string, unknown>>({
      method: "POST",
      path: databasePath(id, "/password"),
      timeoutMs: opts.timeoutMs ?? Math.max(this.http.timeoutMs, LONG_OPERATION_TIMEOUT_MS),
      ...(opts.signal ? { signal: opts.signal } : {}),
    });
    return databaseFromWire(w ?? {});
  }

  /**
   * Runs one SQL statement over HTTP as the database's owner role (waking the database first if
   * it hibernated). `params` fill `$1`, `$2`, …: strings, numbers, booleans and `null`; arrays
   * and objects are sent as JSON text (right for `json`, `jsonb` and pgvector's `vector`; a
   * PostgreSQL array takes its literal, `"{1,2,3}"`), `Date`s as ISO text, bigints as text.
   * At most 10 000 rows and 10 MiB come back (more: {@link InvalidArgumentError}, 413).
   *
   * An error of PostgreSQL's throws {@link QueryError} (its `sqlstate`, `"42601"` for a syntax
   * error, …).
   */
  async query(id: string, sql: string, params: readonly unknown[] = [], opts: QueryOptions = {}): Promise<QueryResult> {
    if (typeof sql !== "string" || sql.trim() === "") {
      throw new InvalidArgumentError("sql: a non-empty SQL statement", { code: "invalid_argument" });
    }
    if (!Array.isArray(params)) {
      throw new InvalidArgumentError("params: an array of values for $1, $2, …", { code: "invalid_argument" });
    }
    const body: WireBody<"QueryRequest"> = { sql };
    if (params.length > 0) body.params = params.map(queryParam);
    if (opts.statementTimeoutMs !== undefined) body.timeout_ms = opts.statementTimeoutMs;
    const statement = opts.statementTimeoutMs ?? SERVER_DEFAULT_QUERY_TIMEOUT_MS;
    const w = await this.http.request<Record<string, unknown>>({
      method: "POST",
      path: databasePath(id, "/query"),
      json: body,
      timeoutMs: opts.timeoutMs ?? Math.max(this.http.timeoutMs, statement + QUERY_HTTP_MARGIN_MS),
      ...(opts.signal ? { signal: opts.signal } : {}),
    });
    return queryResultFromWire(w ?? {});
  }

  /** The extensions a database can load with `CREATE EXTENSION`, per PostgreSQL version. */
  async extensions(opts: CallOptions = {}): Promise<DatabaseExtensions> {
    const w = await this.http.request<Record<string, unknown>>({
      method: "GET",
      path: "/v1/databases/extensions",
      ...call(opts),
    });
    return databaseExtensionsFromWire(w ?? {});
  }

  /**
   * Takes a base backup of a database to the object store (where {@link restore} and a
   * point-in-time {@link branch} start): a copy of its data volume between `pg_backup_start`
   * and `pg_backup_stop` (its file system frozen for the instant of the copy), uploaded in the
   * background. Resolves with
   * the backup `uploading`; with `wait: true`, once it is `done` (see {@link waitBackup}).
   */
  async backup(id: string, opts: BackupOptions = {}): Promise<VolumeBackupInfo> {
    const w = await this.http.request<Record<string, unknown>>({
      method: "POST",
      path: databasePath(id, "/backups"),
      timeoutMs: opts.timeoutMs ?? Math.max(this.http.timeoutMs, LONG_OPERATION_TIMEOUT_MS),
      ...(opts.signal ? { signal: opts.signal } : {}),
    });
    const started = volumeBackupFromWire(w ?? {});
    if (!opts.wait) return started;
    return this.waitBackup(id, started.id, opts);
  }

  /** The database's backups, oldest first. */
  backups(id: string, opts: CallOptions = {}): Paginator<VolumeBackupInfo> {
    return this.paginate(databasePath(id, "/backups"), opts, volumeBackupFromWire);
  }

  /**
   * Polls a backup until its upload has ended and resolves with it `done`. A backup that ends
   * `failed` throws {@link VolumeBackupError}; one still uploading after `timeoutSeconds`
   * (default 3600) {@link VolumeBackupTimeoutError} (the upload goes on).
   */
  async waitBackup(id: string, backupId: string, opts: WaitBackupOptions = {}): Promise<VolumeBackupInfo> {
    const timeoutSeconds = opts.timeoutSeconds ?? DEFAULT_BACKUP_TIMEOUT_SECONDS;
    const deadline = Date.now() + timeoutSeconds * 1000;
    const poll = opts.pollMs ?? DEFAULT_BACKUP_POLL_MS;
    const callOpts: CallOptions = {};
    if (opts.timeoutMs !== undefined) callOpts.timeoutMs = opts.timeoutMs;
    if (opts.signal !== undefined) callOpts.signal = opts.signal;
    for (;;) {
      const b = (await this.backups(id, callOpts).toArray()).find((x) => x.id === backupId);
      if (!b) throw new NotFoundError(`database ${id} has no backup ${backupId}`, { code: "not_found", status: 404 });
      if (b.state === "failed") {
        throw new VolumeBackupError(`backup ${b.id} of database ${id} failed: ${b.error ?? "no reason given"}`, b);
      }
      if (b.state !== "uploading") return b;
      if (Date.now() >= deadline) {
        throw new VolumeBackupTimeoutError(
          `backup ${b.id} of database ${id} still uploading after timeoutSeconds=${timeoutSeconds}; the upload goes on on the server (databases.backups shows its state)`,
          b,
        );
      }
      await sleep(Math.max(0, Math.min(poll, deadline - Date.now())), opts.signal);
    }
  }

  private paginate<T>(path: string, opts: ListDatabasesOptions, map: (w: Record<string, unknown>) => T): Paginator<T> {
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

/** One query parameter as the wire takes it (the server sends each to PostgreSQL as text). @internal */
export function queryParam(v: unknown, i: number): string | number | boolean | null {
  if (v === null || v === undefined) return null;
  switch (typeof v) {
    case "string":
    case "boolean":
      return v;
    case "number":
      return Number.isFinite(v) ? v : Number.isNaN(v) ? "NaN" : v > 0 ? "Infinity" : "-Infinity";
    case "bigint":
      return v.toString();
    case "object":
      if (v instanceof Date) return v.toISOString();
      if (v instanceof Uint8Array) return `\\x${Array.from(v, (b) => b.toString(16).padStart(2, "0")).join("")}`;
      return JSON.stringify(v);
    default:
      throw new InvalidArgumentError(`params[${i}]: a string, number, boolean, null, bigint, Date, array or object, got ${typeof v}`, {
        code: "invalid_argument",
      });
  }
}

/** A time as the wire takes it (RFC 3339): a `Date` by `toISOString()` (UTC), a string as it is (the server checks it). @internal */
export function rfc3339(field: string, t: Date | string): string {
  if (t instanceof Date) {
    if (Number.isNaN(t.getTime())) {
      throw new InvalidArgumentError(`${field}: an invalid Date`, { code: "invalid_argument" });
    }
    return t.toISOString();
  }
  if (typeof t === "string" && t !== "") return t;
  throw new InvalidArgumentError(`${field}: a Date or an RFC 3339 string, got ${JSON.stringify(t)}`, { code: "invalid_argument" });
}

function databasePath(id: string, rest = ""): string {
  if (typeof id !== "string" || id === "") {
    throw new InvalidArgumentError(`expected a database id or name, got ${JSON.stringify(id)}`, { code: "invalid_argument" });
  }
  return `/v1/databases/${encodeURIComponent(id)}${rest}`;
}

function call(opts: CallOptions): { timeoutMs?: number; signal?: AbortSignal } {
  const o: { timeoutMs?: number; signal?: AbortSignal } = {};
  if (opts.timeoutMs !== undefined) o.timeoutMs = opts.timeoutMs;
  if (opts.signal !== undefined) o.signal = opts.signal;
  return o;
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const reason = () => signal?.reason ?? new DOMException("This operation was aborted", "AbortError");
    if (signal?.aborted) return reject(reason());
    const onAbort = () => {
      clearTimeout(t);
      reject(reason());
    };
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
