/**
 * `client.keys`: the API keys of the caller's workspace.
 *
 * ```ts
 * const ro = await client.keys.create({ name: "dashboard", scopes: ["*:read"] });
 * const reader = new PandaStack({ apiKey: ro.secret });   // lists, but a create is refused
 * await client.keys.revoke(ro.id);
 * const dev = await client.keys.create({ name: "ada", memberId: member.id });   // a member's key: her role's limits
 * ```
 *
 * A call a key's scopes do not cover throws {@link PermissionDeniedError} (403 `forbidden`),
 * its message naming the scope it needed (e.g. `sandboxes:write`).
 */

import { InvalidArgumentError } from "./errors.js";
import type { HttpClient } from "./http.js";
import type { CallOptions } from "./sandbox.js";
import { createdKeyFromWire, keyFromWire, type CreatedKey, type Key } from "./types.js";
import type { WireBody } from "./wire.js";

/** Options of {@link Keys.create}. */
export interface CreateKeyOptions extends CallOptions {
  name?: string;
  /**
   * What the key may do: `*`, or `<kind>:<action>` with `*` for either part (actions `read`,
   * `write`, `exec`), e.g. `["*:read"]` or `["sandboxes:*"]`. Default: the calling key's own;
   * they must be covered by the calling key's.
   */
  scopes?: string[];
  /** When it stops working (an RFC 3339 string or a `Date`, in the future; not after the calling key's own expiry). */
  expiresAt?: string | Date;
  /**
   * The workspace member the key is for (`client.members`): it can do no more than the member's
   * role allows. Only an owner or admin names another member. Default: the calling key's
   * member, if any.
   */
  memberId?: string;
}

export class Keys {
  /** @internal */
  constructor(private readonly http: HttpClient) {}

  /** The workspace's keys (never with their secrets). */
  async list(opts: CallOptions = {}): Promise<Key[]> {
    const page = await this.http.request<{ data?: unknown[] }>({ method: "GET", path: "/v1/keys", ...call(opts) });
    return (page?.data ?? []).filter((w): w is Record<string, unknown> => !!w && typeof w === "object").map(keyFromWire);
  }

  /** A new key of the workspace; its `secret` is in this answer only. */
  async create(opts: CreateKeyOptions = {}): Promise<CreatedKey> {
    const body: WireBody<"CreateKeyRequest"> = { name: opts.name ?? "" };
    if (opts.scopes !== undefined) {
      if (!Array.isArray(opts.scopes)) {
        throw new InvalidArgumentError("scopes: an array of scope strings", { code: "invalid_argument" });
      }
      body.scopes = [...opts.scopes];
    }
    if (opts.expiresAt !== undefined) {
      body.expires_at = opts.expiresAt instanceof Date ? opts.expiresAt.toISOString() : opts.expiresAt;
    }
    if (opts.memberId !== undefined) {
      if (typeof opts.memberId !== "string" || opts.memberId === "") {
        throw new InvalidArgumentError(`memberId: a member id, got ${JSON.stringify(opts.memberId)}`, { code: "invalid_argument" });
      }
      body.member_id = opts.memberId;
    }
    const w = await this.http.request<Record<string, unknown>>({ method: "POST", path: "/v1/keys", json: body, ...call(opts) });
    return createdKeyFromWire(w ?? {});
  }

  /** Revokes a key: it stops working at once. */
  async revoke(id: string, opts: CallOptions = {}): Promise<void> {
    if (typeof id !== "string" || id === "") {
      throw new InvalidArgumentError(`expected a key id, got ${JSON.stringify(id)}`, { code: "invalid_argument" });
    }
    await this.http.request({ method: "DELETE", path: `/v1/keys/${encodeURIComponent(id)}`, responseType: "none", ...call(opts) });
  }
}

function call(opts: CallOptions): { timeoutMs?: number; signal?: AbortSignal } {
  const o: { timeoutMs?: number; signal?: AbortSignal } = {};
  if (opts.timeoutMs !== undefined) o.timeoutMs = opts.timeoutMs;
  if (opts.signal !== undefined) o.signal = opts.signal;
  return o;
}
