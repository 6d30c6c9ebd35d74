/**
 * Public data types (camelCase) and their conversion from the snake_case wire objects of
 * `/v1`. Conversion is lenient: unknown fields are ignored and missing ones get neutral values,
 * so a newer server does not break an older SDK.
 *
 * Types whose wire shape is already the public one (the state enums, a few single-word objects)
 * are the contract's schemas (`generated/openapi.ts`, from `crates/pandastack-api/openapi.json`);
 * the camelCase ones are written here and checked against their schemas at compile time
 * (`wire.ts`), and their converters read only fields the schemas have.
 */
import type { components } from "./generated/openapi.js";
import type { WireOf } from "./wire.js";

type Schemas = components["schemas"];

/** Sandbox lifecycle states. */
export type SandboxState = Schemas["SandboxState"];

/** What happens when a sandbox's TTL or idle timeout expires. */
export type OnTimeout = Schemas["OnTimeout"];
/** What becomes of a running sandbox if its host is lost: `lost` or `restore`. */
export type OnHostLoss = Schemas["OnHostLoss"];
/** Whether a volume can be used: `ready` or `unavailable` (its host is dead). */
export type VolumeState = Schemas["VolumeState"];

/** A sandbox as the server describes it. */
export interface SandboxInfo {
  id: string;
  template: string;
  state: SandboxState;
  cpu: number;
  memoryMb: number;
  /** Disk rate limit its VM runs with, MiB/s (root disk and volumes, reads and writes together; 0: unlimited). */
  diskMbps: number;
  /** Disk I/O operations per second its VM runs with (0: unlimited). */
  diskIops: number;
  metadata: Record<string, string>;
  /** RFC 3339. */
  createdAt: string;
  /** RFC 3339, or null when the sandbox has no TTL. */
  expiresAt: string | null;
  ttlSeconds: number | null;
  idleTimeoutSeconds: number | null;
  onTimeout: OnTimeout;
  /** What becomes of it if its host is lost. */
  onHostLoss: OnHostLoss;
  /** Milliseconds from request to exec-ready. */
  bootMs: number;
  /** `restore` (from a baked template or a snapshot) or `cold`. */
  bootMode: string;
  /** The snapshot this sandbox was created or forked from. */
  snapshotId: string | null;
  host: string;
  /** Volumes mounted in it (from its create). */
  volumes: VolumeMount[];
}

/**
 * A volume mounted in a sandbox: pass these as `volumes` of {@link Sandboxes.create}
 * ({@link SandboxInfo.volumes} lists them). `readOnly` mounts a copy of the volume as of the
 * create (any number of sandboxes may); otherwise the volume itself is mounted read-write, by
 * one sandbox at a time.
 */
export interface VolumeMount {
  /** Volume name. */
  name: string;
  /** Absolute mount point inside the sandbox (created if missing). */
  path: string;
  /** Default `false`. */
  readOnly?: boolean;
}

/** A sandbox that has a volume mounted (`readOnly`: a copy of it as of the sandbox's create). */
export interface VolumeAttachment {
  sandboxId: string;
  path: string;
  readOnly: boolean;
}

/** A durable volume: an ext4 disk that outlives the sandboxes that mount it. */
export interface VolumeInfo {
  id: string;
  name: string;
  /**
   * `ready`, or `unavailable` while its host is dead (a cluster's host lost): make a new volume
   * from one of its backups, or wait for the host.
   */
  state: VolumeState;
  sizeGb: number;
  /** The sandbox that has it mounted read-write (at most one). */
  attachedTo: string | null;
  /** Every sandbox that has it (or a read-only copy of it) mounted. */
  attachments: VolumeAttachment[];
  /** The volume snapshot or backup it was restored from. */
  source: string | null;
  /** The host its file is on. */
  host: string;
  /** RFC 3339. */
  createdAt: string;
}

/** A volume's content as of one instant; restore it with `volumes.create({ name, fromSnapshot: id })`. */
export interface VolumeSnapshotInfo {
  id: string;
  /** The volume's name. */
  volume: string;
  sizeGb: number;
  /** A sandbox's file system on the volume was frozen for the copy. */
  frozen: boolean;
  createdAt: string;
}

/** Where a volume backup is: `uploading`, `done` (restorable anywhere) or `failed`. */
export type BackupState = Schemas["BackupState"];

/** A volume backup in the object store; restore it with `volumes.create({ name, fromBackup: id })` once `done`. */
export interface VolumeBackupInfo {
  id: string;
  /** The volume's name. */
  volume: string;
  sizeGb: number;
  state: BackupState;
  /** Bytes this backup sent (chunks earlier backups had stored are not sent again). */
  bytesUploaded: number | null;
  /** Chunks of the volume with data. */
  chunks: number | null;
  /** Why it failed. */
  error: string | null;
  createdAt: string;
  finishedAt: string | null;
}

/** Where a database is in its life. */
export type DatabaseState = Schemas["DatabaseState"];

/**
 * A managed PostgreSQL database: its own microVM, its data on a durable volume.
 *
 * `connectionUri` (`postgres://user:password@<id>.<domain>:<port>/<name>?sslmode=require`) is
 * what any PostgreSQL driver connects with, through the server's TLS front; `pooledUri` the
 * same through PgBouncer (transaction pooling). On the server's own machine the default domain
 * `db.localhost` does not resolve: connect to 127.0.0.1 and keep `<id>.db.localhost` as the TLS
 * server name (node-postgres: `ssl: { servername }`).
 */
export interface DatabaseInfo {
  id: string;
  /** The database's name, also its owner role's. */
  name: string;
  /** PostgreSQL major version. */
  version: number;
  /** `hibernated`: idle for `idleSeconds`, the next connection or query wakes it; `stopped`: its VM is gone, the next one starts a new VM on the same data. */
  state: DatabaseState;
  /** Owner role (also in the URIs). */
  user: string;
  connectionUri: string;
  /** The same through PgBouncer: `<id>-pooler.<domain>`. */
  pooledUri: string;
  /** Base of the HTTP query endpoints (`POST {httpUrl}/sql`, Neon-compatible). */
  httpUrl: string;
  sizeGb: number;
  /** Memory of its VM, MiB. */
  memoryMb: number;
  /** Idle seconds before it hibernates (`0`: never). */
  idleSeconds: number;
  /** The database this one was branched from. */
  parent: string | null;
  /** The sandbox (VM) serving it now, if any. */
  sandboxId: string | null;
  /** The durable volume holding its data. */
  volume: string;
  host: string;
  /** RFC 3339. */
  createdAt: string;
}

/** A result column: its name and its type's OID (`pg_type.oid`: 23 `int4`, 25 `text`, …). */
export interface QueryField {
  name: string;
  dataTypeId: number;
}

/**
 * What {@link Databases.query} resolves with. `rows` are arrays in field order, values
 * converted to JSON by the server: booleans, small integers and floats as numbers, `json`/`jsonb`
 * as JSON, arrays as arrays, everything else (`int8` and `numeric` included, to keep their
 * precision) as PostgreSQL's text; NULL is `null`.
 */
export interface QueryResult {
  /** The command tag's verb: `SELECT`, `INSERT`, … */
  command: string;
  /** Rows returned or touched (`null` for commands without a count). */
  rowCount: number | null;
  fields: QueryField[];
  rows: unknown[][];
}

/** An extension `CREATE EXTENSION` can load. */
export interface DatabaseExtension {
  name: string;
  defaultVersion: string;
}

/** The extensions databases can load, per PostgreSQL major version (`"17"`). */
export interface DatabaseExtensions {
  versions: Record<string, DatabaseExtension[]>;
  /** Libraries loaded at start (`shared_preload_libraries`). */
  preloaded: string[];
}

/**
 * Where a deploy is: `queued → cloning → building → baking → checking → live`, or `failed` at
 * any step. A live deploy a newer one replaced is `standby` (hibernated, ready for a rollback);
 * `superseded` is a queued deploy a newer one replaced before it ran.
 */
export type DeployState = Schemas["DeployState"];

/**
 * Where an app's code comes from: `url` is a repository the server fetches over the network
 * (`https://…`, `http://…`, `git://…`, `ssh://…` or `user@host:path`; never a path or `file://`
 * on the server, nor a loopback or private address unless its operator allows it); `ref` the
 * branch, tag or commit to deploy (default `main`), whose pushes deploy (through the app's
 * webhook).
 */
export type AppGit = Schemas["AppGit"];

/** How to build an app, overriding what detection chose (unset: detected). */
export interface AppBuild {
  /** Shell command run in the app's directory after the install. */
  command?: string | null;
  /** Directory of a static build's output, served as files. */
  outputDir?: string | null;
}

/** How to start an app, overriding what detection chose (unset: detected). */
export type AppStart = Schemas["AppStart"];

/**
 * Where a custom domain's TLS certificate comes from, or why it has none: `none` (the proxy
 * serves no TLS, or nothing covers the name), `files` (a certificate from the operator's
 * directory), `pending` (an ACME order is under way), `issued` (by ACME) or `failed` (the last
 * ACME order failed: `tlsError` says why).
 */
export type DomainTls = Schemas["DomainTls"];

/** A custom domain of an app ({@link AppInfo.domains}). */
export interface AppDomain {
  /** The host name (its DNS pointed at the server's proxy). */
  name: string;
  /** Where its TLS certificate comes from. */
  tls: DomainTls;
  /** End of the certificate's validity (RFC 3339), when known. */
  tlsExpiresAt: string | null;
  /** Why the last ACME order failed (`tls: "failed"`). */
  tlsError: string | null;
}

/**
 * An app deployed from git (or from uploaded directories): built in a VM, health-checked and
 * served at `url` (`<name>.<domain>`) by the server's proxy.
 */
export interface AppInfo {
  id: string;
  /** Also its host name. */
  name: string;
  /** Where the app answers. */
  url: string;
  git: AppGit;
  /** Environment of the build and of the running app. */
  env: Record<string, string>;
  /** Names of its secrets (their values are never shown). */
  secretNames: string[];
  build: AppBuild;
  start: AppStart;
  /** Memory of its VM, MiB. */
  memoryMb: number;
  /** `0`: hibernates after `idleSeconds` without requests (the next one wakes it); `1`: always running. */
  minInstances: number;
  idleSeconds: number;
  /** The subdirectory of the repository that is the app (`null`: the whole repository). */
  rootDir: string | null;
  /** The path the health check asks for. */
  healthPath: string;
  /** Signs webhook deliveries of git hosts (`X-Hub-Signature-256`: HMAC-SHA256 of the body). */
  webhookSecret: string;
  /**
   * The public half of the app's own SSH deploy key (one OpenSSH `authorized_keys` line,
   * `ssh-ed25519 … pandastack-app-<name>`): add this as a read-only deploy key on the
   * repository to deploy from an `ssh://` or `git@host:path` URL. The private half never
   * leaves the server; `client.apps.rotateDeployKey(name)` replaces the pair.
   */
  deployKey: string;
  /**
   * Its custom domains: extra host names it answers at besides `<name>.<domain>`, each with
   * where its TLS certificate comes from.
   */
  domains: AppDomain[];
  /** The deploy serving traffic (`null` until one passes its health check). */
  liveDeploy: string | null;
  /** The state of the live deploy's VM (`running`, `hibernated`, …), if there is one. */
  instanceState: SandboxState | null;
  /** RFC 3339. */
  createdAt: string;
  updatedAt: string;
}

/** One deploy of an app. */
export interface DeployInfo {
  id: string;
  /** The app's name. */
  app: string;
  /** 1, 2, 3… per app. */
  number: number;
  /** The branch, tag or commit deployed (`upload` for an uploaded directory). */
  ref: string;
  /** The commit built (once cloned). */
  commit: string | null;
  state: DeployState;
  /** Why it failed. */
  error: string | null;
  /** What detection decided (framework, package manager, commands, port). */
  plan: Record<string, unknown> | null;
  /** Milliseconds spent in each phase (`clone`, `install`, `build`, `bake`, `check`, `switch`). */
  phasesMs: Record<string, number>;
  /** The VM that built and serves this version. */
  sandboxId: string | null;
  /** RFC 3339. */
  createdAt: string;
  updatedAt: string;
}

/** The language of a function's handler. */
export type FunctionRuntime = Schemas["FunctionRuntime"];

/**
 * A function: a handler in Python or Node.js, built with its dependencies in a VM, baked with
 * the handler imported (a VM snapshot), and called with `client.functions.invoke`.
 */
export interface FunctionInfo {
  id: string;
  name: string;
  runtime: FunctionRuntime;
  /**
   * `module.function`: `main.handler` is `handler` in `main.py`; Node.js: `index.handler` is the
   * export `handler` of `index.js` or `index.mjs`.
   */
  handler: string;
  /** Its public endpoint, `fn-<name>.<domain>` (answers only when `public`). */
  url: string;
  public: boolean;
  /** Environment of its builds and calls. */
  env: Record<string, string>;
  /** Names of its secrets (their values are never shown). */
  secretNames: string[];
  /** Memory of an instance, MiB. */
  memoryMb: number;
  /** Per-call time limit: a call past it ends with status `timeout`. */
  timeoutSeconds: number;
  /** Calls one instance serves at once. */
  concurrency: number;
  /** Most instances at once. */
  maxInstances: number;
  /** Seconds a warm instance is kept without calls. */
  idleSeconds: number;
  /** The version calls go to (`null` until one is built). */
  liveVersion: number | null;
  /** Instances warm now. */
  warmInstances: number;
  /** RFC 3339. */
  createdAt: string;
  updatedAt: string;
}

/**
 * One version of a function: one build. `state` goes `queued → cloning → building → baking →
 * checking → live`, or `failed` (`error` says why; the live version keeps serving); a live
 * version a newer one replaced is `standby`.
 */
export interface FunctionVersionInfo {
  id: string;
  /** The function's name. */
  function: string;
  /** 1, 2, 3… per function. */
  version: number;
  state: DeployState;
  /** Why the build failed (the handler's import error, a dependency that did not install…). */
  error: string | null;
  handler: string | null;
  /** Milliseconds per phase (`install`, `bake`, `snapshot`…). */
  phasesMs: Record<string, number>;
  /** RFC 3339. */
  createdAt: string;
  updatedAt: string;
}

/** How a call ended: `ok`, `error` (the handler raised), `timeout`; `queued`/`running` while a queued call (`functions.submit`) is under way. */
export type InvocationStatus = Schemas["InvocationStatus"];

/** What a handler raised, as data. */
export type InvocationError = Schemas["InvocationError"];

/**
 * The outcome of a call: `status` `ok` (`result` is the handler's return value, any JSON),
 * `error` (the handler raised: `error`) or `timeout`. A handler's error is data, not a thrown
 * error of the SDK.
 */
export interface Invocation {
  /** Set for queued calls (`functions.submit`). */
  id: string | null;
  /** The function's name. */
  function: string;
  status: InvocationStatus;
  /** The handler's return value (JSON). */
  result: unknown;
  error: InvocationError | null;
  /** What the call printed (each at most 64 KiB, the end kept). */
  stdout: string;
  stderr: string;
  /** The version that ran it. */
  version: number | null;
  /** Time in the handler. */
  durationMs: number | null;
  /** The call needed a new instance (restored from the baked snapshot). */
  cold: boolean;
  /** Queued calls: tries made so far. */
  attempts: number;
  /** RFC 3339 (queued calls). */
  createdAt: string | null;
  finishedAt: string | null;
}

/**
 * A schedule target: `command` runs with `/bin/sh -c` in a new sandbox of `template` (deleted
 * when it ends), with `env` and the schedule's payload in `$PANDASTACK_PAYLOAD` (JSON); killed
 * after `timeoutSeconds`.
 */
export interface SandboxExecTarget {
  template: string;
  command: string;
  env: Record<string, string>;
  timeoutSeconds: number;
}

/** A schedule target: a call of function `name` of the workspace, the schedule's payload as the event. */
export type FunctionTarget = Schemas["FunctionTarget"];

/** What a schedule runs, by its `type`. */
export type ScheduleTarget = ({ type: "sandbox_exec" } & SandboxExecTarget) | ({ type: "function" } & FunctionTarget);

/** What a due time does while a previous run is under way: run alongside, skip, or cancel the old one. */
export type ConcurrencyPolicy = Schemas["ConcurrencyPolicy"];

/** Where a schedule run stands. */
export type RunState = Schemas["RunState"];

/** How a run came about: a due time (`scheduled`) or `schedules.run` (`manual`). */
export type RunTrigger = Schemas["RunTrigger"];

/**
 * A schedule: `cron` read in `timezone` runs `target` at each due time, each due time once.
 */
export interface ScheduleInfo {
  id: string;
  name: string;
  cron: string;
  /** IANA time zone the expression is read in. */
  timezone: string;
  /** What runs (`null` for a kind of target this SDK does not know). */
  target: ScheduleTarget | null;
  /** The JSON each run gets. */
  payload: unknown;
  concurrencyPolicy: ConcurrencyPolicy;
  /** A due time found this late (the server was down) is recorded `missed`. */
  startingDeadlineSeconds: number | null;
  /** Further attempts after a failed run. */
  retries: number;
  paused: boolean;
  /** The next due time (RFC 3339, UTC); `null` while paused. */
  nextRunAt: string | null;
  /** RFC 3339. */
  createdAt: string;
  updatedAt: string;
}

/** One run of a schedule. */
export interface ScheduleRunInfo {
  id: string;
  /** The schedule's name. */
  schedule: string;
  /** The due time it is for (RFC 3339, UTC); for a manual run, when it was asked for. */
  dueAt: string;
  trigger: RunTrigger;
  state: RunState;
  /** Attempts so far (retries count). */
  attempt: number;
  /** The sandbox of its latest attempt (deleted when the attempt ends). */
  sandboxId: string | null;
  startedAt: string | null;
  endedAt: string | null;
  exitCode: number | null;
  /** Stdout then stderr of the command (at most 64 KiB, from the start). */
  output: string | null;
  error: string | null;
  /** When the run was recorded. */
  createdAt: string;
}

/** Whether a host takes work: `ready`, `draining` (keeps what it runs, takes nothing new) or `dead` (its lease lapsed). */
export type HostState = Schemas["HostState"];

/** Where a webhook delivery stands: `pending`, `delivered` or `failed` (its retries used up). */
export type DeliveryState = Schemas["DeliveryState"];

/**
 * The resource an {@link EventInfo} is about: `kind` (`sandbox`, `snapshot`, `template`, `app`,
 * `database`, `function` or `schedule`) and `id` (a sandbox's `sb-…`; for resources addressed by
 * name, their name).
 */
export interface EventResource {
  kind: string;
  id: string;
}

/**
 * One lifecycle event of the workspace (`client.events`). Named `EventInfo` to keep clear of the
 * DOM's global `Event`.
 */
export interface EventInfo {
  /** Grows with time across the server: pass the last one seen as `cursor` / `after` to resume. */
  id: string;
  /** e.g. `sandbox.created`, `deploy.live`, `schedule.failed` (the server's docs/events.md lists them). */
  type: string;
  resource: EventResource;
  /** When it happened (RFC 3339). */
  at: string;
  /** A small payload, by type (a deploy's `phase`, a failure's `error`, …). */
  data: Record<string, unknown>;
}

/** A webhook endpoint (`client.webhooks`). */
export interface Webhook {
  /** `wh_…` */
  id: string;
  url: string;
  /** Patterns of the event types it gets: exact types, `<kind>.*` or `*`. */
  events: string[];
  createdAt: string;
  /** The signing secret (`whsec_…`): only on what `webhooks.create` returns; `null` elsewhere. */
  secret: string | null;
}

/** One event's delivery to one webhook. */
export interface WebhookDelivery {
  /** `whd_…` */
  id: string;
  webhookId: string;
  /** The event's id, also the `webhook-id` header of every attempt. */
  eventId: string;
  eventType: string;
  state: DeliveryState;
  /** Attempts made so far. */
  attempts: number;
  createdAt: string;
  deliveredAt: string | null;
  lastAttemptAt: string | null;
  /** Why the last attempt failed. */
  lastError: string | null;
  /** The HTTP status of the last attempt, if it got an answer. */
  lastStatus: number | null;
  /** When the next attempt is due (pending deliveries). */
  nextAttemptAt: string | null;
}

/** An API key of the workspace as listed (never with its secret). */
export interface Key {
  id: string;
  name: string;
  /** First characters of the secret, to tell keys apart. */
  prefix: string;
  createdAt: string;
  revoked: boolean;
  /** An operator's key (made on the server with `pandastack keys create --admin`). */
  admin: boolean;
  /** What it may do: `*` or `<kind>:<action>` (actions `read`, `write`, `exec`; `*` for either part). */
  scopes: string[];
  /** When it stops working (RFC 3339), if ever. */
  expiresAt: string | null;
  /** When it was last used (to within a minute), if ever. */
  lastUsedAt: string | null;
  /** The member it belongs to (`null`: a workspace key, limited by its scopes only). */
  memberId: string | null;
  /** That member's role (`null` for a workspace key). */
  role: Role | null;
}

/**
 * What a workspace member may do: `owner` (everything, including managing owners), `admin`
 * (everything but touching an owner), `developer` (use resources; not members nor the audit
 * log) or `viewer` (read only).
 */
export type Role = Schemas["Role"];

/** A member of the workspace (`client.members`); their keys can do no more than `role` allows. */
export interface Member {
  /** `mem-…` */
  id: string;
  name: string;
  /** Unique in the workspace (compared case-insensitively). */
  email: string;
  role: Role;
  /** RFC 3339. */
  createdAt: string;
  /** How many of its keys are not revoked. */
  activeKeys: number;
}

/** One audited call (`client.audit`): who made it, the operation, the resource and the result. */
export interface AuditEntry {
  id: string;
  /** When (RFC 3339). */
  at: string;
  /** The key that made the call, and its name. */
  keyId: string;
  keyName: string;
  /** The member the key belongs to, if any. */
  memberId: string | null;
  /** The operation, as in the OpenAPI document (`create_sandbox`, `create_member`, …). */
  action: string;
  /** The HTTP method and the route template (`/v1/sandboxes/{id}`). */
  method: string;
  route: string;
  /** `<kind>` or `<kind>/<id or name>` (`members/mem-…`). */
  resource: string;
  /** `ok`, or the error code of a refused or failed call. */
  result: string;
  /** The HTTP status answered. */
  status: number;
  /** The caller's address. */
  source: string;
  /** The server's `X-Request-Id` of the call. */
  requestId: string;
}

/** A key just created: `secret` is shown this once. */
export interface CreatedKey extends Key {
  secret: string;
}

/**
 * What a host offers, as its agent last reported it (all 0 until then; the single-node
 * server's in-process host reports none).
 */
export interface HostCapacity {
  vcpus: number;
  memoryMib: number;
  diskBytes: number;
  /** How many more sandboxes it can start now. */
  freeSlots: number;
  /** How many creates (and restores, forks) its agent has under way. */
  createsInFlight: number;
  /** How many sandboxes it can run in all (its network slots); 0: not limited by slots. */
  slots: number;
}

/** A host: a machine that runs sandboxes (`client.hosts`, admin keys only). */
export interface HostInfo {
  /** `host-…`. */
  id: string;
  /** The machine's hostname, for people. */
  name: string;
  /** Where replicas reach its agent; null for the single-node server's in-process host. */
  address: string | null;
  state: HostState;
  /** Bumped by every join and every reap: an opaque, increasing number. */
  epoch: number;
  capacity: HostCapacity;
  /** The QEMU, guest kernel and CPU features a snapshot needs to be restored on it; null until its agent reports one. */
  compatKey: string | null;
  /** The templates it holds (sorted), as its agent last reported them. */
  templates: string[];
  /** Sandboxes on it (every state, every workspace). */
  sandboxes: number;
  /** RFC 3339. */
  createdAt: string;
  /** When it last joined (an agent's host) or started (the single-node server's host), RFC 3339. */
  lastSeenAt: string;
  /** When its lease runs out unless renewed (RFC 3339); null when it holds none. */
  leaseExpiresAt: string | null;
}

/** The outcome of a command. A non-zero `exitCode` is data, not an error (see `check`). */
export interface ExecResult {
  stdout: string;
  stderr: string;
  exitCode: number;
  timedOut: boolean;
  /** Output was cut at the server's limit (4 MiB per stream). */
  truncated: boolean;
  durationMs: number;
}

/** An event of {@link Sandbox.execStream}. */
export type ExecEvent =
  | { type: "stdout"; data: string }
  | { type: "stderr"; data: string }
  | { type: "exit"; exitCode: number; timedOut: boolean; truncated: boolean; durationMs: number };

/**
 * One rich result of {@link Sandbox.runCode}: the value of the code's final expression, a
 * `display(…)` call or a matplotlib figure. `text` (the `repr`) is always there; the other
 * representations when the object provides them (`_repr_html_`, `_repr_png_`, …).
 */
export class Result {
  /** The plain-text representation. */
  readonly text: string;
  readonly html?: string;
  /** A PNG image, base64 (see {@link pngBytes}). */
  readonly png?: string;
  readonly svg?: string;
  readonly markdown?: string;
  /** A JSON value (already parsed). */
  readonly json?: unknown;

  /** @internal */
  constructor(w: WireOf<"CodeOutput">) {
    this.text = str(w.text);
    if (typeof w.html === "string") this.html = w.html;
    if (typeof w.png === "string") this.png = w.png;
    if (typeof w.svg === "string") this.svg = w.svg;
    if (typeof w.markdown === "string") this.markdown = w.markdown;
    if (w.json !== undefined && w.json !== null) this.json = w.json;
  }

  /** The PNG image as bytes, or `undefined` when the result has none. */
  pngBytes(): Uint8Array | undefined {
    if (this.png === undefined) return undefined;
    const bin = atob(this.png);
    const out = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out;
  }
}

/**
 * The exception a {@link Sandbox.runCode} run ended with: data, not a thrown error. `name` is
 * the exception class (`ZeroDivisionError`; `TimeoutError` when the run hit its
 * `timeoutSeconds`; `KernelError` when the kernel itself failed).
 */
export type ExecutionError = Schemas["CodeError"];

/**
 * What a {@link Sandbox.runCode} run produced. An exception in the code is data (`error`), not
 * a thrown error.
 */
export class Execution {
  stdout: string;
  stderr: string;
  /** Rich results in order (the final expression's value last). */
  results: Result[];
  error: ExecutionError | null;
  /** Output was cut at the server's limit. */
  truncated: boolean;
  durationMs: number;

  /** @internal */
  constructor(fields: {
    stdout: string;
    stderr: string;
    results: Result[];
    error: ExecutionError | null;
    truncated: boolean;
    durationMs: number;
  }) {
    this.stdout = fields.stdout;
    this.stderr = fields.stderr;
    this.results = fields.results;
    this.error = fields.error;
    this.truncated = fields.truncated;
    this.durationMs = fields.durationMs;
  }

  /** The `text` of the last result, or `undefined` when there is none. */
  get text(): string | undefined {
    return this.results.at(-1)?.text;
  }
}

/** A code context: a kernel of its own, with its own variables (see {@link Sandbox.createCodeContext}). */
export type CodeContext = Schemas["CodeContext"];

/** A snapshot of a sandbox (memory and disk); create sandboxes from it with `snapshotId`. */
export interface SnapshotInfo {
  id: string;
  sandboxId: string;
  template: string;
  createdAt: string;
  sizeBytes: number;
  /** In a cluster, when its files became durable in the object store (RFC 3339); `null` until then, and on a single-node server. */
  durableAt: string | null;
}

/**
 * A template sandboxes are created from: one of the server's catalog (`source: "catalog"`) or
 * one the workspace built with {@link Templates.build} (`source: "spec"` or `"oci"`).
 */
export interface TemplateInfo {
  name: string;
  description: string;
  cpu: number;
  memoryMb: number;
  diskMb: number;
  /**
   * Catalog templates: `ready` once baked, `available` before first use. Built templates: the
   * newest build's state, `queued`, `building`, `baking`, `ready` or `failed`.
   */
  state: string;
  bakeMs: number | null;
  /** `catalog`, `spec` or `oci`. */
  source: string;
  /** Built templates: the newest build's version (1, 2, …). */
  version: number | null;
  /** Built templates: the version new sandboxes get (the newest ready one), if any. */
  readyVersion: number | null;
  /** Why the newest build failed. */
  error: string | null;
  buildMs: number | null;
  /** Size of the built root filesystem image (allocated bytes). */
  imageBytes: number | null;
  /** RFC 3339 (built templates). */
  createdAt: string | null;
}

/** Metadata of a file in a sandbox. */
export interface FileInfo {
  name: string;
  path: string;
  type: "file" | "dir" | "symlink" | "other";
  size: number;
  /** Permission bits (`st_mode & 0o7777`). */
  mode: number;
  mtimeMs: number;
  symlinkTarget: string | null;
}

/**
 * A signed URL for one file of a sandbox (`sandbox.files.url(...)`): anyone holding `url` can
 * do `method` (`GET` downloads, `PUT` uploads) to `path` without an API key until `expiresAt`.
 */
export interface FileUrl {
  /** Absolute (the client's base URL and the server's path). */
  url: string;
  method: "GET" | "PUT";
  path: string;
  /** RFC 3339. */
  expiresAt: string;
}

/**
 * One event of `sandbox.files.watch(...)`. `type`: `ready` (the watch is armed; again after the
 * sandbox woke from a hibernation — changes while it slept are not told), `create`, `modify`,
 * `delete`, `rename` (`from` was renamed to `path`) or `overflow` (changes were dropped under
 * `path`: list it again if that matters). Paths are absolute guest paths; a file written through
 * the API lands by a `rename` of a temporary file.
 */
export interface WatchEvent {
  type: "ready" | "create" | "modify" | "delete" | "rename" | "overflow";
  path: string;
  /** Whether the path is a directory (`false` for `ready` and `overflow`). */
  dir: boolean;
  /** The old path of a `rename`. */
  from?: string;
}

/**
 * One point of a resource's use over time: the readings within `[t, t + step)` of every VM it
 * has (summed over an app's or a function's instances).
 */
export interface MetricPoint {
  /** Start of the step (RFC 3339, like every time of this SDK). */
  t: string;
  /**
   * CPU time the VM processes used in the step, in percent of their vCPUs' time (100: every
   * vCPU busy all the step). QEMU's own threads count too, so it can pass 100 briefly.
   */
  cpuPct: number;
  /** vCPUs of the VMs read. */
  vcpus: number;
  /** Host memory the VM processes hold (RSS), at the step's last reading. */
  memBytes: number;
  /** Their proportional set size: memory shared with other VMs (a template's) divided among them. */
  pssBytes: number;
  /** Memory the guests have (`null`: no guest answered). */
  memTotalBytes: number | null;
  /** Memory the guests say is available to start programs (`null`: no guest answered). */
  memAvailableBytes: number | null;
  /** Bytes used on the guests' root filesystems (`null`: no guest answered). */
  diskBytes: number | null;
  /** Size of the guests' root filesystems (`null`: no guest answered). */
  diskTotalBytes: number | null;
  /** Bytes the guests received over their network within the step (`null`: no NIC). */
  netRx: number | null;
  /** Bytes the guests sent over their network within the step (`null`: no NIC). */
  netTx: number | null;
}

/** One VM's points, for a resource with several (an app's instances, a function's, a database's VM). */
export interface InstanceMetrics {
  sandboxId: string;
  /** The VM's state now. */
  state: string;
  samples: MetricPoint[];
}

/**
 * Resource use over time (`GET /v1/{sandboxes,databases,apps,functions}/{id}/metrics`): what
 * `metrics()` of a sandbox and of `client.databases`, `client.apps` and `client.functions`
 * resolve with. `samples` are points `step` seconds apart, oldest first; for a database, an app
 * or a function they sum its VMs, listed one by one in `instances` (empty for a sandbox). For a
 * sandbox, `state` and `hostRssBytes`, `hostPssBytes`, `cpuTimeMs` are its VM's now (absent
 * while it does not run).
 */
export interface SandboxMetrics {
  state: string;
  hostRssBytes?: number;
  hostPssBytes?: number;
  cpuTimeMs?: number;
  /** Seconds per point. */
  step: number;
  /** Oldest first. */
  samples: MetricPoint[];
  instances: InstanceMetrics[];
  /** Every field as sent, including ones this SDK version does not know. */
  raw: Record<string, unknown>;
}

/** A port's preview URL (`GET /v1/sandboxes/{id}/ports/{port}/url`). While the port is private,
 * send `token` in the `X-PandaStack-Access-Token` header (or open `url + "?pandastack_access=" +
 * token` once in a browser). */
export type PortUrl = Schemas["PortUrl"];

/** `PATCH /v1/sandboxes/{id}/ports/{port}`. */
export type PortUpdate = Schemas["PortUpdate"];

/** Header that carries a sandbox's access token to a private preview URL. */
export const ACCESS_TOKEN_HEADER = "X-PandaStack-Access-Token";

type Wire = Record<string, unknown>;

const str = (v: unknown, d = ""): string => (typeof v === "string" ? v : d);
const num = (v: unknown, d = 0): number => (typeof v === "number" ? v : d);
const optNum = (v: unknown): number | null => (typeof v === "number" ? v : null);
const optStr = (v: unknown): string | null => (typeof v === "string" ? v : null);
const strMap = (v: unknown): Record<string, string> => {
  const out: Record<string, string> = {};
  if (v && typeof v === "object") {
    for (const [k, val] of Object.entries(v as Wire)) if (typeof val === "string") out[k] = val;
  }
  return out;
};

/** @internal */
export function sandboxFromWire(w: WireOf<"Sandbox">): SandboxInfo {
  return {
    id: str(w.id),
    template: str(w.template),
    state: str(w.state, "failed") as SandboxState,
    cpu: num(w.cpu),
    memoryMb: num(w.memory_mb),
    diskMbps: num(w.disk_mbps),
    diskIops: num(w.disk_iops),
    metadata: strMap(w.metadata),
    createdAt: str(w.created_at),
    expiresAt: optStr(w.expires_at),
    ttlSeconds: optNum(w.ttl_seconds),
    idleTimeoutSeconds: optNum(w.idle_timeout_seconds),
    onTimeout: (str(w.on_timeout, "kill") as OnTimeout),
    onHostLoss: (str(w.on_host_loss, "lost") as OnHostLoss),
    bootMs: num(w.boot_ms),
    bootMode: str(w.boot_mode),
    snapshotId: optStr(w.snapshot_id),
    host: str(w.host),
    volumes: objects(w.volumes).map(volumeMountFromWire),
  };
}

const objects = (v: unknown): Wire[] => (Array.isArray(v) ? v.filter((x): x is Wire => !!x && typeof x === "object") : []);

/** @internal */
export function volumeMountFromWire(w: WireOf<"SandboxVolume">): VolumeMount {
  return { name: str(w.name), path: str(w.path), readOnly: w.read_only === true };
}

/** @internal */
export function volumeAttachmentFromWire(w: WireOf<"VolumeAttachment">): VolumeAttachment {
  return { sandboxId: str(w.sandbox_id), path: str(w.path), readOnly: w.read_only === true };
}

/** @internal */
export function volumeFromWire(w: WireOf<"Volume">): VolumeInfo {
  return {
    id: str(w.id),
    name: str(w.name),
    state: (str(w.state, "ready") as VolumeState),
    sizeGb: num(w.size_gb),
    attachedTo: optStr(w.attached_to),
    attachments: objects(w.attachments).map(volumeAttachmentFromWire),
    source: optStr(w.source),
    host: str(w.host),
    createdAt: str(w.created_at),
  };
}

/** @internal */
export function volumeSnapshotFromWire(w: WireOf<"VolumeSnapshot">): VolumeSnapshotInfo {
  return {
    id: str(w.id),
    volume: str(w.volume),
    sizeGb: num(w.size_gb),
    frozen: w.frozen === true,
    createdAt: str(w.created_at),
  };
}

/** @internal */
export function volumeBackupFromWire(w: WireOf<"VolumeBackup">): VolumeBackupInfo {
  return {
    id: str(w.id),
    volume: str(w.volume),
    sizeGb: num(w.size_gb),
    state: str(w.state, "uploading") as BackupState,
    bytesUploaded: optNum(w.bytes_uploaded),
    chunks: optNum(w.chunks),
    error: optStr(w.error),
    createdAt: str(w.created_at),
    finishedAt: optStr(w.finished_at),
  };
}

/** @internal */
export function databaseFromWire(w: WireOf<"Database">): DatabaseInfo {
  return {
    id: str(w.id),
    name: str(w.name),
    version: num(w.version),
    state: str(w.state, "creating") as DatabaseState,
    user: str(w.user),
    connectionUri: str(w.connection_uri),
    pooledUri: str(w.pooled_uri),
    httpUrl: str(w.http_url),
    sizeGb: num(w.size_gb),
    memoryMb: num(w.memory_mb),
    idleSeconds: num(w.idle_seconds),
    parent: optStr(w.parent),
    sandboxId: optStr(w.sandbox_id),
    volume: str(w.volume),
    host: str(w.host),
    createdAt: str(w.created_at),
  };
}

/** @internal */
export function queryFieldFromWire(w: WireOf<"QueryField">): QueryField {
  return { name: str(w.name), dataTypeId: num(w.data_type_id) };
}

/** @internal */
export function queryResultFromWire(w: WireOf<"QueryResponse">): QueryResult {
  return {
    command: str(w.command),
    rowCount: optNum(w.row_count),
    fields: objects(w.fields).map(queryFieldFromWire),
    rows: Array.isArray(w.rows) ? w.rows.filter((r): r is unknown[] => Array.isArray(r)) : [],
  };
}

/** @internal */
export function databaseExtensionFromWire(w: WireOf<"DatabaseExtension">): DatabaseExtension {
  return { name: str(w.name), defaultVersion: str(w.default_version) };
}

/** @internal */
export function databaseExtensionsFromWire(w: WireOf<"DatabaseExtensions">): DatabaseExtensions {
  const versions: Record<string, DatabaseExtension[]> = {};
  if (w.versions && typeof w.versions === "object" && !Array.isArray(w.versions)) {
    for (const [k, v] of Object.entries(w.versions as Wire)) {
      if (Array.isArray(v)) versions[k] = objects(v).map(databaseExtensionFromWire);
    }
  }
  return {
    versions,
    preloaded: Array.isArray(w.preloaded) ? w.preloaded.filter((x): x is string => typeof x === "string") : [],
  };
}

/** @internal */
export function appGitFromWire(w: WireOf<"AppGit">): AppGit {
  return { url: str(w.url), ref: optStr(w.ref) };
}

/** @internal */
export function appBuildFromWire(w: WireOf<"AppBuild">): AppBuild {
  return { command: optStr(w.command), outputDir: optStr(w.output_dir) };
}

/** @internal */
export function appStartFromWire(w: WireOf<"AppStart">): AppStart {
  return { command: optStr(w.command), port: optNum(w.port) };
}

const object = (v: unknown): Wire => (v && typeof v === "object" && !Array.isArray(v) ? (v as Wire) : {});

/** @internal */
export function appDomainFromWire(w: WireOf<"AppDomain">): AppDomain {
  return {
    name: str(w.name),
    tls: str(w.tls, "none") as DomainTls,
    tlsExpiresAt: optStr(w.tls_expires_at),
    tlsError: optStr(w.tls_error),
  };
}

/** @internal */
export function appFromWire(w: WireOf<"App">): AppInfo {
  return {
    id: str(w.id),
    name: str(w.name),
    url: str(w.url),
    git: appGitFromWire(object(w.git)),
    env: strMap(w.env),
    secretNames: Array.isArray(w.secret_names) ? w.secret_names.filter((x): x is string => typeof x === "string") : [],
    build: appBuildFromWire(object(w.build)),
    start: appStartFromWire(object(w.start)),
    memoryMb: num(w.memory_mb),
    minInstances: num(w.min_instances),
    idleSeconds: num(w.idle_seconds),
    rootDir: optStr(w.root_dir),
    healthPath: str(w.health_path, "/"),
    webhookSecret: str(w.webhook_secret),
    deployKey: str(w.deploy_key),
    domains: objects(w.domains).map(appDomainFromWire),
    liveDeploy: optStr(w.live_deploy),
    instanceState: optStr(w.instance_state) as SandboxState | null,
    createdAt: str(w.created_at),
    updatedAt: str(w.updated_at),
  };
}

/** @internal */
export function deployFromWire(w: WireOf<"Deploy">): DeployInfo {
  const phases: Record<string, number> = {};
  for (const [k, v] of Object.entries(object(w.phases_ms))) if (typeof v === "number") phases[k] = v;
  return {
    id: str(w.id),
    app: str(w.app),
    number: num(w.number),
    ref: str(w.ref),
    commit: optStr(w.commit),
    state: str(w.state, "queued") as DeployState,
    error: optStr(w.error),
    plan: w.plan && typeof w.plan === "object" && !Array.isArray(w.plan) ? { ...(w.plan as Wire) } : null,
    phasesMs: phases,
    sandboxId: optStr(w.sandbox_id),
    createdAt: str(w.created_at),
    updatedAt: str(w.updated_at),
  };
}

/** @internal */
export function functionFromWire(w: WireOf<"Function">): FunctionInfo {
  return {
    id: str(w.id),
    name: str(w.name),
    runtime: str(w.runtime, "python") as FunctionRuntime,
    handler: str(w.handler),
    url: str(w.url),
    public: w.public === true,
    env: strMap(w.env),
    secretNames: Array.isArray(w.secret_names) ? w.secret_names.filter((x): x is string => typeof x === "string") : [],
    memoryMb: num(w.memory_mb),
    timeoutSeconds: num(w.timeout_seconds),
    concurrency: num(w.concurrency),
    maxInstances: num(w.max_instances),
    idleSeconds: num(w.idle_seconds),
    liveVersion: optNum(w.live_version),
    warmInstances: num(w.warm_instances),
    createdAt: str(w.created_at),
    updatedAt: str(w.updated_at),
  };
}

/** @internal */
export function functionVersionFromWire(w: WireOf<"FunctionVersion">): FunctionVersionInfo {
  const phases: Record<string, number> = {};
  for (const [k, v] of Object.entries(object(w.phases_ms))) if (typeof v === "number") phases[k] = v;
  return {
    id: str(w.id),
    function: str(w.function),
    version: num(w.version),
    state: str(w.state, "queued") as DeployState,
    error: optStr(w.error),
    handler: optStr(w.handler),
    phasesMs: phases,
    createdAt: str(w.created_at),
    updatedAt: str(w.updated_at),
  };
}

/** @internal */
export function invocationErrorFromWire(w: WireOf<"InvocationError">): InvocationError {
  return { type: str(w.type), message: str(w.message), traceback: str(w.traceback) };
}

/** @internal */
export function invocationFromWire(w: WireOf<"Invocation">): Invocation {
  return {
    id: optStr(w.id),
    function: str(w.function),
    status: str(w.status, "ok") as InvocationStatus,
    result: w.result === undefined ? null : w.result,
    error: w.error && typeof w.error === "object" && !Array.isArray(w.error) ? invocationErrorFromWire(w.error as Wire) : null,
    stdout: str(w.stdout),
    stderr: str(w.stderr),
    version: optNum(w.version),
    durationMs: optNum(w.duration_ms),
    cold: w.cold === true,
    attempts: num(w.attempts),
    createdAt: optStr(w.created_at),
    finishedAt: optStr(w.finished_at),
  };
}

/** @internal */
export function sandboxExecTargetFromWire(w: WireOf<"SandboxExecTarget">): SandboxExecTarget {
  return { template: str(w.template), command: str(w.command), env: strMap(w.env), timeoutSeconds: num(w.timeout_seconds, 300) };
}

/** @internal */
export function functionTargetFromWire(w: WireOf<"FunctionTarget">): FunctionTarget {
  return { name: str(w.name) };
}

/** A schedule's target by its `type` (none: `sandbox_exec`); `null` for a kind this SDK does not know. @internal */
export function scheduleTargetFromWire(w: WireOf<"SandboxExecTarget"> & WireOf<"FunctionTarget"> & { type?: unknown }): ScheduleTarget | null {
  const type = w.type ?? "sandbox_exec";
  if (type === "sandbox_exec") return { type: "sandbox_exec", ...sandboxExecTargetFromWire(w) };
  if (type === "function") return { type: "function", ...functionTargetFromWire(w) };
  return null;
}

/** @internal */
export function scheduleFromWire(w: WireOf<"Schedule">): ScheduleInfo {
  return {
    id: str(w.id),
    name: str(w.name),
    cron: str(w.cron),
    timezone: str(w.timezone, "UTC"),
    target: w.target && typeof w.target === "object" && !Array.isArray(w.target) ? scheduleTargetFromWire(w.target as Wire) : null,
    payload: w.payload === undefined ? null : w.payload,
    concurrencyPolicy: str(w.concurrency_policy, "allow") as ConcurrencyPolicy,
    startingDeadlineSeconds: optNum(w.starting_deadline_seconds),
    retries: num(w.retries),
    paused: w.paused === true,
    nextRunAt: optStr(w.next_run_at),
    createdAt: str(w.created_at),
    updatedAt: str(w.updated_at),
  };
}

/** @internal */
export function scheduleRunFromWire(w: WireOf<"ScheduleRun">): ScheduleRunInfo {
  return {
    id: str(w.id),
    schedule: str(w.schedule),
    dueAt: str(w.due_at),
    trigger: str(w.trigger, "scheduled") as RunTrigger,
    state: str(w.state, "queued") as RunState,
    attempt: num(w.attempt),
    sandboxId: optStr(w.sandbox_id),
    startedAt: optStr(w.started_at),
    endedAt: optStr(w.ended_at),
    exitCode: optNum(w.exit_code),
    output: optStr(w.output),
    error: optStr(w.error),
    createdAt: str(w.created_at),
  };
}

/** @internal */
export function hostCapacityFromWire(w: WireOf<"HostCapacity">): HostCapacity {
  return {
    vcpus: num(w.vcpus),
    memoryMib: num(w.memory_mib),
    diskBytes: num(w.disk_bytes),
    freeSlots: num(w.free_slots),
    createsInFlight: num(w.creates_in_flight),
    slots: num(w.slots),
  };
}

/** @internal */
export function hostFromWire(w: WireOf<"Host">): HostInfo {
  return {
    id: str(w.id),
    name: str(w.name),
    address: optStr(w.address),
    state: str(w.state, "ready") as HostState,
    epoch: num(w.epoch),
    capacity: hostCapacityFromWire(object(w.capacity)),
    compatKey: optStr(w.compat_key),
    templates: Array.isArray(w.templates) ? w.templates.filter((t): t is string => typeof t === "string") : [],
    sandboxes: num(w.sandboxes),
    createdAt: str(w.created_at),
    lastSeenAt: str(w.last_seen_at),
    leaseExpiresAt: optStr(w.lease_expires_at),
  };
}

/** @internal */
export function execResultFromWire(w: WireOf<"ExecResult">): ExecResult {
  return {
    stdout: str(w.stdout),
    stderr: str(w.stderr),
    exitCode: num(w.exit_code, -1),
    timedOut: w.timed_out === true,
    truncated: w.truncated === true,
    durationMs: num(w.duration_ms),
  };
}

const strList = (v: unknown): string[] => (Array.isArray(v) ? v.filter((x): x is string => typeof x === "string") : []);

/** @internal */
export function eventResourceFromWire(w: WireOf<"EventResource">): EventResource {
  return { kind: str(w.kind), id: str(w.id) };
}

/** @internal */
export function eventFromWire(w: WireOf<"Event">): EventInfo {
  return {
    id: str(w.id),
    type: str(w.type),
    resource: eventResourceFromWire(object(w.resource)),
    at: str(w.at),
    data: { ...object(w.data) },
  };
}

/** @internal */
export function webhookFromWire(w: WireOf<"Webhook">): Webhook {
  return {
    id: str(w.id),
    url: str(w.url),
    events: strList(w.events),
    createdAt: str(w.created_at),
    secret: optStr(w.secret),
  };
}

/** @internal */
export function webhookDeliveryFromWire(w: WireOf<"WebhookDelivery">): WebhookDelivery {
  return {
    id: str(w.id),
    webhookId: str(w.webhook_id),
    eventId: str(w.event_id),
    eventType: str(w.event_type),
    state: str(w.state, "pending") as DeliveryState,
    attempts: num(w.attempts),
    createdAt: str(w.created_at),
    deliveredAt: optStr(w.delivered_at),
    lastAttemptAt: optStr(w.last_attempt_at),
    lastError: optStr(w.last_error),
    lastStatus: optNum(w.last_status),
    nextAttemptAt: optStr(w.next_attempt_at),
  };
}

/** @internal */
export function keyFromWire(w: WireOf<"Key">): Key {
  return {
    id: str(w.id),
    name: str(w.name),
    prefix: str(w.prefix),
    createdAt: str(w.created_at),
    revoked: w.revoked === true,
    admin: w.admin === true,
    scopes: Array.isArray(w.scopes) ? strList(w.scopes) : ["*"],
    expiresAt: optStr(w.expires_at),
    lastUsedAt: optStr(w.last_used_at),
    memberId: optStr(w.member_id),
    role: typeof w.role === "string" ? (w.role as Role) : null,
  };
}

/** @internal */
export function memberFromWire(w: WireOf<"Member">): Member {
  return {
    id: str(w.id),
    name: str(w.name),
    email: str(w.email),
    role: str(w.role, "viewer") as Role,
    createdAt: str(w.created_at),
    activeKeys: num(w.active_keys),
  };
}

/** @internal */
export function auditEntryFromWire(w: WireOf<"AuditEntry">): AuditEntry {
  return {
    id: str(w.id),
    at: str(w.at),
    keyId: str(w.key_id),
    keyName: str(w.key_name),
    memberId: optStr(w.member_id),
    action: str(w.action),
    method: str(w.method),
    route: str(w.route),
    resource: str(w.resource),
    result: str(w.result),
    status: num(w.status),
    source: str(w.source),
    requestId: str(w.request_id),
  };
}

/** @internal */
export function createdKeyFromWire(w: WireOf<"CreatedKey">): CreatedKey {
  return { ...keyFromWire(w), secret: str(w.secret) };
}

/** @internal */
export function snapshotFromWire(w: WireOf<"Snapshot">): SnapshotInfo {
  return {
    id: str(w.id),
    sandboxId: str(w.sandbox_id),
    template: str(w.template),
    createdAt: str(w.created_at),
    sizeBytes: num(w.size_bytes),
    durableAt: optStr(w.durable_at),
  };
}

/** @internal */
export function templateFromWire(w: WireOf<"Template">): TemplateInfo {
  return {
    name: str(w.name),
    description: str(w.description),
    cpu: num(w.cpu),
    memoryMb: num(w.memory_mb),
    diskMb: num(w.disk_mb),
    state: str(w.state),
    bakeMs: optNum(w.bake_ms),
    source: str(w.source, "catalog"),
    version: optNum(w.version),
    readyVersion: optNum(w.ready_version),
    error: optStr(w.error),
    buildMs: optNum(w.build_ms),
    imageBytes: optNum(w.image_bytes),
    createdAt: optStr(w.created_at),
  };
}

/** @internal */
export function fileInfoFromWire(w: WireOf<"FileInfo">): FileInfo {
  return {
    name: str(w.name),
    path: str(w.path),
    type: str(w.type, "other") as FileInfo["type"],
    size: num(w.size),
    mode: num(w.mode),
    mtimeMs: num(w.mtime_ms),
    symlinkTarget: optStr(w.symlink_target),
  };
}

/** @internal `baseUrl`: a relative `url` (as the server sends it) is made absolute with it. */
export function fileUrlFromWire(w: WireOf<"FileUrl">, baseUrl = ""): FileUrl {
  const url = str(w.url);
  return {
    url: url.startsWith("/") ? `${baseUrl.replace(/\/+$/, "")}${url}` : url,
    method: str(w.method, "GET") as FileUrl["method"],
    path: str(w.path),
    expiresAt: str(w.expires_at),
  };
}

/** @internal */
export function metricPointFromWire(w: WireOf<"MetricPoint">): MetricPoint {
  return {
    t: str(w.t),
    cpuPct: num(w.cpu_pct),
    vcpus: num(w.vcpus),
    memBytes: num(w.mem_bytes),
    pssBytes: num(w.pss_bytes),
    memTotalBytes: optNum(w.mem_total_bytes),
    memAvailableBytes: optNum(w.mem_available_bytes),
    diskBytes: optNum(w.disk_bytes),
    diskTotalBytes: optNum(w.disk_total_bytes),
    netRx: optNum(w.net_rx),
    netTx: optNum(w.net_tx),
  };
}

/** @internal */
export function instanceMetricsFromWire(w: WireOf<"InstanceMetrics">): InstanceMetrics {
  return { sandboxId: str(w.sandbox_id), state: str(w.state), samples: objects(w.samples).map(metricPointFromWire) };
}

/** @internal */
export function metricsFromWire(w: WireOf<"Metrics">): SandboxMetrics {
  const m: SandboxMetrics = {
    state: str(w.state),
    step: num(w.step),
    samples: objects(w.samples).map(metricPointFromWire),
    instances: objects(w.instances).map(instanceMetricsFromWire),
    raw: { ...w },
  };
  if (typeof w.host_rss_bytes === "number") m.hostRssBytes = w.host_rss_bytes;
  if (typeof w.host_pss_bytes === "number") m.hostPssBytes = w.host_pss_bytes;
  if (typeof w.cpu_time_ms === "number") m.cpuTimeMs = w.cpu_time_ms;
  return m;
}

/** @internal */
export function executionErrorFromWire(w: WireOf<"CodeError">): ExecutionError {
  return { name: str(w.name), value: str(w.value), traceback: str(w.traceback) };
}

/** @internal */
export function executionFromWire(w: WireOf<"CodeResult">): Execution {
  const results = Array.isArray(w.results) ? w.results : [];
  return new Execution({
    stdout: str(w.stdout),
    stderr: str(w.stderr),
    results: results.filter((r): r is Wire => !!r && typeof r === "object").map((r) => new Result(r)),
    error: w.error && typeof w.error === "object" ? executionErrorFromWire(w.error as Wire) : null,
    truncated: w.truncated === true,
    durationMs: num(w.duration_ms),
  });
}

/** @internal */
export function codeContextFromWire(w: WireOf<"CodeContext">): CodeContext {
  return { id: str(w.id), language: str(w.language, "python") };
}

export function portUrlFromWire(w: WireOf<"PortUrl">): PortUrl {
  return { url: str(w.url), port: num(w.port), public: w.public === true, token: str(w.token) };
}
