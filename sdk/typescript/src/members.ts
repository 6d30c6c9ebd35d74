/**
 * `client.members`: the members of the caller's workspace and their roles. A member's keys
 * (`client.keys.create({ memberId })`) can do no more than the member's role allows, whatever
 * their scopes say:
 *
 * ```ts
 * const dev = await client.members.create({ name: "Ada", email: "ada@example.org", role: "developer" });
 * const key = await client.keys.create({ name: "ada laptop", memberId: dev.id });
 * await client.members.update(dev.id, { role: "viewer" });   // every key of hers, at once
 * await client.members.delete(dev.id);                       // her keys are revoked
 * ```
 *
 * Only owners and admins manage members (a developer's or viewer's key throws
 * {@link PermissionDeniedError}, naming the scope `members:write`), and only an owner touches an
 * owner. An email already taken, or removing or demoting the last owner, throws
 * {@link ConflictError}; an unknown member {@link NotFoundError}.
 */

import { InvalidArgumentError } from "./errors.js";
import type { HttpClient } from "./http.js";
import type { CallOptions } from "./sandbox.js";
import { memberFromWire, type Member, type Role } from "./types.js";
import type { WireBody } from "./wire.js";

/** The roles, most powerful first. */
const ROLES: readonly Role[] = ["owner", "admin", "developer", "viewer"];

/** Options of {@link Members.create}. */
export interface CreateMemberOptions extends CallOptions {
  /** A display name (1–64 bytes). */
  name: string;
  /** Unique in the workspace (compared case-insensitively). */
  email: string;
  role: Role;
}

/** Options of {@link Members.update}: what is given changes, the rest stays. */
export interface UpdateMemberOptions extends CallOptions {
  name?: string;
  role?: Role;
}

export class Members {
  /** @internal */
  constructor(private readonly http: HttpClient) {}

  /** The workspace's members, oldest first. */
  async list(opts: CallOptions = {}): Promise<Member[]> {
    const page = await this.http.request<{ data?: unknown[] }>({ method: "GET", path: "/v1/members", ...call(opts) });
    return (page?.data ?? []).filter((w): w is Record<string, unknown> => !!w && typeof w === "object").map(memberFromWire);
  }

  /** Adds a member; give them a key with `client.keys.create({ memberId })`. */
  async create(opts: CreateMemberOptions): Promise<Member> {
    if (!opts || typeof opts !== "object") {
      throw new InvalidArgumentError("expected { name, email, role }", { code: "invalid_argument" });
    }
    checkString("name", opts.name);
    checkString("email", opts.email);
    checkRole(opts.role);
    const body: WireBody<"CreateMemberRequest"> = { name: opts.name, email: opts.email, role: opts.role };
    const w = await this.http.request<Record<string, unknown>>({ method: "POST", path: "/v1/members", json: body, ...call(opts) });
    return memberFromWire(w ?? {});
  }

  /** One member. */
  async get(id: string, opts: CallOptions = {}): Promise<Member> {
    const w = await this.http.request<Record<string, unknown>>({ method: "GET", path: memberPath(id), ...call(opts) });
    return memberFromWire(w ?? {});
  }

  /**
   * Renames a member or changes their role: what every key of theirs may do changes at once.
   * The last owner keeps the owner role ({@link ConflictError}).
   */
  async update(id: string, opts: UpdateMemberOptions = {}): Promise<Member> {
    const path = memberPath(id);
    const body: WireBody<"UpdateMemberRequest"> = {};
    if (opts.name !== undefined) {
      checkString("name", opts.name);
      body.name = opts.name;
    }
    if (opts.role !== undefined) {
      checkRole(opts.role);
      body.role = opts.role;
    }
    const w = await this.http.request<Record<string, unknown>>({ method: "PATCH", path, json: body, ...call(opts) });
    return memberFromWire(w ?? {});
  }

  /** Removes a member: their keys are revoked at once. The last owner stays ({@link ConflictError}). */
  async delete(id: string, opts: CallOptions = {}): Promise<void> {
    await this.http.request({ method: "DELETE", path: memberPath(id), responseType: "none", ...call(opts) });
  }
}

function memberPath(id: string): string {
  if (typeof id !== "string" || id === "") {
    throw new InvalidArgumentError(`expected a member id, got ${JSON.stringify(id)}`, { code: "invalid_argument" });
  }
  return `/v1/members/${encodeURIComponent(id)}`;
}

function checkString(field: string, v: unknown): void {
  if (typeof v !== "string" || v === "") {
    throw new InvalidArgumentError(`${field}: a non-empty string, got ${JSON.stringify(v)}`, { code: "invalid_argument" });
  }
}

function checkRole(v: unknown): void {
  if (!ROLES.includes(v as Role)) {
    throw new InvalidArgumentError(`role: one of ${ROLES.join(", ")}, got ${JSON.stringify(v)}`, { code: "invalid_argument" });
  }
}

function call(opts: CallOptions): { timeoutMs?: number; signal?: AbortSignal } {
  const o: { timeoutMs?: number; signal?: AbortSignal } = {};
  if (opts.timeoutMs !== undefined) o.timeoutMs = opts.timeoutMs;
  if (opts.signal !== undefined) o.signal = opts.signal;
  return o;
}
