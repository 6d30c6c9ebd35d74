/**
 * `client.schedules`: cron schedules that run a target at each due time (each due time once,
 * whatever the number of server processes): a command in a fresh sandbox or a call of a
 * function:
 *
 * ```ts
 * await client.schedules.create({
 *   name: "nightly", cron: "0 3 * * *", timezone: "Europe/Berlin",
 *   target: { type: "sandbox_exec", template: "minimal", command: "python3 /srv/report.py" },
 *   payload: { full: true }, retries: 2,
 * });
 * const run = await client.schedules.run("nightly");              // a manual run, now
 * for await (const r of client.schedules.runs("nightly")) console.log(r.dueAt, r.state, r.exitCode);
 * await client.schedules.pause("nightly");
 * ```
 *
 * Every call takes the schedule's name or its id; an unknown one throws {@link NotFoundError}.
 */

import { InvalidArgumentError, NotFoundError } from "./errors.js";
import type { HttpClient } from "./http.js";
import { Paginator, type Page } from "./pagination.js";
import type { CallOptions } from "./sandbox.js";
import {
  scheduleFromWire,
  scheduleRunFromWire,
  type ConcurrencyPolicy,
  type ScheduleInfo,
  type ScheduleRunInfo,
} from "./types.js";
import type { WireBody } from "./wire.js";

/**
 * What a schedule runs, as {@link Schedules.create} and {@link Schedules.update} take it: a
 * command in a new sandbox of `template` (`env`, `timeoutSeconds`: server defaults `{}` and
 * 300), or a call of function `name`.
 */
export type ScheduleTargetInput =
  | { type: "sandbox_exec"; template: string; command: string; env?: Record<string, string>; timeoutSeconds?: number }
  | { type: "function"; name: string };

/** The fields of a schedule that {@link Schedules.create} and {@link Schedules.update} share. */
export interface ScheduleConfigOptions {
  /** IANA time zone the expression is read in (default `UTC`), e.g. `Europe/Berlin`. */
  timezone?: string;
  /** JSON handed to each run (`$PANDASTACK_PAYLOAD` of a command; a function's event). */
  payload?: unknown;
  /** What a due time does while a previous run is under way (default `allow`). */
  concurrencyPolicy?: ConcurrencyPolicy;
  /** A due time found this many seconds late (the server was down) is recorded `missed` (update: `0` removes it). */
  startingDeadlineSeconds?: number;
  /** Attempts again after a failed run, 0 to 10 (default 0). */
  retries?: number;
}

/** Options of {@link Schedules.create}. */
export interface CreateScheduleOptions extends ScheduleConfigOptions, CallOptions {
  /** 1-63 of `[a-z0-9-]`, starting with a letter; unique in the workspace. */
  name: string;
  /** Five fields (`*\/5 * * * *`), six with seconds first, or `@yearly`, `@monthly`, `@weekly`, `@daily`, `@hourly`. */
  cron: string;
  target: ScheduleTargetInput;
  /** Create it paused. */
  paused?: boolean;
}

/** Options of {@link Schedules.update}: each field given replaces the schedule's. */
export interface UpdateScheduleOptions extends ScheduleConfigOptions, CallOptions {
  cron?: string;
  target?: ScheduleTargetInput;
}

/** Paging of {@link Schedules.list} and {@link Schedules.runs}. */
export interface ListSchedulesOptions extends CallOptions {
  /** Page size (1-1000). */
  limit?: number;
  /** Start after this cursor (from a previous page's `nextCursor`). */
  cursor?: string;
}

const POLICIES = new Set(["allow", "forbid", "replace"]);

export class Schedules {
  /** @internal */
  constructor(private readonly http: HttpClient) {}

  /**
   * Creates a schedule and resolves with it (`nextRunAt` its first due time). A name in use
   * throws {@link ConflictError}; a bad expression or time zone {@link InvalidArgumentError}.
   */
  async create(opts: CreateScheduleOptions): Promise<ScheduleInfo> {
    if (typeof opts?.name !== "string" || opts.name === "") {
      throw new InvalidArgumentError("name: the schedule's name", { code: "invalid_argument" });
    }
    if (typeof opts.cron !== "string" || opts.cron.trim() === "") {
      throw new InvalidArgumentError("cron: a cron expression", { code: "invalid_argument" });
    }
    if (opts.target === undefined) {
      throw new InvalidArgumentError("target: what the schedule runs", { code: "invalid_argument" });
    }
    // configToWire set `target` already (it is given); restated so the type sees it (same key order).
    const body: WireBody<"CreateScheduleRequest"> = { name: opts.name, cron: opts.cron, ...configToWire(opts), target: targetToWire(opts.target) };
    if (opts.paused !== undefined) body.paused = opts.paused === true;
    const w = await this.http.request<Record<string, unknown>>({ method: "POST", path: "/v1/schedules", json: body, ...call(opts) });
    return scheduleFromWire(w ?? {});
  }

  /** The workspace's schedules (by name), fetched page by page as you iterate. */
  list(opts: ListSchedulesOptions = {}): Paginator<ScheduleInfo> {
    return this.paginate("/v1/schedules", opts, scheduleFromWire);
  }

  /** One schedule, by name or id. */
  async get(name: string, opts: CallOptions = {}): Promise<ScheduleInfo> {
    const w = await this.http.request<Record<string, unknown>>({ method: "GET", path: schedulePath(name), ...call(opts) });
    return scheduleFromWire(w ?? {});
  }

  /** Changes a schedule and resolves with it; its next due time is counted again from now. */
  async update(name: string, opts: UpdateScheduleOptions): Promise<ScheduleInfo> {
    const body: WireBody<"UpdateScheduleRequest"> = configToWire(opts);
    if (opts.cron !== undefined) body.cron = opts.cron;
    const w = await this.http.request<Record<string, unknown>>({ method: "PATCH", path: schedulePath(name), json: body, ...call(opts) });
    return scheduleFromWire(w ?? {});
  }

  /**
   * Deletes a schedule and its run history; runs under way are cancelled (their sandboxes
   * deleted). False if it did not exist.
   */
  async delete(name: string, opts: CallOptions = {}): Promise<boolean> {
    try {
      await this.http.request({ method: "DELETE", path: schedulePath(name), responseType: "none", ...call(opts) });
      return true;
    } catch (e) {
      if (e instanceof NotFoundError) return false;
      throw e;
    }
  }

  /** Stops the schedule from firing until {@link resume} (runs under way go on). */
  async pause(name: string, opts: CallOptions = {}): Promise<ScheduleInfo> {
    const w = await this.http.request<Record<string, unknown>>({ method: "POST", path: schedulePath(name, "/pause"), ...call(opts) });
    return scheduleFromWire(w ?? {});
  }

  /** Lets a paused schedule fire again, from now on (the due times of the pause are not caught up). */
  async resume(name: string, opts: CallOptions = {}): Promise<ScheduleInfo> {
    const w = await this.http.request<Record<string, unknown>>({ method: "POST", path: schedulePath(name, "/resume"), ...call(opts) });
    return scheduleFromWire(w ?? {});
  }

  /**
   * Runs the schedule's target now (a `manual` run; the concurrency policy applies, so under
   * `forbid` it is `skipped` while another run is under way). Resolves with the run (follow it
   * with {@link getRun}).
   */
  async run(name: string, opts: CallOptions = {}): Promise<ScheduleRunInfo> {
    const w = await this.http.request<Record<string, unknown>>({ method: "POST", path: schedulePath(name, "/run"), ...call(opts) });
    return scheduleRunFromWire(w ?? {});
  }

  /** The schedule's runs, newest due time first, fetched page by page as you iterate. */
  runs(name: string, opts: ListSchedulesOptions = {}): Paginator<ScheduleRunInfo> {
    return this.paginate(schedulePath(name, "/runs"), opts, scheduleRunFromWire);
  }

  /** One run of the schedule, as it is now. */
  async getRun(name: string, runId: string, opts: CallOptions = {}): Promise<ScheduleRunInfo> {
    const w = await this.http.request<Record<string, unknown>>({
      method: "GET",
      path: schedulePath(name, `/runs/${segment("run id", runId)}`),
      ...call(opts),
    });
    return scheduleRunFromWire(w ?? {});
  }

  private paginate<T>(path: string, opts: ListSchedulesOptions, map: (w: Record<string, unknown>) => T): Paginator<T> {
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

/** The `target` object of a schedule request. @internal */
export function targetToWire(t: ScheduleTargetInput): WireBody<"ScheduleTarget"> {
  const bad = () => new InvalidArgumentError('target: { type: "sandbox_exec", template, command, … } or { type: "function", name }', { code: "invalid_argument" });
  if (!t || typeof t !== "object") throw bad();
  if (t.type === "sandbox_exec") {
    const out: WireBody<"ScheduleTarget"> & { type: "sandbox_exec" } = { type: "sandbox_exec", template: t.template, command: t.command };
    if (t.env !== undefined) out.env = t.env;
    if (t.timeoutSeconds !== undefined) out.timeout_seconds = t.timeoutSeconds;
    return out;
  }
  if (t.type === "function") return { type: "function", name: t.name };
  throw bad();
}

/** The fields shared by a create and an update (typed as a create's, which an update's accept). */
type ConfigBody = Partial<Pick<WireBody<"CreateScheduleRequest">, "timezone" | "target" | "payload" | "concurrency_policy" | "starting_deadline_seconds" | "retries">>;

/** The fields shared by a create and an update; what is unset is left out. @internal */
export function configToWire(o: ScheduleConfigOptions & { target?: ScheduleTargetInput }): ConfigBody {
  const body: ConfigBody = {};
  if (o.timezone !== undefined) body.timezone = o.timezone;
  if (o.target !== undefined) body.target = targetToWire(o.target);
  if (o.payload !== undefined) body.payload = o.payload;
  if (o.concurrencyPolicy !== undefined) {
    if (!POLICIES.has(o.concurrencyPolicy)) {
      throw new InvalidArgumentError(`concurrencyPolicy: "allow", "forbid" or "replace", got ${JSON.stringify(o.concurrencyPolicy)}`, {
        code: "invalid_argument",
      });
    }
    body.concurrency_policy = o.concurrencyPolicy;
  }
  if (o.startingDeadlineSeconds !== undefined) body.starting_deadline_seconds = o.startingDeadlineSeconds;
  if (o.retries !== undefined) body.retries = o.retries;
  return body;
}

function schedulePath(name: string, rest = ""): string {
  return `/v1/schedules/${segment("schedule name or id", name)}${rest}`;
}

function segment(what: string, s: string): string {
  if (typeof s !== "string" || s === "") {
    throw new InvalidArgumentError(`expected a ${what}, got ${JSON.stringify(s)}`, { code: "invalid_argument" });
  }
  return encodeURIComponent(s);
}

function call(opts: CallOptions): { timeoutMs?: number; signal?: AbortSignal } {
  const o: { timeoutMs?: number; signal?: AbortSignal } = {};
  if (opts.timeoutMs !== undefined) o.timeoutMs = opts.timeoutMs;
  if (opts.signal !== undefined) o.signal = opts.signal;
  return o;
}
