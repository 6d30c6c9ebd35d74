// PandaStack's static file server for app hosting: `node static-server.mjs <dir>` serves <dir>
// on $PORT (default 8080) on all interfaces, GET and HEAD only. A directory serves its
// index.html; a path that names no file and has no extension gets <dir>/index.html (single-page
// apps). Nothing outside <dir> is served: paths are decoded and resolved before the check, and
// so are symlinks; dot-files (.git, .env) are not served either, except /.well-known/.
// A deploy's files do not change while it serves, so what a path resolves to is kept in memory
// after its first request, with the bytes of small files (≤ 256 KiB each, 32 MiB in all): a
// request after a wake from hibernation does no file system work (each call is a trip through
// libuv's thread pool, slow in a VM whose translated code starts empty under TCG).
// No dependencies. The app template installs it as /usr/local/lib/pandastack/static-server.mjs:
// templates/app.toml holds a copy, which a test in apps/detect/tests/mod.rs keeps identical to this file.
import { createServer, STATUS_CODES } from "node:http";
import { createReadStream } from "node:fs";
import { readFile, realpath, stat } from "node:fs/promises";
import { extname, join, resolve, sep } from "node:path";

const TYPES = {
  ".html": "text/html; charset=utf-8", ".htm": "text/html; charset=utf-8",
  ".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8",
  ".mjs": "text/javascript; charset=utf-8", ".json": "application/json",
  ".map": "application/json", ".txt": "text/plain; charset=utf-8", ".xml": "application/xml",
  ".webmanifest": "application/manifest+json", ".wasm": "application/wasm",
  ".svg": "image/svg+xml", ".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg",
  ".gif": "image/gif", ".webp": "image/webp", ".avif": "image/avif", ".ico": "image/x-icon",
  ".woff": "font/woff", ".woff2": "font/woff2", ".ttf": "font/ttf", ".otf": "font/otf",
  ".mp4": "video/mp4", ".webm": "video/webm", ".mp3": "audio/mpeg", ".pdf": "application/pdf",
};

const dir = process.argv[2] ?? ".";
const root = await realpath(resolve(dir)).catch(() => {
  console.error(`static-server: ${dir}: no such directory`);
  process.exit(1);
});
const inside = (p) => p === root || p.startsWith(root.endsWith(sep) ? root : root + sep);

// What a decoded URL path names under root: { file, size }, { dir }, { missing } or { refused }.
async function lookup(path) {
  const full = join(root, path);
  if (!inside(full)) return { refused: true };
  let real;
  try { real = await realpath(full); } catch { return { missing: true }; }
  if (!inside(real)) return { refused: true };
  const st = await stat(real);
  if (st.isDirectory()) return { dir: real };
  return st.isFile() ? { file: real, size: st.size } : { refused: true };
}

const MAX_CACHED_FILE = 256 * 1024;
const MAX_CACHED_BYTES = 32 * 1024 * 1024;
const MAX_CACHED_PATHS = 10000;
const served = new Map(); // decoded URL path -> { file, size, headers }
const bodies = new Map(); // real file path -> Buffer
let cachedBytes = 0;

// The answer to a path that names a file: its headers and, for a small file, its bytes.
async function answer(found) {
  const headers = {
    "Content-Type": TYPES[extname(found.file).toLowerCase()] ?? "application/octet-stream",
    "Content-Length": found.size,
    "X-Content-Type-Options": "nosniff",
  };
  if (found.file.endsWith(sep + "index.html")) headers["Cache-Control"] = "no-cache";
  let body = bodies.get(found.file);
  if (!body && found.size <= MAX_CACHED_FILE && cachedBytes + found.size <= MAX_CACHED_BYTES) {
    body = await readFile(found.file).catch(() => undefined);
    if (body && body.length === found.size) {
      bodies.set(found.file, body);
      cachedBytes += body.length;
    } else {
      body = undefined;
    }
  }
  return { file: found.file, headers, body };
}

function send(res, status, headers = {}) {
  res.writeHead(status, { "Content-Type": "text/plain; charset=utf-8", ...headers });
  res.end(`${STATUS_CODES[status]}\n`); // Node sends no body for HEAD
}

async function handle(req, res) {
  if (req.method !== "GET" && req.method !== "HEAD") return send(res, 405, { Allow: "GET, HEAD" });
  const url = new URL(req.url, "http://localhost");
  let path;
  try { path = decodeURIComponent(url.pathname); } catch { return send(res, 400); }
  if (path.includes("\0")) return send(res, 400);
  if (path.split("/").some((s) => s.startsWith(".") && s !== ".well-known")) return send(res, 404);
  let hit = served.get(path);
  if (!hit) {
    const found = await resolvePath(url, path);
    if (!found.file) return send(res, found.status, found.headers);
    hit = await answer(found);
    if (served.size < MAX_CACHED_PATHS) served.set(path, hit);
  }
  res.writeHead(200, hit.headers);
  if (req.method === "HEAD") return res.end();
  if (hit.body) return res.end(hit.body);
  createReadStream(hit.file).on("error", () => res.destroy()).pipe(res);
}

// What `path` serves: { file, size }, or { status, headers } for an answer without a file.
async function resolvePath(url, path) {
  let found = await lookup(path);
  if (found.dir) {
    const clean = "/" + url.pathname.replace(/^\/+/, ""); // never `//host`: no open redirect
    if (!clean.endsWith("/")) return { status: 301, headers: { Location: clean + "/" + url.search } };
    found = await lookup(join(path, "index.html"));
    if (found.dir) found = { missing: true };
  }
  if (found.missing && extname(path) === "") found = await lookup("/index.html");
  return found.file ? found : { status: 404 };
}

const server = createServer((req, res) => {
  handle(req, res).catch(() => (res.headersSent ? res.destroy() : send(res, 500)));
});
const port = process.env.PORT ? Number(process.env.PORT) : 8080;
server.listen(port, () => console.log(`static-server: ${root} on port ${port}`));
process.on("SIGTERM", () => process.exit(0));
