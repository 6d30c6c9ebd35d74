/**
 * `client.apps`: apps deployed from git (or from a local directory), each built in a microVM
 * of its own, health-checked, and served at its `url` (`<name>.<domain>`) by the server's
 * proxy. A new deploy takes the traffic once healthy (blue-green); the version before stays
 * `standby` for a {@link Apps.rollback}:
 *
 * ```ts
 * const app = await client.apps.create({ name: "web", git: "https://github.com/me/web.git", deploy: false });
 * const d = await client.apps.deploy("web", { wait: true });   // polls until it ends
 * console.log(d.state, app.url);                                // live https://web.<domain>
 * console.log(await client.apps.deployLogs("web", d.id));      // clone, plan, install, build, check
 * await client.apps.deployDirectory("web", "./web");            // a deploy of local files
 * await client.apps.rollback("web");                            // the version before is back
 * ```
 *
 * Every call takes the app's name or its id. An app with `minInstances: 0` hibernates after
 * `idleSeconds` without requests; the next request wakes it.
 */

import { DeployTimeoutError, InvalidArgumentError, NotFoundError, PandaStackError } from "./errors.js";
import { LogFollower, abortReason, sleep, type LogCallback } from "./follow.js";
import type { HttpClient } from "./http.js";
import { Paginator, type Page } from "./pagination.js";
import { LONG_OPERATION_TIMEOUT_MS, metricsQuery, type CallOptions, type MetricsOptions } from "./sandbox.js";
import {
  appFromWire,
  deployFromWire,
  metricsFromWire,
  type AppBuild,
  type AppGit,
  type AppInfo,
  type AppStart,
  type DeployInfo,
  type SandboxMetrics,
} from "./types.js";
import type { WireBody } from "./wire.js";

/** The states of a deploy still under way (any other is where it ended). */
const DEPLOY_ACTIVE_STATES = new Set(["queued", "cloning", "building", "baking", "checking"]);
const DEFAULT_DEPLOY_TIMEOUT_SECONDS = 1800;
const DEFAULT_DEPLOY_POLL_MS = 1000;
/** Names {@link Apps.deployDirectory} leaves out of the upload, at any depth. */
const UPLOAD_EXCLUDES = [".git", "node_modules"];

/** The configuration of an app: what {@link Apps.create} and {@link Apps.update} take. */
export interface AppConfigOptions {
  /** Environment of the build and of the running app (an update replaces it whole). */
  env?: Record<string, string>;
  /** Like `env`, but never shown by the API (only their names, `secretNames`). */
  secrets?: Record<string, string>;
  /** Overrides what detection chose for the build. */
  build?: AppBuild;
  /** Overrides what detection chose for the start. */
  start?: AppStart;
  /** Memory of its VM, MiB: a multiple of 256 from 256 to 16384 (default 1024). */
  memoryMb?: number;
  /** `0` (default): hibernate after `idleSeconds` without requests, wake on the next; `1`: always running. */
  minInstances?: number;
  /** Seconds without requests before an app with `minInstances: 0` hibernates (default 300). */
  idleSeconds?: number;
  /** Path the health check asks for (default `/`); 2xx or 3xx is healthy. */
  healthPath?: string;
  /**
   * The subdirectory of the repository that is the app, for a monorepo: relative, no `..`
   * (`"."`: the whole repository, the default).
   */
  rootDir?: string;
  /**
   * Extra host names the app answers at, besides `<name>.<domain>`: lower-case DNS names (at
   * most 20, none under the server's own domain, none another app has); point their DNS at the
   * server's proxy. With TLS on the proxy each gets a certificate, from the operator's
   * certificate directory or else from ACME: see `AppInfo.domains[i].tls`. An update replaces
   * them whole (`[]` removes them all).
   */
  domains?: string[];
}

/** Options of {@link Apps.create}. */
export interface CreateAppOptions extends AppConfigOptions, CallOptions {
  /** The app's name and host name: 1-40 of `[a-z0-9-]`, starting with a letter. */
  name: string;
  /**
   * The repository: its URL (fetched by the server over the network: `https://…`, `http://…`,
   * `git://…`, `ssh://…` or `user@host:path` — never a path or `file://` on the server), or
   * `{ url, ref }`.
   */
  git: string | AppGit;
  /** Branch, tag or commit to deploy (default `main`); overrides `git.ref`. */
  ref?: string;
  /** Queue the first deploy at once (default `true`). */
  deploy?: boolean;
}

/** Options of {@link Apps.update}: each field given replaces the app's; the others stay. */
export interface UpdateAppOptions extends AppConfigOptions, CallOptions {
  /** The repository (replaced whole). */
  git?: string | AppGit;
  /** Branch, tag or commit; needs `git`. */
  ref?: string;
}

/** Paging of {@link Apps.list} and {@link Apps.deploys}. */
export interface ListAppsOptions extends CallOptions {
  /** Page size (1-1000). */
  limit?: number;
  /** Start after this cursor (from a previous page's `nextCursor`). */
  cursor?: string;
}

/** Options of {@link Apps.waitForDeploy} (and of the deploys with `wait`). */
export interface WaitDeployOptions extends CallOptions {
  /** Give up after this long: {@link DeployTimeoutError} (the deploy goes on). Default 1800. */
  timeoutSeconds?: number;
  /** Pause between two polls, milliseconds (default 1000). */
  pollMs?: number;
}

/** Options of {@link Apps.deployDirectory}. */
export interface DeployDirectoryOptions extends WaitDeployOptions {
  /** Resolve once the deploy has ended (see {@link Apps.waitForDeploy}) instead of once it is queued. */
  wait?: boolean;
}

/** Options of {@link Apps.deploy}. */
export interface DeployOptions extends DeployDirectoryOptions {
  /** Branch, tag or commit (default: the app's `git.ref`). */
  ref?: string;
}

/** Options of {@link Apps.deployLogs} and {@link Apps.logs}. */
export interface AppLogsOptions extends CallOptions {
  /**
   * Follow the log (Server-Sent Events, reopened if the connection breaks) until it ends, passing
   * each new piece to `onLog`; resolves with the whole text. `timeoutMs` does not apply then;
   * `signal` stops the follow.
   */
  follow?: boolean;
  /** Called with each new piece of log text while following. */
  onLog?: LogCallback;
}

/** Options of {@link Apps.rollback}. */
export interface RollbackOptions extends CallOptions {
  /** The deploy to go back to (default: the newest `standby` one). */
  deployId?: string;
}

/** Whether a deploy is still under way (`queued`, `cloning`, `building`, `baking` or `checking`). */
export function isDeployActive(d: DeployInfo): boolean {
  return DEPLOY_ACTIVE_STATES.has(d.state);
}

export class Apps {
  /** @internal */
  constructor(private readonly http: HttpClient) {}

  /**
   * Creates an app and queues its first deploy (unless `deploy: false`); resolves with the app
   * at once ({@link deploys} lists the queued deploy, {@link waitForDeploy} waits for it). A
   * name in use, or a domain another app has, throws {@link ConflictError}; a bad field
   * {@link InvalidArgumentError} naming it (`domains[i]`).
   */
  async create(opts: CreateAppOptions): Promise<AppInfo> {
    if (typeof opts?.name !== "string" || opts.name === "") {
      throw new InvalidArgumentError("name: the app's name", { code: "invalid_argument" });
    }
    const body: WireBody<"CreateAppRequest"> = { name: opts.name, git: gitToWire(opts.git, opts.ref), ...configToWire(opts) };
    if (opts.deploy !== undefined) body.deploy = opts.deploy === true;
    const w = await this.http.request<Record<string, unknown>>({ method: "POST", path: "/v1/apps", json: body, ...call(opts) });
    return appFromWire(w ?? {});
  }

  /** The workspace's apps (by name), fetched page by page as you iterate. */
  list(opts: ListAppsOptions = {}): Paginator<AppInfo> {
    return this.paginate("/v1/apps", opts, appFromWire);
  }

  /** One app, by name or id; throws {@link AppNotFoundError} if there is none. */
  async get(name: string, opts: CallOptions = {}): Promise<AppInfo> {
    const w = await this.http.request<Record<string, unknown>>({ method: "GET", path: appPath(name), ...call(opts) });
    return appFromWire(w ?? {});
  }

  /**
   * The resource use of an app's VMs over time (by name or id): `samples` sum its instances
   * (oldest first, `step` seconds apart), each listed in `instances`.
   * `since`: a span (`"90s"`, `"15m"`, `"1h"`), a `Date` or an RFC 3339 string (default 10
   * minutes back, at most 6 hours); `step`: seconds per point (1 to 86400, default 5). Values the
   * server refuses throw {@link InvalidArgumentError}.
   */
  async metrics(name: string, opts: MetricsOptions = {}): Promise<SandboxMetrics> {
    const w = await this.http.request<Record<string, unknown>>({
      method: "GET",
      path: appPath(name, "/metrics"),
      query: metricsQuery(opts),
      ...call(opts),
    });
    return metricsFromWire(w ?? {});
  }

  /**
   * Changes an app's configuration and resolves with the app: each field given replaces the
   * app's (`env`, `secrets` and `domains` whole, `domains: []` removes them all; `ref` needs
   * `git`). The next deploy builds with it; `minInstances` and `idleSeconds` apply to the
   * running version at once, and `domains` to the proxy at once.
   */
  async update(name: string, opts: UpdateAppOptions): Promise<AppInfo> {
    const body: WireBody<"UpdateAppRequest"> = {};
    if (opts.git !== undefined) body.git = gitToWire(opts.git, opts.ref);
    else if (opts.ref !== undefined) {
      throw new InvalidArgumentError("ref: give git with it (an update replaces the app's git whole)", { code: "invalid_argument" });
    }
    Object.assign(body, configToWire(opts));
    const w = await this.http.request<Record<string, unknown>>({ method: "PATCH", path: appPath(name), json: body, ...call(opts) });
    return appFromWire(w ?? {});
  }

  /** Deletes an app: every version's VM, its deploys and their logs; false if it did not exist. */
  async delete(name: string, opts: CallOptions = {}): Promise<boolean> {
    try {
      await this.http.request({
        method: "DELETE",
        path: appPath(name),
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
   * Replaces the app's SSH deploy key with a new ed25519 pair and resolves with the app, its
   * `deployKey` the new public key to put on the repository (as a read-only deploy key).
   * Deploys from then on fetch with the new key.
   */
  async rotateDeployKey(name: string, opts: CallOptions = {}): Promise<AppInfo> {
    const w = await this.http.request<Record<string, unknown>>({
      method: "POST",
      path: appPath(name, "/deploy-key"),
      ...call(opts),
    });
    return appFromWire(w ?? {});
  }

  /**
   * Deploys the app again from its git repository: its `git.ref`, or `ref`. Resolves with the
   * deploy `queued` (one deploy runs at a time per host; a queued deploy a newer one overtakes
   * ends `superseded`); with `wait: true`, once it has ended (see {@link waitForDeploy}).
   */
  async deploy(name: string, opts: DeployOptions = {}): Promise<DeployInfo> {
    const w = await this.http.request<Record<string, unknown>>({
      method: "POST",
      path: appPath(name, "/deploys"),
      json: (opts.ref !== undefined ? { ref: opts.ref } : {}) satisfies WireBody<"CreateDeployRequest">,
      ...call(opts),
    });
    const d = deployFromWire(w ?? {});
    return opts.wait ? this.waitForDeploy(name, d.id, opts) : d;
  }

  /**
   * Deploys the content of a local directory (Node) instead of the app's git repository: it is
   * packed by the system `tar` (`tar -czf -`, `.git` and `node_modules` left out at any depth,
   * symbolic links kept as links, which the server skips), uploaded as `application/gzip`, and
   * built like a clone. Resolves with the deploy `queued` (its `ref` is `"upload"`); with
   * `wait: true`, once it has ended. A path that is not a directory throws
   * {@link InvalidArgumentError}, and so does an upload over the server's limit (413).
   */
  async deployDirectory(name: string, path: string, opts: DeployDirectoryOptions = {}): Promise<DeployInfo> {
    const tarball = await packDirectory(path);
    const w = await this.http.request<Record<string, unknown>>({
      method: "POST",
      path: appPath(name, "/deploys"),
      body: tarball,
      contentType: "application/gzip",
      timeoutMs: opts.timeoutMs ?? Math.max(this.http.timeoutMs, LONG_OPERATION_TIMEOUT_MS),
      ...(opts.signal ? { signal: opts.signal } : {}),
    });
    const d = deployFromWire(w ?? {});
    return opts.wait ? this.waitForDeploy(name, d.id, opts) : d;
  }

  /** The app's deploys, newest first, fetched page by page as you iterate. */
  deploys(name: string, opts: ListAppsOptions = {}): Paginator<DeployInfo> {
    return this.paginate(appPath(name, "/deploys"), opts, deployFromWire);
  }

  /** One deploy of the app, as it is now ({@link NotFoundError} if the app has no such deploy). */
  async getDeploy(name: string, deployId: string, opts: CallOptions = {}): Promise<DeployInfo> {
    const w = await this.http.request<Record<string, unknown>>({
      method: "GET",
      path: appPath(name, `/deploys/${segment("deploy id", deployId)}`),
      ...call(opts),
    });
    return deployFromWire(w ?? {});
  }

  /**
   * Polls a deploy until it has ended and resolves with it: `live`, `failed` (`error` says
   * why), `superseded` or `standby`. One still under way after `timeoutSeconds` (default 1800)
   * throws {@link DeployTimeoutError} (`deploy`; the deploy goes on).
   */
  async waitForDeploy(name: string, deployId: string, opts: WaitDeployOptions = {}): Promise<DeployInfo> {
    const timeoutSeconds = opts.timeoutSeconds ?? DEFAULT_DEPLOY_TIMEOUT_SECONDS;
    const deadline = Date.now() + timeoutSeconds * 1000;
    const poll = opts.pollMs ?? DEFAULT_DEPLOY_POLL_MS;
    const callOpts = call(opts);
    for (;;) {
      const d = await this.getDeploy(name, deployId, callOpts);
      if (!isDeployActive(d)) return d;
      if (Date.now() >= deadline) {
        throw new DeployTimeoutError(
          `deploy ${d.id} of app ${name} still ${d.state} after timeoutSeconds=${timeoutSeconds}; the deploy goes on on the server (apps.getDeploy shows its state)`,
          d,
        );
      }
      await sleep(Math.max(0, Math.min(poll, deadline - Date.now())), opts.signal);
    }
  }

  /**
   * A deploy's log (fetch, detection's plan, install and build output, start, health check) so
   * far; with `follow: true`, followed until the deploy ends (each new piece to `onLog`), then
   * the whole log.
   */
  async deployLogs(name: string, deployId: string, opts: AppLogsOptions = {}): Promise<string> {
    const path = appPath(name, `/deploys/${segment("deploy id", deployId)}/logs`);
    return this.log(path, `log of deploy ${deployId} of app ${name}`, opts);
  }

  /**
   * The running app's own output (its server's stdout and stderr): the newest MiB. With
   * `follow: true`, all of it and then everything it writes next, each piece to `onLog`, until
   * its VM stops (or `signal` aborts, or `onLog` throws); resolves with the text seen.
   */
  async logs(name: string, opts: AppLogsOptions = {}): Promise<string> {
    return this.log(appPath(name, "/logs"), `log of app ${name}`, opts);
  }

  /**
   * Puts an earlier version back: its hibernated VM is woken, checked and takes the traffic (no
   * rebuild); the current version becomes `standby`. Resolves with that deploy, now `live`.
   * With no version to go back to, or one that is not `standby`, throws {@link ConflictError}.
   */
  async rollback(name: string, opts: RollbackOptions = {}): Promise<DeployInfo> {
    const w = await this.http.request<Record<string, unknown>>({
      method: "POST",
      path: appPath(name, "/rollback"),
      json: (opts.deployId !== undefined ? { deploy_id: opts.deployId } : {}) satisfies WireBody<"RollbackRequest">,
      timeoutMs: opts.timeoutMs ?? Math.max(this.http.timeoutMs, LONG_OPERATION_TIMEOUT_MS),
      ...(opts.signal ? { signal: opts.signal } : {}),
    });
    return deployFromWire(w ?? {});
  }

  private async log(path: string, what: string, opts: AppLogsOptions): Promise<string> {
    if (!opts.follow) {
      return this.http.request({ method: "GET", path, headers: { accept: "text/plain" }, responseType: "text", ...call(opts) });
    }
    const parts: string[] = [];
    const onLog = async (text: string) => {
      parts.push(text);
      if (opts.onLog) await opts.onLog(text);
    };
    const f = new LogFollower(this.http, path, { follow: 1 }, what);
    while (f.reason === undefined) {
      if (opts.signal?.aborted) throw abortReason(opts.signal);
      await f.once(onLog, opts.signal);
    }
    return parts.join("");
  }

  private paginate<T>(path: string, opts: ListAppsOptions, map: (w: Record<string, unknown>) => T): Paginator<T> {
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

/** The `git` object of a request; `ref` (when given) overrides the one in `git`. @internal */
export function gitToWire(git: string | AppGit, ref?: string): WireBody<"AppGit"> {
  let out: WireBody<"AppGit">;
  if (typeof git === "string") {
    out = { url: git };
  } else if (git && typeof git === "object") {
    out = { url: git.url };
    if (git.ref !== undefined && git.ref !== null) out.ref = git.ref;
  } else {
    throw new InvalidArgumentError("git: the repository's URL, or { url, ref }", { code: "invalid_argument" });
  }
  if (typeof out.url !== "string" || out.url === "") {
    throw new InvalidArgumentError("git: the repository's URL (or path)", { code: "invalid_argument" });
  }
  if (ref !== undefined) out.ref = ref;
  return out;
}

/** The configuration fields of a create or update; what is unset is left out. @internal */
export function configToWire(o: AppConfigOptions): Omit<WireBody<"CreateAppRequest">, "name" | "git" | "deploy"> {
  const body: Omit<WireBody<"CreateAppRequest">, "name" | "git" | "deploy"> = {};
  if (o.env !== undefined) body.env = o.env;
  if (o.secrets !== undefined) body.secrets = o.secrets;
  if (o.build !== undefined) {
    const b: WireBody<"AppBuild"> = {};
    if (o.build.command != null) b.command = o.build.command;
    if (o.build.outputDir != null) b.output_dir = o.build.outputDir;
    body.build = b;
  }
  if (o.start !== undefined) {
    const s: WireBody<"AppStart"> = {};
    if (o.start.command != null) s.command = o.start.command;
    if (o.start.port != null) {
      const p = o.start.port;
      if (typeof p !== "number" || !Number.isInteger(p) || p < 1 || p > 65535) {
        throw new InvalidArgumentError(`start.port: a TCP port, 1 to 65535, got ${String(p)}`, { code: "invalid_argument" });
      }
      s.port = p;
    }
    body.start = s;
  }
  if (o.memoryMb !== undefined) body.memory_mb = o.memoryMb;
  if (o.minInstances !== undefined) body.min_instances = o.minInstances;
  if (o.idleSeconds !== undefined) body.idle_seconds = o.idleSeconds;
  if (o.healthPath !== undefined) body.health_path = o.healthPath;
  if (o.rootDir !== undefined) body.root_dir = o.rootDir;
  if (o.domains !== undefined) {
    const d: unknown = o.domains;
    if (!Array.isArray(d)) {
      throw new InvalidArgumentError(`domains: an array of host names, got ${typeof d}`, { code: "invalid_argument" });
    }
    d.forEach((x, i) => {
      if (typeof x !== "string" || x === "") {
        throw new InvalidArgumentError(`domains[${i}]: a non-empty host name, got ${JSON.stringify(x)}`, { code: "invalid_argument" });
      }
    });
    body.domains = [...d];
  }
  return body;
}

/**
 * A gzip'd tar of a directory's content, made by the system `tar` (`.git` and `node_modules`
 * left out at any depth). @internal
 */
export async function packDirectory(path: string): Promise<Uint8Array> {
  const fs = await import("node:fs");
  const st = await fs.promises.stat(path).catch(() => undefined);
  if (!st?.isDirectory()) {
    throw new InvalidArgumentError(`path: ${path} is not a directory`, { code: "invalid_argument" });
  }
  const { spawn } = await import("node:child_process");
  const args = [...UPLOAD_EXCLUDES.map((x) => `--exclude=${x}`), "-czf", "-", "-C", path, "."];
  return new Promise((resolve, reject) => {
    const child = spawn("tar", args, { stdio: ["ignore", "pipe", "pipe"] });
    const out: Uint8Array[] = [];
    const err: Uint8Array[] = [];
    child.stdout.on("data", (c: Uint8Array) => out.push(c));
    child.stderr.on("data", (c: Uint8Array) => err.push(c));
    child.on("error", (e) => {
      reject(new PandaStackError(`tar: ${e.message} (deployDirectory packs with the system tar)`, { code: "tar_failed", cause: e }));
    });
    child.on("close", (code) => {
      if (code === 0) return resolve(new Uint8Array(Buffer.concat(out)));
      const why = Buffer.concat(err).toString("utf8").trim();
      reject(new PandaStackError(`tar -czf of ${path} failed (exit ${code})${why ? `: ${why}` : ""}`, { code: "tar_failed" }));
    });
  });
}

function appPath(name: string, rest = ""): string {
  return `/v1/apps/${segment("app name", name)}${rest}`;
}

function segment(what: string, s: string): string {
  if (typeof s !== "string" || s === "") {
    throw new InvalidArgumentError(`expected ${what === "app name" ? "an app name or id" : `a ${what}`}, got ${JSON.stringify(s)}`, {
      code: "invalid_argument",
    });
  }
  return encodeURIComponent(s);
}

function call(opts: CallOptions): { timeoutMs?: number; signal?: AbortSignal } {
  const o: { timeoutMs?: number; signal?: AbortSignal } = {};
  if (opts.timeoutMs !== undefined) o.timeoutMs = opts.timeoutMs;
  if (opts.signal !== undefined) o.signal = opts.signal;
  return o;
}
