// A sandbox's files: browse a directory (`GET …/fs/list?path=&depth=1`, every page), go up by
// the breadcrumbs or to any path, download a file (`GET …/fs?path=`, read as a blob so an error
// is shown rather than saved), upload files (`PUT …/fs?path=<dir>/<name>` with the raw bytes and
// the session's CSRF token), make a folder (`POST …/fs/mkdir`) and delete (`DELETE …/fs?path=`).

import { api, listAll, ApiError } from "./api.js";
import {
  h, announce, actionButton, errorArea, dataTable, field, input, formCard, bytes, path,
} from "./ui.js";

/** A button made small (actionButton's class is danger or kind, not both). */
function small(b) {
  b.classList.add("small");
  return b;
}

/** `join("/a", "b")` → "/a/b"; `join("/", "b")` → "/b". */
function join(dir, name) {
  return dir.endsWith("/") ? dir + name : `${dir}/${name}`;
}

/** The parent directories of `p` as [label, path] from "/" down. */
function crumbsOf(p) {
  const out = [["/", "/"]];
  let acc = "";
  for (const seg of p.split("/").filter(Boolean)) {
    acc += "/" + seg;
    out.push([seg, acc]);
  }
  return out;
}

/** 0o755 and a type → "drwxr-xr-x". */
function modeText(mode, kind) {
  const t = kind === "dir" ? "d" : kind === "symlink" ? "l" : kind === "file" ? "-" : "?";
  let s = "";
  for (let i = 8; i >= 0; i--) s += mode & (1 << i) ? "rwx"[(8 - i) % 3] : "-";
  return `${t}${s} (${(mode & 0o7777).toString(8).padStart(4, "0")})`;
}

/** A request with a raw body or a raw answer, cookie-authenticated, CSRF token on changes;
 * resolves to the Response, rejects with an ApiError read from the envelope. */
async function raw(method, url, csrf, body) {
  const headers = {};
  if (method !== "GET") headers["X-CSRF-Token"] = csrf;
  if (body !== undefined) headers["Content-Type"] = "application/octet-stream";
  let resp;
  try {
    resp = await fetch(url, { method, headers, body, credentials: "same-origin", cache: "no-store" });
  } catch (e) {
    throw new ApiError(0, "network", `the server did not answer (${e.message})`);
  }
  if (resp.ok) return resp;
  let err = null;
  try {
    err = (await resp.json()).error;
  } catch {
    /* not the envelope */
  }
  throw new ApiError(
    resp.status,
    err ? err.code : "http_" + resp.status,
    err ? err.message : `HTTP ${resp.status}`,
    err ? err.request_id : resp.headers.get("X-Request-Id"),
  );
}

/** Renders the files tab into `panel` for sandbox `id`; `csrf` is the session's token. */
export function filesTab(panel, id, { csrf, start = "/root" } = {}) {
  const base = path("/v1/sandboxes", id);
  const fsUrl = (p) => `${base}/fs?path=${encodeURIComponent(p)}`;
  const errors = errorArea();
  let cwd = start;

  const crumbs = h("nav", { class: "crumbs fs-crumbs", "aria-label": "Folder" });
  const goto = input({ name: "path", value: start, autocomplete: "off", spellcheck: "false", class: "mono" });
  const gotoForm = formCard("Go to a folder", [field("Path", goto)], async () => open(goto.value.trim() || "/"), {
    submitLabel: "Open",
    errors,
    inline: false,
  });

  const table = dataTable({
    caption: "Files of the folder",
    key: (f) => f.path,
    empty: "This folder is empty.",
    columns: [
      {
        label: "Name",
        class: "mono",
        cell: (f) =>
          f.type === "dir"
            ? h("button", { type: "button", class: "linklike", onclick: () => go(f.path), "aria-label": `Open folder ${f.name}` }, f.name + "/")
            : f.type === "symlink"
              ? `${f.name} → ${f.symlink_target ?? ""}`
              : f.name,
      },
      { label: "Type", cell: (f) => f.type },
      { label: "Size", cell: (f) => (f.type === "dir" ? "" : bytes(f.size)) },
      { label: "Mode", class: "mono", cell: (f) => modeText(f.mode, f.type) },
      { label: "Modified", cell: (f) => new Date(f.mtime_ms).toLocaleString() },
      {
        label: "Actions",
        cell: (f) =>
          h(
            "div",
            { class: "row-actions" },
            f.type === "file"
              ? actionButton("Download", () => download(f), { errors, kind: "ghost small", ariaLabel: `Download ${f.name}` })
              : null,
            small(actionButton(
              "Delete",
              async () => {
                await raw("DELETE", fsUrl(f.path) + (f.type === "dir" ? "&recursive=true" : ""), csrf);
                table.remove(f.path);
                announce(`${f.name} deleted`);
              },
              {
                errors,
                danger: true,
                confirm: f.type === "dir" ? `Delete the folder ${f.path} and everything in it?` : `Delete ${f.path}?`,
                ariaLabel: `Delete ${f.name}`,
              },
            )),
          ),
      },
    ],
  });

  const files = h("input", { type: "file", multiple: true, name: "files" });
  const upload = formCard(
    "Upload files",
    [field("Files to upload into this folder", files)],
    async () => {
      const list = [...files.files];
      if (list.length === 0) throw new Error("Choose one or more files first.");
      for (const f of list) {
        await raw("PUT", fsUrl(join(cwd, f.name)), csrf, f);
        announce(`Uploaded ${f.name}`);
      }
      files.value = "";
      await load();
    },
    { submitLabel: "Upload", errors, inline: false },
  );

  const folder = input({ name: "folder", autocomplete: "off", spellcheck: "false" });
  const mkdir = formCard(
    "New folder",
    [field("Folder name", folder)],
    async () => {
      const name = folder.value.trim();
      if (!name || name.includes("/")) throw new Error("A folder name, without '/'.");
      await api("POST", `${base}/fs/mkdir`, { path: join(cwd, name), parents: false });
      folder.value = "";
      announce(`Folder ${name} made`);
      await load();
    },
    { submitLabel: "Make", errors, inline: false },
  );

  panel.append(
    errors.el,
    h("div", { class: "fs-tools" }, gotoForm, upload, mkdir),
    crumbs,
    table.el,
  );

  async function download(f) {
    const resp = await raw("GET", fsUrl(f.path), csrf);
    const blob = await resp.blob();
    const url = URL.createObjectURL(blob);
    const a = h("a", { href: url, download: f.name, hidden: true });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10_000);
    announce(`Downloading ${f.name}`);
  }

  function showCrumbs() {
    const parts = crumbsOf(cwd);
    crumbs.replaceChildren(
      h("span", { class: "muted" }, "Folder: "),
      ...parts.flatMap(([label, p], i) => {
        const last = i === parts.length - 1;
        const el = last
          ? h("span", { "aria-current": "location", class: "mono" }, label)
          : h("button", { type: "button", class: "linklike mono", onclick: () => go(p), "aria-label": p === "/" ? "/ (the top folder)" : null }, label);
        return last ? [el] : [el, " › "];
      }),
    );
    goto.value = cwd;
  }

  async function load() {
    const list = await listAll(`${base}/fs/list?path=${encodeURIComponent(cwd)}&depth=1`, 1000);
    // Folders first, then by name.
    list.sort((a, b) => (b.type === "dir") - (a.type === "dir") || a.name.localeCompare(b.name));
    table.set(list);
  }

  async function open(p) {
    const prev = cwd;
    cwd = p.length > 1 ? p.replace(/\/+$/, "") : "/";
    if (!cwd.startsWith("/")) cwd = "/" + cwd;
    errors.clear();
    try {
      await load();
      showCrumbs();
    } catch (e) {
      cwd = prev;
      throw e;
    }
  }

  /** Opens a folder from a click: its errors are shown. */
  function go(p) {
    open(p).catch((e) => errors.show(e));
  }

  open(start).catch((e) => {
    if (e instanceof ApiError && e.status === 404 && start !== "/") {
      open("/").catch((e2) => errors.show(e2));
    } else errors.show(e);
  });
}
