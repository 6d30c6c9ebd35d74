// One function (`#/functions/<name>`): its settings and public URL, invoke with a JSON body
// (checked as it is typed; the outcome's status, result, error, output and time), the calls
// made from this page, its versions (each one's phases and build log; a new build; making an
// earlier version live), and delete. `deploy.*` and `function.version_live` events about it
// re-read it and its versions.

import { api, ApiError } from "../api.js";
import { onEvents } from "../events.js";
import {
  h, announce, page, dataTable, actionButton, field, textarea, link, when, stateBadge, path,
  copyButton, newId, kv,
} from "../ui.js";
import { getText, duration, phaseTimeline, phaseRows, pretty, fill, coalesced } from "./appkit.js";

export function render(main, params) {
  const name = params.id;
  const base = path("/v1/functions", name);
  const slot = h("span");
  const { body, errors } = page(main, `Function ${name}`, { crumbs: [["#/functions", "Functions"]], actions: [slot] });
  slot.replaceWith(
    actionButton("Delete function", async () => {
      await api("DELETE", base);
      announce(`Function ${name} deleted`);
      location.hash = "#/functions";
    }, { errors, danger: true, confirm: `Delete function ${name}, its versions and instances? This cannot be undone.` }),
  );
  let fn = null;
  let versions = [];
  let shown = null; // version number whose details are open
  const cleanups = [];

  const overview = h("div");
  const invokeSection = h("section", { class: "card stack", "aria-labelledby": "invoke-title" });
  const callsSection = h("section", { "aria-labelledby": "calls-title" });
  const versionsSection = h("section", { "aria-labelledby": "versions-title" });
  body.append(overview, invokeSection, callsSection, versionsSection);

  function renderOverview() {
    const publicToggle = actionButton(
      fn.public ? "Make private" : "Make public",
      async () => {
        fn = await api("PATCH", base, { public: !fn.public });
        renderOverview();
        announce(fn.public ? "The function's URL is public" : "The function's URL is private");
      },
      { errors, kind: "ghost small", confirm: fn.public ? null : `Let anyone call ${fn.url} without a key?` },
    );
    overview.replaceChildren(
      kv([
        ["Runtime", `${fn.runtime} · handler ${fn.handler}`],
        ["Live version", fn.live_version ? `v${fn.live_version}` : "none yet (the first version is building)"],
        [
          "URL",
          h("span", { class: "copyable" },
            fn.public ? h("a", { href: fn.url, target: "_blank", rel: "noopener noreferrer" }, fn.url) : h("span", { class: "mono" }, fn.url),
            fn.public ? copyButton(fn.url, "Function URL") : h("span", { class: "muted small" }, "(private: only POST …/invoke with a key)"),
            publicToggle),
        ],
        ["Limits", `${fn.memory_mb} MiB · ${fn.timeout_seconds} s per call · ${fn.concurrency} at once per instance · at most ${fn.max_instances} instances`],
        ["Warm instances", String(fn.warm_instances)],
        ["Environment", Object.keys(fn.env).length ? Object.keys(fn.env).join(", ") : "none"],
        ["Secrets (names)", fn.secret_names.length ? fn.secret_names.join(", ") : "none"],
        ["Created", when(fn.created_at)],
      ]),
    );
  }

  // --- Invoke --------------------------------------------------------------------------
  const payload = textarea({ name: "payload", rows: 5, spellcheck: "false", class: "mono" });
  payload.value = '{\n  "name": "console"\n}';
  const payloadHelp = h("span", { class: "muted small", id: newId("help"), "aria-live": "polite" });
  const invokeBtn = h("button", { type: "submit" }, "Invoke");
  const outcome = h("div", { class: "outcome", "aria-live": "polite" });
  function checkPayload() {
    try {
      const v = payload.value.trim() === "" ? null : JSON.parse(payload.value);
      payload.removeAttribute("aria-invalid");
      payloadHelp.textContent = "Valid JSON";
      payloadHelp.className = "muted small";
      invokeBtn.disabled = false;
      return { ok: true, value: v };
    } catch (e) {
      payload.setAttribute("aria-invalid", "true");
      payloadHelp.textContent = `Not JSON: ${e.message}`;
      payloadHelp.className = "error-text small";
      invokeBtn.disabled = true;
      return { ok: false };
    }
  }
  payload.addEventListener("input", checkPayload);
  const invokeForm = h(
    "form",
    { class: "stack", "aria-labelledby": "invoke-title" },
    field("Event (JSON body)", payload),
    payloadHelp,
    h("div", { class: "actions" }, invokeBtn),
  );
  payload.setAttribute("aria-describedby", payloadHelp.id);
  invokeForm.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const p = checkPayload();
    if (!p.ok) return;
    errors.clear();
    invokeBtn.disabled = true;
    outcome.replaceChildren(h("p", { class: "muted" }, "Calling…"));
    const started = performance.now();
    try {
      const inv = await api("POST", `${base}/invoke`, p.value);
      const rtt = performance.now() - started;
      showOutcome(inv, rtt);
      calls.upsert({ ...inv, key: `c${++callNo}`, at: new Date().toISOString(), rtt, event: p.value });
      announce(`Call ended: ${inv.status}`);
    } catch (e) {
      outcome.replaceChildren();
      errors.show(e);
    } finally {
      invokeBtn.disabled = false;
    }
  });
  function showOutcome(inv, rtt) {
    fill(outcome, 
      h("h3", {}, "Outcome ", stateBadge(inv.status)),
      kv([
        ["Status", inv.status],
        ["Duration", inv.duration_ms !== null && inv.duration_ms !== undefined ? `${inv.duration_ms.toFixed(1)} ms in the handler${rtt ? `, ${duration(rtt)} round trip` : ""}` : rtt ? `${duration(rtt)} round trip` : ""],
        ["Version", inv.version ? `v${inv.version}${inv.cold ? " (cold start)" : " (warm)"}` : null],
      ]),
      inv.status === "ok" ? [h("h4", {}, "Result"), h("pre", { class: "log result", tabindex: "0", "aria-label": "Result" }, pretty(inv.result))] : null,
      inv.error ? [h("h4", {}, `Error: ${inv.error.type}`), h("p", { class: "error-text" }, inv.error.message), inv.error.traceback ? h("pre", { class: "log", tabindex: "0", "aria-label": "Traceback" }, inv.error.traceback) : null] : null,
      inv.stdout ? [h("h4", {}, "Printed (stdout)"), h("pre", { class: "log", tabindex: "0", "aria-label": "Standard output" }, inv.stdout)] : null,
      inv.stderr ? [h("h4", {}, "Printed (stderr)"), h("pre", { class: "log", tabindex: "0", "aria-label": "Standard error" }, inv.stderr)] : null,
    );
  }
  invokeSection.append(h("h2", { id: "invoke-title" }, "Invoke"), invokeForm, outcome);

  // --- Calls from this page ------------------------------------------------------------
  let callNo = 0;
  const calls = dataTable({
    caption: "Calls made from this page",
    empty: "No calls from this page yet.",
    key: (c) => c.key,
    columns: [
      { label: "When", cell: (c) => when(c.at) },
      { label: "Status", cell: (c) => stateBadge(c.status) },
      { label: "Version", cell: (c) => (c.version ? `v${c.version}` : "") },
      { label: "Handler time", cell: (c) => (c.duration_ms !== null && c.duration_ms !== undefined ? `${c.duration_ms.toFixed(1)} ms` : "") },
      { label: "Cold", cell: (c) => (c.cold ? "yes" : "no") },
      { label: "Event", class: "meta mono", cell: (c) => JSON.stringify(c.event)?.slice(0, 80) ?? "" },
      { label: "Details", cell: (c) => h("button", { type: "button", class: "ghost small", onclick: () => showOutcome(c, c.rtt) }, "Show") },
    ],
  });
  callsSection.append(
    h("h2", { id: "calls-title" }, "Recent calls"),
    h("p", { class: "muted small" }, "The calls made from this page (the API lists no past invocations); what a call printed is in its details."),
    calls.el,
  );

  // --- Versions ------------------------------------------------------------------------
  const versionDetail = h("div", { class: "card", hidden: true });
  const versionTable = dataTable({
    caption: `Versions of ${name}`,
    empty: "No versions yet.",
    key: (v) => String(v.version),
    columns: [
      { label: "Version", cell: (v) => `v${v.version}` },
      { label: "State", cell: (v) => stateBadge(v.state) },
      { label: "Took", cell: (v) => duration(phaseRows(v.phases_ms).total) },
      { label: "Created", cell: (v) => when(v.created_at) },
      { label: "Error", class: "meta", cell: (v) => v.error || "" },
      {
        label: "Actions",
        cell: (v) =>
          h("span", { class: "actions" },
            h("button", { type: "button", class: "ghost small", "aria-label": `Show version ${v.version}`, onclick: () => showVersion(v.version) }, "Show"),
            v.state === "standby"
              ? actionButton("Make live", async () => {
                  const live = await api("POST", `${base}/rollback`, { version: v.version });
                  announce(`Version ${live.version} is live`);
                  await load();
                }, { errors, kind: "small", confirm: `Make version ${v.version} live again?`, ariaLabel: `Make version ${v.version} live` })
              : null),
      },
    ],
  });
  async function showVersion(number) {
    shown = number;
    const v = versions.find((x) => x.version === number);
    if (!v) return;
    const logEl = h("pre", { class: "log", tabindex: "0", role: "log", "aria-label": `Build log of version ${number}` }, "Reading…");
    versionDetail.hidden = false;
    fill(versionDetail, 
      h("h3", { tabindex: "-1" }, `Version ${number} `, stateBadge(v.state)),
      v.error ? h("p", { class: "error-text" }, v.error) : null,
      phaseTimeline(v.phases_ms, { title: `Phases of version ${number}` }),
      h("h4", {}, "Build log"),
      logEl,
    );
    try {
      logEl.textContent = await getText(`${base}/versions/${number}/logs`);
    } catch (e) {
      logEl.textContent = "";
      errors.show(e);
    }
  }
  versionsSection.append(
    h("div", { class: "head" },
      h("h2", { id: "versions-title" }, "Versions"),
      actionButton("Build again", async () => {
        const v = await api("POST", `${base}/versions`, {});
        announce(`Version ${v.version} is building`);
        await load();
      }, { errors, kind: "ghost", confirm: "Build a new version from the same source?" })),
    versionTable.el,
    versionDetail,
  );

  // --- Loading and live updates ---------------------------------------------------------
  async function load() {
    const [f, v] = await Promise.all([api("GET", base), api("GET", `${base}/versions?limit=30`)]);
    fn = f;
    versions = v.data;
    renderOverview();
    versionTable.set(versions);
    if (shown !== null) {
      const cur = versions.find((x) => x.version === shown);
      if (cur && ["queued", "cloning", "building", "baking", "checking", "live", "failed"].includes(cur.state)) showVersion(shown);
    }
  }
  const reload = coalesced(load, (e) => {
    if (e instanceof ApiError && e.status === 404) body.replaceChildren(h("p", {}, `Function ${name} is gone. `, link("#/functions", "All functions")));
    else errors.show(e);
  });
  cleanups.push(
    onEvents(["deploy.*", "function.version_live"], (e) => {
      if (e.resource?.kind === "function" && e.resource.id === name) reload();
    }),
  );
  load().catch((e) => {
    if (e instanceof ApiError && e.status === 404) body.replaceChildren(h("p", {}, `No function named ${name}. `, link("#/functions", "All functions")));
    else errors.show(e);
  });
  checkPayload();
  return () => cleanups.forEach((c) => c());
}
