/**
 * `client.hosts`: every host of the platform, its drain and undrain, and forgetting a dead one:
 *
 * ```ts
 * for (const h of await client.hosts.list()) console.log(h.id, h.state, h.sandboxes, h.capacity.freeSlots);
 * await client.hosts.drain("host-1");     // keeps what it runs, takes nothing new
 * await client.hosts.undrain("host-1");
 * ```
 *
 * These are the operator routes: they take an admin key (`pandastack keys create --admin` on the
 * server; the API does not make one). A workspace's key throws {@link PermissionDeniedError}
 * (`forbidden`); an unknown host {@link NotFoundError} (`host_not_found`); a call the host's
 * state forbids (draining a dead host, forgetting one that is not dead) {@link ConflictError}
 * with the server's reason.
 */

import { InvalidArgumentError, NotFoundError } from "./errors.js";
import type { HttpClient } from "./http.js";
import type { CallOptions } from "./sandbox.js";
import { hostFromWire, type HostInfo } from "./types.js";

export class Hosts {
  /** @internal */
  constructor(private readonly http: HttpClient) {}

  /** Every host, by id, with the sandboxes (of every workspace) on each. */
  async list(opts: CallOptions = {}): Promise<HostInfo[]> {
    const page = await this.http.request<{ data?: unknown[] }>({ method: "GET", path: "/v1/hosts", ...call(opts) });
    return (page?.data ?? []).filter((w): w is Record<string, unknown> => !!w && typeof w === "object").map(hostFromWire);
  }

  /** One host. */
  async get(id: string, opts: CallOptions = {}): Promise<HostInfo> {
    const w = await this.http.request<Record<string, unknown>>({ method: "GET", path: hostPath(id), ...call(opts) });
    return hostFromWire(w ?? {});
  }

  /**
   * Drains a host: it keeps what it runs and takes nothing new (a restart of its agent does not
   * undo it). Resolves with the host, `draining`; a dead host throws {@link ConflictError}.
   */
  async drain(id: string, opts: CallOptions = {}): Promise<HostInfo> {
    const w = await this.http.request<Record<string, unknown>>({ method: "POST", path: hostPath(id, "/drain"), ...call(opts) });
    return hostFromWire(w ?? {});
  }

  /**
   * Undrains a host: it takes work again. Resolves with the host, `ready`; a dead host throws
   * {@link ConflictError} (only its agent joining again makes it ready).
   */
  async undrain(id: string, opts: CallOptions = {}): Promise<HostInfo> {
    const w = await this.http.request<Record<string, unknown>>({ method: "POST", path: hostPath(id, "/undrain"), ...call(opts) });
    return hostFromWire(w ?? {});
  }

  /**
   * Forgets a dead host: its row goes (its agent joining again later makes it a host anew).
   * False if there was no such host; a host that is not dead, or on which a sandbox, snapshot,
   * volume or database still lives, throws {@link ConflictError} with the reason.
   */
  async forget(id: string, opts: CallOptions = {}): Promise<boolean> {
    try {
      await this.http.request({ method: "DELETE", path: hostPath(id), responseType: "none", ...call(opts) });
      return true;
    } catch (e) {
      if (e instanceof NotFoundError) return false;
      throw e;
    }
  }
}

function hostPath(id: string, rest = ""): string {
  if (typeof id !== "string" || id === "") {
    throw new InvalidArgumentError(`expected a host id, got ${JSON.stringify(id)}`, { code: "invalid_argument" });
  }
  return `/v1/hosts/${encodeURIComponent(id)}${rest}`;
}

function call(opts: CallOptions): { timeoutMs?: number; signal?: AbortSignal } {
  const o: { timeoutMs?: number; signal?: AbortSignal } = {};
  if (opts.timeoutMs !== undefined) o.timeoutMs = opts.timeoutMs;
  if (opts.signal !== undefined) o.signal = opts.signal;
  return o;
}
