/**
 * `client.volumes`: durable volumes that outlive sandboxes, their snapshots and their backups
 * to the object store. A volume is mounted by naming it in `volumes` of
 * {@link Sandboxes.create}; what a sandbox writes there stays when the sandbox is gone, for the
 * next sandbox that mounts it:
 *
 * ```ts
 * await client.volumes.create({ name: "ws", sizeGb: 10 });
 * const sb = await client.sandboxes.create({ volumes: [{ name: "ws", path: "/workspace" }] });
 * ```
 */

import { InvalidArgumentError, VolumeBackupError, VolumeBackupTimeoutError } from "./errors.js";
import type { HttpClient } from "./http.js";
import { Paginator, type Page } from "./pagination.js";
import { LONG_OPERATION_TIMEOUT_MS, type CallOptions } from "./sandbox.js";
import {
  volumeBackupFromWire,
  volumeFromWire,
  volumeSnapshotFromWire,
  type VolumeBackupInfo,
  type VolumeInfo,
  type VolumeMount,
  type VolumeSnapshotInfo,
} from "./types.js";
import type { WireBody } from "./wire.js";

/** Options of {@link Volumes.create}. */
export interface CreateVolumeOptions extends CallOptions {
  /** 1-63 of `[a-z0-9-]`, starting with a letter or digit. */
  name: string;
  /** Size in GiB (1-1024): required for an empty volume; with a source, grows it to this size. */
  sizeGb?: number;
  /** Start from this volume snapshot (`vs-…`). */
  fromSnapshot?: string;
  /** Start from this backup (`vb-…`), on any host. */
  fromBackup?: string;
  /** Default: a fresh random key, reused on retries, so a retried create never makes two. */
  idempotencyKey?: string;
}

/** Paging of the volume lists. */
export interface ListVolumesOptions extends CallOptions {
  /** Page size. */
  limit?: number;
  /** Start after this cursor (from a previous page's `nextCursor`). */
  cursor?: string;
}

/** Options of {@link Volumes.waitBackup} (and of {@link Volumes.backup} with `wait`). */
export interface WaitBackupOptions extends CallOptions {
  /** Give up after this long: {@link VolumeBackupTimeoutError} (the upload goes on). Default 3600. */
  timeoutSeconds?: number;
  /** Pause between two polls, milliseconds (default 500). */
  pollMs?: number;
}

/** Options of {@link Volumes.backup}. */
export interface BackupOptions extends WaitBackupOptions {
  /** Resolve once the upload has ended (`done`; `failed` throws {@link VolumeBackupError}) instead of at once. */
  wait?: boolean;
}

const DEFAULT_BACKUP_TIMEOUT_SECONDS = 3600;
const DEFAULT_BACKUP_POLL_MS = 500;

export class Volumes {
  /** @internal */
  constructor(
    private readonly http: HttpClient,
    private readonly newIdempotencyKey: () => Promise<string>,
  ) {}

  /**
   * Creates a volume: empty (`sizeGb`), or restored from a volume snapshot (`fromSnapshot`) or
   * a backup (`fromBackup`). A name in use throws {@link ConflictError}; a bad name or size
   * {@link InvalidArgumentError}; the workspace's quota {@link QuotaExceededError}.
   */
  async create(opts: CreateVolumeOptions): Promise<VolumeInfo> {
    if (typeof opts?.name !== "string" || opts.name === "") {
      throw new InvalidArgumentError("name: the volume's name", { code: "invalid_argument" });
    }
    if (opts.fromSnapshot !== undefined && opts.fromBackup !== undefined) {
      throw new InvalidArgumentError("give fromSnapshot or fromBackup, not both", { code: "invalid_argument" });
    }
    const body: WireBody<"CreateVolumeRequest"> = { name: opts.name };
    if (opts.sizeGb !== undefined) body.size_gb = opts.sizeGb;
    if (opts.fromSnapshot !== undefined) body.from_snapshot = opts.fromSnapshot;
    if (opts.fromBackup !== undefined) body.from_backup = opts.fromBackup;
    const w = await this.http.request<Record<string, unknown>>({
      method: "POST",
      path: "/v1/volumes",
      json: body,
      idempotencyKey: opts.idempotencyKey ?? (await this.newIdempotencyKey()),
      retry: "safe",
      timeoutMs: opts.timeoutMs ?? Math.max(this.http.timeoutMs, LONG_OPERATION_TIMEOUT_MS),
      ...(opts.signal ? { signal: opts.signal } : {}),
    });
    return volumeFromWire(w ?? {});
  }

  /** The workspace's volumes, fetched page by page as you iterate. */
  list(opts: ListVolumesOptions = {}): Paginator<VolumeInfo> {
    return this.paginate("/v1/volumes", opts, volumeFromWire);
  }

  /** One volume; throws {@link NotFoundError} (`volume_not_found`) if there is none. */
  async get(name: string, opts: CallOptions = {}): Promise<VolumeInfo> {
    const w = await this.http.request<Record<string, unknown>>({ method: "GET", path: volumePath(name), ...call(opts) });
    return volumeFromWire(w ?? {});
  }

  /** Grows a volume to `sizeGb` GiB (never shrinks); throws {@link VolumeBusyError} while a sandbox has it mounted. */
  async grow(name: string, sizeGb: number, opts: CallOptions = {}): Promise<VolumeInfo> {
    const w = await this.http.request<Record<string, unknown>>({
      method: "PATCH",
      path: volumePath(name),
      json: { size_gb: sizeGb } satisfies WireBody<"PatchVolumeRequest">,
      ...call(opts),
    });
    return volumeFromWire(w ?? {});
  }

  /**
   * Deletes a volume (its backups stay in the object store); false if it did not exist. Throws
   * {@link VolumeBusyError} while a sandbox has it mounted read-write.
   */
  async delete(name: string, opts: CallOptions = {}): Promise<boolean> {
    return gone(this.http.request({ method: "DELETE", path: volumePath(name), responseType: "none", ...call(opts) }));
  }

  /** Snapshots a volume (a sandbox writing to it has its file system frozen for the instant of the copy). */
  async snapshot(name: string, opts: CallOptions = {}): Promise<VolumeSnapshotInfo> {
    const w = await this.http.request<Record<string, unknown>>({
      method: "POST",
      path: volumePath(name, "/snapshots"),
      timeoutMs: opts.timeoutMs ?? Math.max(this.http.timeoutMs, LONG_OPERATION_TIMEOUT_MS),
      ...(opts.signal ? { signal: opts.signal } : {}),
    });
    return volumeSnapshotFromWire(w ?? {});
  }

  /** The volume's snapshots. */
  snapshots(name: string, opts: CallOptions = {}): Paginator<VolumeSnapshotInfo> {
    return this.paginate(volumePath(name, "/snapshots"), opts, volumeSnapshotFromWire);
  }

  /** Deletes a volume snapshot; false if it did not exist. */
  async deleteSnapshot(name: string, snapshotId: string, opts: CallOptions = {}): Promise<boolean> {
    return gone(
      this.http.request({
        method: "DELETE",
        path: volumePath(name, `/snapshots/${segment(snapshotId, "snapshot id")}`),
        responseType: "none",
        ...call(opts),
      }),
    );
  }

  /**
   * Backs a volume up to the object store: a snapshot is taken at once and uploaded in the
   * background (only chunks no earlier backup stored). Resolves with the backup `uploading`;
   * with `wait: true`, once it is `done` (see {@link waitBackup}).
   */
  async backup(name: string, opts: BackupOptions = {}): Promise<VolumeBackupInfo> {
    const w = await this.http.request<Record<string, unknown>>({
      method: "POST",
      path: volumePath(name, "/backups"),
      timeoutMs: opts.timeoutMs ?? Math.max(this.http.timeoutMs, LONG_OPERATION_TIMEOUT_MS),
      ...(opts.signal ? { signal: opts.signal } : {}),
    });
    const started = volumeBackupFromWire(w ?? {});
    if (!opts.wait) return started;
    return this.waitBackup(name, started.id, opts);
  }

  /** The volume's backups, also after the volume was deleted (they live in the object store). */
  backups(name: string, opts: CallOptions = {}): Paginator<VolumeBackupInfo> {
    return this.paginate(volumePath(name, "/backups"), opts, volumeBackupFromWire);
  }

  /** One backup of the volume, as it is now. */
  async getBackup(name: string, backupId: string, opts: CallOptions = {}): Promise<VolumeBackupInfo> {
    const w = await this.http.request<Record<string, unknown>>({
      method: "GET",
      path: volumePath(name, `/backups/${segment(backupId, "backup id")}`),
      ...call(opts),
    });
    return volumeBackupFromWire(w ?? {});
  }

  /**
   * Polls a backup until its upload has ended and resolves with it `done`. A backup that ends
   * `failed` throws {@link VolumeBackupError}; one still uploading after `timeoutSeconds`
   * (default 3600) {@link VolumeBackupTimeoutError} (the upload goes on).
   */
  async waitBackup(name: string, backupId: string, opts: WaitBackupOptions = {}): Promise<VolumeBackupInfo> {
    const timeoutSeconds = opts.timeoutSeconds ?? DEFAULT_BACKUP_TIMEOUT_SECONDS;
    const deadline = Date.now() + timeoutSeconds * 1000;
    const poll = opts.pollMs ?? DEFAULT_BACKUP_POLL_MS;
    const callOpts: CallOptions = {};
    if (opts.timeoutMs !== undefined) callOpts.timeoutMs = opts.timeoutMs;
    if (opts.signal !== undefined) callOpts.signal = opts.signal;
    for (;;) {
      const b = await this.getBackup(name, backupId, callOpts);
      if (b.state === "failed") {
        throw new VolumeBackupError(`backup ${b.id} of volume ${name} failed: ${b.error ?? "no reason given"}`, b);
      }
      if (b.state !== "uploading") return b;
      if (Date.now() >= deadline) {
        throw new VolumeBackupTimeoutError(
          `backup ${b.id} of volume ${name} still uploading after timeoutSeconds=${timeoutSeconds}; the upload goes on on the server (volumes.getBackup shows its state)`,
          b,
        );
      }
      await sleep(Math.max(0, Math.min(poll, deadline - Date.now())), opts.signal);
    }
  }

  private paginate<T>(path: string, opts: ListVolumesOptions, map: (w: Record<string, unknown>) => T): Paginator<T> {
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

/** The `volumes` of a create request, each entry checked for shape (the server checks names, paths and counts). @internal */
export function volumeMountsToWire(volumes: VolumeMount[]): WireBody<"SandboxVolume">[] {
  if (!Array.isArray(volumes)) {
    throw new InvalidArgumentError("volumes: an array of { name, path, readOnly? }", { code: "invalid_argument" });
  }
  return volumes.map((v, i) => {
    if (!v || typeof v.name !== "string" || typeof v.path !== "string") {
      throw new InvalidArgumentError(`volumes[${i}]: { name, path, readOnly? } with string name and path`, { code: "invalid_argument" });
    }
    return { name: v.name, path: v.path, read_only: v.readOnly === true };
  });
}

function segment(s: string, what: string): string {
  if (typeof s !== "string" || s === "") {
    throw new InvalidArgumentError(`expected a ${what}, got ${JSON.stringify(s)}`, { code: "invalid_argument" });
  }
  return encodeURIComponent(s);
}

function volumePath(name: string, rest = ""): string {
  return `/v1/volumes/${segment(name, "volume name")}${rest}`;
}

/** true once the call succeeded, false if it answered 404. */
async function gone(p: Promise<unknown>): Promise<boolean> {
  try {
    await p;
    return true;
  } catch (e) {
    if ((e as { status?: number })?.status === 404) return false;
    throw e;
  }
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
