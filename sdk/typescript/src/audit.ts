/**
 * `client.audit`: the workspace's audit log, newest first: every state-changing call with who
 * made it (key and member), the operation, the resource, the result and the caller's address,
 * refused calls too (reads are not recorded). A page at a time or every row:
 *
 * ```ts
 * for await (const row of client.audit.list({ action: "create_member", since: new Date(Date.now() - 86_400_000) })) {
 *   console.log(row.at, row.keyName, row.action, row.resource, row.result);
 * }
 * const { data, nextCursor } = await client.audit.list({ limit: 50 }).firstPage();
 * ```
 *
 * Reading it needs the scope `audit:read` (owners' and admins' keys, and workspace keys with
 * `*`); another key throws {@link PermissionDeniedError} naming it. Rows are kept for the
 * server's retention (90 days unless its operator says otherwise). A call is recorded off its
 * request's path: a row may show up a moment after the call returned.
 */

import { InvalidArgumentError } from "./errors.js";
import type { HttpClient } from "./http.js";
import { Paginator, type Page } from "./pagination.js";
import type { CallOptions } from "./sandbox.js";
import { auditEntryFromWire, type AuditEntry } from "./types.js";

/** Options of {@link Audit.list}. */
export interface ListAuditOptions extends CallOptions {
  /** Page size (1-1000, default 100). */
  limit?: number;
  /** Start after this cursor (from a previous page's `nextCursor`). */
  cursor?: string;
  /** Only calls made with this key (its id). */
  keyId?: string;
  /** Only calls on the resource with this id or name. */
  resourceId?: string;
  /** Only this operation, as the OpenAPI document names it (`create_sandbox`, `delete_member`, …). */
  action?: string;
  /** Only calls at or after this time (an RFC 3339 string or a `Date`). */
  since?: string | Date;
}

export class Audit {
  /** @internal */
  constructor(private readonly http: HttpClient) {}

  /**
   * The audit rows, newest first, fetched page by page as you iterate (`firstPage()` for one
   * page with its `nextCursor`).
   */
  list(opts: ListAuditOptions = {}): Paginator<AuditEntry> {
    const since = sinceToWire(opts.since);
    return new Paginator<AuditEntry>(async (cursor) => {
      const page = await this.http.request<{ data?: unknown[]; next_cursor?: string | null }>({
        method: "GET",
        path: "/v1/audit",
        query: {
          limit: opts.limit,
          cursor,
          key_id: opts.keyId,
          resource_id: opts.resourceId,
          action: opts.action,
          since,
        },
        ...call(opts),
      });
      const out: Page<AuditEntry> = {
        data: (page?.data ?? []).filter(isObject).map((w) => auditEntryFromWire(w)),
        nextCursor: typeof page?.next_cursor === "string" && page.next_cursor ? page.next_cursor : null,
      };
      return out;
    }, opts.cursor);
  }
}

function sinceToWire(since: string | Date | undefined): string | undefined {
  if (since === undefined) return undefined;
  if (since instanceof Date) {
    if (Number.isNaN(since.getTime())) {
      throw new InvalidArgumentError("since: an invalid Date", { code: "invalid_argument" });
    }
    return since.toISOString();
  }
  if (typeof since !== "string" || since === "") {
    throw new InvalidArgumentError(`since: an RFC 3339 string or a Date, got ${JSON.stringify(since)}`, { code: "invalid_argument" });
  }
  return since;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return !!v && typeof v === "object" && !Array.isArray(v);
}

function call(opts: CallOptions): { timeoutMs?: number; signal?: AbortSignal } {
  const o: { timeoutMs?: number; signal?: AbortSignal } = {};
  if (opts.timeoutMs !== undefined) o.timeoutMs = opts.timeoutMs;
  if (opts.signal !== undefined) o.signal = opts.signal;
  return o;
}
