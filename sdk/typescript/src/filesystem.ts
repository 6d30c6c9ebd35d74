/**
 * Files inside a sandbox (`sandbox.filesystem`, alias `sandbox.files`). Paths are absolute guest
 * paths. Contents travel as raw bytes (`GET/PUT …/fs?path=`), streamed both ways, so large files
 * are fine; `upload`/`download` stream between a local file and the sandbox without holding it
 * in memory.
 */

import { APIConnectionError, NotFoundError, PandaStackError } from "./errors.js";
import type { BodyInit, HttpClient } from "./http.js";
import { Paginator } from "./pagination.js";
import { parseSse } from "./sse.js";
import { fileInfoFromWire, fileUrlFromWire, type FileInfo, type FileUrl, type WatchEvent } from "./types.js";
import type { WireBody } from "./wire.js";

/**
 * Entries per page {@link Filesystem.list} asks for: the most the server returns at once (each
 * page walks the directory again in the guest, so fewer pages cost less).
 */
const LIST_PAGE = 5000;

/** Options every file call accepts. */
export interface FileCallOptions {
  /** Request timeout override in milliseconds (`0`: none). */
  timeoutMs?: number;
  signal?: AbortSignal;
}

/** What {@link Filesystem.write} accepts. */
export type FileContent = string | Uint8Array | ArrayBuffer | Blob | ReadableStream<Uint8Array>;

export interface WriteInfo {
  path: string;
  bytesWritten: number;
}

export class Filesystem {
  /** @internal */
  constructor(private readonly http: HttpClient, private readonly sandboxId: string) {}

  private get base(): string {
    return `/v1/sandboxes/${encodeURIComponent(this.sandboxId)}/fs`;
  }

  /** Reads a file as UTF-8 text. */
  async read(path: string, opts: FileCallOptions = {}): Promise<string> {
    return new TextDecoder("utf-8").decode(await this.readBytes(path, opts));
  }

  /** Reads a file's bytes. */
  async readBytes(path: string, opts: FileCallOptions = {}): Promise<Uint8Array> {
    return this.http.request({
      method: "GET",
      path: this.base,
      query: { path },
      responseType: "bytes",
      ...callOpts(opts),
    });
  }

  /**
   * Opens a file as a byte stream (no request timeout once the response has started; abort
   * with `signal` or by cancelling the stream).
   */
  async readStream(path: string, opts: FileCallOptions = {}): Promise<ReadableStream<Uint8Array>> {
    const res = await this.http.request({
      method: "GET",
      path: this.base,
      query: { path },
      responseType: "stream",
      ...callOpts(opts),
    });
    return res.body ?? new ReadableStream<Uint8Array>({ start: (c) => c.close() });
  }

  /**
   * Writes a file, replacing it atomically; missing parent directories are created. A string is
   * written as UTF-8.
   */
  async write(path: string, content: FileContent, opts: FileCallOptions = {}): Promise<WriteInfo> {
    const replayable = !isReadableStream(content);
    const body: BodyInit =
      typeof content === "string"
        ? new TextEncoder().encode(content)
        : (content as BodyInit);
    const w = await this.http.request<Record<string, unknown>>({
      method: "PUT",
      path: this.base,
      query: { path },
      body,
      retry: replayable ? "safe" : "never",
      ...callOpts(opts),
    });
    return writeInfo(w, path);
  }

  /**
   * Lists a directory (`depth` > 1 descends into subdirectories, up to 10), sorted by path.
   * With `pattern` (a glob such as `"*.py"`, matched against each entry's name) only the
   * matching entries: `list("/app", { depth: 10, pattern: "*.py" })` searches by name. The
   * server answers a page at a time (one answer cannot carry a large directory); this follows
   * `next_cursor` to the last page.
   */
  async list(path: string, opts: FileCallOptions & { depth?: number; pattern?: string } = {}): Promise<FileInfo[]> {
    const pages = new Paginator<FileInfo>(async (cursor) => {
      const page = await this.http.request<{ data?: unknown[]; next_cursor?: unknown }>({
        method: "GET",
        path: `${this.base}/list`,
        query: { path, depth: opts.depth, pattern: opts.pattern || undefined, limit: LIST_PAGE, cursor },
        ...callOpts(opts),
      });
      const next = page?.next_cursor;
      return {
        data: (page?.data ?? []).map((e) => fileInfoFromWire(e as Record<string, unknown>)),
        nextCursor: typeof next === "string" && next ? next : null,
      };
    });
    return pages.toArray();
  }

  /** A file's metadata; throws {@link NotFoundError} if it does not exist. */
  async stat(path: string, opts: FileCallOptions = {}): Promise<FileInfo> {
    const w = await this.http.request<Record<string, unknown>>({
      method: "GET",
      path: `${this.base}/stat`,
      query: { path },
      ...callOpts(opts),
    });
    return fileInfoFromWire(w);
  }

  /** Whether a path exists (a missing sandbox still throws). */
  async exists(path: string, opts: FileCallOptions = {}): Promise<boolean> {
    try {
      await this.stat(path, opts);
      return true;
    } catch (e) {
      if (isMissingPath(e)) return false;
      throw e;
    }
  }

  /** Creates a directory, with its parents unless `parents: false`. */
  async mkdir(path: string, opts: FileCallOptions & { parents?: boolean } = {}): Promise<void> {
    await this.http.request({
      method: "POST",
      path: `${this.base}/mkdir`,
      json: { path, parents: opts.parents ?? true } satisfies WireBody<"MkdirRequest">,
      retry: "safe",
      responseType: "none",
      ...callOpts(opts),
    });
  }

  /**
   * Removes a file or directory (`recursive` for non-empty directories). With `force`, a
   * missing path is not an error.
   */
  async remove(path: string, opts: FileCallOptions & { recursive?: boolean; force?: boolean } = {}): Promise<void> {
    try {
      await this.http.request({
        method: "DELETE",
        path: this.base,
        query: { path, recursive: opts.recursive ? "true" : undefined },
        responseType: "none",
        ...callOpts(opts),
      });
    } catch (e) {
      if (opts.force && isMissingPath(e)) return;
      throw e;
    }
  }

  /**
   * A signed URL that downloads (`method: "GET"`, the default) or uploads (`"PUT"`) the file at
   * `path` without an API key, for `expiresIn` seconds (1 to 604800: 7 days; default 3600) —
   * for a browser, `curl` or another service. Anyone holding it can do that one thing to that
   * one file until it expires.
   */
  async url(
    path: string,
    opts: FileCallOptions & { method?: "GET" | "PUT"; expiresIn?: number } = {},
  ): Promise<FileUrl> {
    const w = await this.http.request<Record<string, unknown>>({
      method: "POST",
      path: `/v1/sandboxes/${encodeURIComponent(this.sandboxId)}/files/url`,
      json: {
        path,
        method: opts.method ?? "GET",
        expires_in: opts.expiresIn ?? 3600,
      } satisfies WireBody<"FileUrlRequest">,
      ...callOpts(opts),
    });
    return fileUrlFromWire(w, this.http.baseUrl);
  }

  /**
   * Watches the directory `path` (every directory below it too with `recursive: true`): yields
   * a `ready` event once the watch is armed, then `create`/`modify`/`delete`/`rename`/`overflow`
   * events as changes happen, until you stop iterating or abort `signal` (which ends the watch),
   * or the watch ends: a deleted sandbox or a directory that went away throws a
   * `PandaStackError` with the server's code. A hibernated sandbox is woken to arm the watch; if
   * it hibernates later the watch waits and yields `ready` again once the sandbox runs.
   *
   * ```ts
   * for await (const ev of sandbox.files.watch("/work", { recursive: true })) console.log(ev.type, ev.path);
   * ```
   */
  async *watch(
    path: string,
    opts: { recursive?: boolean; signal?: AbortSignal } = {},
  ): AsyncGenerator<WatchEvent, void, undefined> {
    const res = await this.http.request({
      method: "GET",
      path: `/v1/sandboxes/${encodeURIComponent(this.sandboxId)}/files/watch`,
      query: { path, recursive: opts.recursive ? "true" : "false" },
      responseType: "stream",
      // The server sends a keep-alive every 15 s; the body has no deadline of its own.
      timeoutMs: 60_000,
      ...(opts.signal ? { signal: opts.signal } : {}),
    });
    const requestId = res.headers.get("x-request-id") ?? undefined;
    if (!res.body) throw new APIConnectionError("file watch: empty response", { code: "stream_incomplete", requestId });
    for await (const msg of parseSse(res.body)) {
      let w: Record<string, unknown>;
      try {
        w = JSON.parse(msg.data) as Record<string, unknown>;
      } catch {
        continue;
      }
      if (msg.event === "error") {
        throw new PandaStackError(`file watch: ${typeof w.message === "string" ? w.message : msg.data}`, {
          code: typeof w.code === "string" ? w.code : "stream_error",
          status: res.status,
          requestId,
        });
      }
      const ev = watchEventFromWire(msg.event, w);
      if (ev) yield ev;
    }
  }

  /** Renames (moves) a path; an existing target is an error unless `overwrite`. */
  async rename(from: string, to: string, opts: FileCallOptions & { overwrite?: boolean } = {}): Promise<void> {
    await this.http.request({
      method: "POST",
      path: `${this.base}/rename`,
      json: { from, to, overwrite: opts.overwrite ?? false } satisfies WireBody<"RenameRequest">,
      retry: "rejected-only",
      responseType: "none",
      ...callOpts(opts),
    });
  }

  /**
   * Streams a local file into the sandbox (Node only). No request timeout unless given.
   */
  async upload(localPath: string, remotePath: string, opts: FileCallOptions = {}): Promise<WriteInfo> {
    const fs = await import("node:fs");
    const { Readable } = await import("node:stream");
    await fs.promises.access(localPath, fs.constants.R_OK);
    const w = await this.http.request<Record<string, unknown>>({
      method: "PUT",
      path: this.base,
      query: { path: remotePath },
      // Reopened on every attempt, so a retried upload starts from the beginning.
      body: () => Readable.toWeb(fs.createReadStream(localPath)) as unknown as ReadableStream<Uint8Array>,
      retry: "safe",
      timeoutMs: opts.timeoutMs ?? 0,
      signal: opts.signal,
    });
    return writeInfo(w, remotePath);
  }

  /**
   * Streams a sandbox file to a local path (Node only), written to a temporary file next to it
   * and renamed into place when complete. Returns the number of bytes written. No request
   * timeout unless given.
   */
  async download(remotePath: string, localPath: string, opts: FileCallOptions = {}): Promise<number> {
    const fs = await import("node:fs");
    const { Readable, Transform } = await import("node:stream");
    const { pipeline } = await import("node:stream/promises");
    const res = await this.http.request({
      method: "GET",
      path: this.base,
      query: { path: remotePath },
      responseType: "stream",
      timeoutMs: opts.timeoutMs ?? 0,
      signal: opts.signal,
    });
    const tmp = `${localPath}.pandastack-${process.pid}-${Date.now().toString(36)}.part`;
    let bytes = 0;
    const count = new Transform({
      transform(chunk: Buffer, _enc, cb) {
        bytes += chunk.length;
        cb(null, chunk);
      },
    });
    try {
      const src = res.body
        ? Readable.fromWeb(res.body as unknown as import("node:stream/web").ReadableStream<Uint8Array>)
        : Readable.from([]);
      await pipeline(src, count, fs.createWriteStream(tmp));
      await fs.promises.rename(tmp, localPath);
    } catch (e) {
      await fs.promises.rm(tmp, { force: true }).catch(() => undefined);
      throw e;
    }
    return bytes;
  }
}

function callOpts(opts: FileCallOptions): { timeoutMs?: number; signal?: AbortSignal } {
  const o: { timeoutMs?: number; signal?: AbortSignal } = {};
  if (opts.timeoutMs !== undefined) o.timeoutMs = opts.timeoutMs;
  if (opts.signal !== undefined) o.signal = opts.signal;
  return o;
}

function writeInfo(w: Record<string, unknown> | undefined, path: string): WriteInfo {
  return {
    path: typeof w?.path === "string" ? w.path : path,
    bytesWritten: typeof w?.bytes_written === "number" ? w.bytes_written : 0,
  };
}

function isReadableStream(b: unknown): b is ReadableStream {
  return typeof b === "object" && b !== null && typeof (b as ReadableStream).getReader === "function";
}

/** A 404 about the path, not about the sandbox. */
function isMissingPath(e: unknown): boolean {
  return e instanceof NotFoundError && e.code !== "sandbox_not_found";
}

const WATCH_TYPES: ReadonlySet<string> = new Set(["ready", "create", "modify", "delete", "rename", "overflow"]);

/** A watch SSE event as a `WatchEvent`; `undefined` for kinds this client does not know. */
function watchEventFromWire(event: string, w: Record<string, unknown>): WatchEvent | undefined {
  if (!WATCH_TYPES.has(event)) return undefined;
  const ev: WatchEvent = {
    type: event as WatchEvent["type"],
    path: typeof w.path === "string" ? w.path : "",
    dir: w.dir === true,
  };
  if (typeof w.from === "string") ev.from = w.from;
  return ev;
}
