// Schedules: every page of GET /v1/schedules with each one's cron, time zone, target, next due
// time and latest run; pause/resume, run now, delete; a schedule's run history (state,
// trigger, attempt, exit code, output). `schedule.*` events re-read the schedule they name
// (and its history when open). A run's end has no event, so while the open history has a
// queued or running run it is read again every 3 s (stopped when none is left or the page
// closes). New schedule: a function (with a JSON payload) or a command in a sandbox.

import { api, listAll } from "../api.js";
import { onEvents } from "../events.js";
import {
  h, announce, page, dataTable, actionButton, field, input, select, textarea, formCard, when,
  stateBadge, path, link, rowRefresher,
} from "../ui.js";
import { duration, listEnriched } from "./appkit.js";

function targetText(t) {
  if (!t) return "";
  if (t.type === "function") return link(`#/functions/${encodeURIComponent(t.name)}`, `function ${t.name}`);
  return h("span", {}, `command in ${t.template}: `, h("code", { class: "mono" }, t.command.length > 60 ? t.command.slice(0, 60) + "…" : t.command));
}

async function readSchedule(name) {
  const [s, runs] = await Promise.all([
    api("GET", path("/v1/schedules", name)),
    api("GET", path("/v1/schedules", name, "runs") + "?limit=1"),
  ]);
  return { ...s, last: runs.data[0] || null };
}

export function render(main) {
  const { body, errors } = page(main, "Schedules");
  const cleanups = [];
  const historyBox = h("section", { class: "card", hidden: true, "aria-labelledby": "history-title" });
  let historyOf = null;
  let historyTimer = null;

  const table = dataTable({
    caption: "Schedules of this workspace",
    empty: "No schedules yet.",
    key: (s) => s.name,
    columns: [
      { label: "Name", cell: (s) => s.name },
      { label: "Cron", class: "mono", cell: (s) => s.cron },
      { label: "Time zone", cell: (s) => s.timezone },
      { label: "Target", cell: (s) => targetText(s.target) },
      { label: "Next run", cell: (s) => (s.paused ? stateBadge("paused") : s.next_run_at ? when(s.next_run_at) : "") },
      {
        label: "Last result",
        cell: (s) => (s.last ? h("span", {}, stateBadge(s.last.state), " ", when(s.last.due_at)) : h("span", { class: "muted" }, "no runs yet")),
      },
      {
        label: "Actions",
        cell: (s) =>
          h("span", { class: "actions" },
            actionButton("Run now", async () => {
              const r = await api("POST", path("/v1/schedules", s.name, "run"));
              announce(`Run of ${s.name}: ${r.state}`);
              await refresh(s.name);
              showHistory(s.name);
            }, { errors, kind: "small", ariaLabel: `Run ${s.name} now` }),
            actionButton(s.paused ? "Resume" : "Pause", async () => {
              const next = await api("POST", path("/v1/schedules", s.name, s.paused ? "resume" : "pause"));
              table.upsert({ ...next, last: s.last });
              announce(`${s.name} ${next.paused ? "paused" : "resumed"}`);
            }, { errors, kind: "ghost small", ariaLabel: `${s.paused ? "Resume" : "Pause"} ${s.name}` }),
            h("button", { type: "button", class: "ghost small", "aria-label": `History of ${s.name}`, onclick: () => showHistory(s.name, true) }, "History"),
            actionButton("Delete", async () => {
              await api("DELETE", path("/v1/schedules", s.name));
              table.remove(s.name);
              if (historyOf === s.name) closeHistory();
              announce(`Schedule ${s.name} deleted`);
            }, { errors, danger: true, kind: "small", confirm: `Delete schedule ${s.name} and its history? Runs under way are cancelled.`, ariaLabel: `Delete schedule ${s.name}` })),
      },
    ],
  });

  const runs = dataTable({
    caption: "Runs, newest first",
    empty: "No runs yet.",
    columns: [
      { label: "Due", cell: (r) => when(r.due_at) },
      { label: "Trigger", cell: (r) => r.trigger },
      { label: "State", cell: (r) => stateBadge(r.state) },
      { label: "Attempt", cell: (r) => String(r.attempt) },
      { label: "Exit code", cell: (r) => (r.exit_code ?? "") + "" },
      { label: "Took", cell: (r) => (r.started_at && r.ended_at ? duration(new Date(r.ended_at) - new Date(r.started_at)) : "") },
      {
        label: "Output",
        class: "meta",
        cell: (r) =>
          r.output || r.error
            ? h("details", {}, h("summary", {}, r.error ? "error and output" : "output"), r.error ? h("p", { class: "error-text small" }, r.error) : null, r.output ? h("pre", { class: "log" }, r.output) : null)
            : "",
      },
    ],
  });

  function closeHistory() {
    historyOf = null;
    clearTimeout(historyTimer);
    historyBox.hidden = true;
  }
  async function showHistory(name, focus) {
    clearTimeout(historyTimer);
    historyOf = name;
    historyBox.hidden = false;
    const heading = h("h2", { id: "history-title", tabindex: "-1" }, `History of ${name}`);
    historyBox.replaceChildren(
      h("div", { class: "head" }, heading, h("button", { type: "button", class: "ghost small", onclick: closeHistory }, "Close")),
      runs.el,
    );
    if (focus) heading.focus();
    try {
      const list = await api("GET", path("/v1/schedules", name, "runs") + "?limit=50");
      if (historyOf !== name) return;
      runs.set(list.data);
      if (list.data.some((r) => r.state === "queued" || r.state === "running")) {
        historyTimer = setTimeout(async () => {
          if (historyOf !== name) return;
          await refresh(name);
          showHistory(name);
        }, 3000);
      }
    } catch (e) {
      errors.show(e);
    }
  }
  cleanups.push(closeHistory);

  body.append(newScheduleForm(errors, (s) => table.upsert(s)), h("h2", { class: "section" }, "All schedules"), table.el, historyBox);

  const refresh = rowRefresher(table, readSchedule, errors);
  cleanups.push(
    onEvents(["schedule.*"], (e) => {
      if (e.resource?.kind !== "schedule") return;
      refresh(e.resource.id);
      if (historyOf === e.resource.id) showHistory(historyOf);
    }),
  );
  listEnriched(
    "/v1/schedules",
    table,
    async (s) => {
      s.last = (await api("GET", path("/v1/schedules", s.name, "runs") + "?limit=1")).data[0] || null;
    },
    errors,
    "schedules",
  ).catch((e) => errors.show(e));
  return () => cleanups.forEach((c) => c());
}

function timeZones() {
  try {
    return Intl.supportedValuesOf("timeZone");
  } catch {
    return ["UTC"];
  }
}

function newScheduleForm(errors, created) {
  const name = input({ name: "name", required: true, pattern: "[a-z]([a-z0-9\\-]{0,61}[a-z0-9])?", maxlength: "63", autocomplete: "off", spellcheck: "false" });
  const cron = input({ name: "cron", required: true, value: "*/5 * * * *", class: "mono", autocomplete: "off", spellcheck: "false" });
  const zones = h("datalist", { id: "tz-list" }, ["UTC", ...timeZones().filter((z) => z !== "UTC")].map((z) => h("option", { value: z })));
  const tz = input({ name: "timezone", value: "UTC", list: "tz-list", autocomplete: "off", spellcheck: "false" });
  const kind = select([
    { value: "function", label: "Call a function" },
    { value: "sandbox_exec", label: "Run a command in a new sandbox" },
  ], { name: "target-type" });
  const fn = select([], { name: "function" });
  const template = input({ name: "template", value: "minimal", autocomplete: "off" });
  const command = input({ name: "command", value: 'echo "$PANDASTACK_PAYLOAD"', class: "mono", autocomplete: "off", spellcheck: "false" });
  const payload = textarea({ name: "payload", rows: 3, spellcheck: "false", class: "mono" });
  payload.value = '{"source": "schedule"}';
  const policy = select(["allow", "forbid", "replace"], { name: "policy" });
  const retries = input({ type: "number", name: "retries", min: "0", max: "10", value: "0", inputmode: "numeric" });
  const paused = h("input", { type: "checkbox", name: "paused", id: "sched-paused" });

  const fnField = field("Function", fn);
  const tplField = field("Template", template);
  const cmdField = field("Command (/bin/sh -c; the payload is $PANDASTACK_PAYLOAD)", command);
  const showTarget = () => {
    const isFn = kind.value === "function";
    fnField.hidden = !isFn;
    tplField.hidden = isFn;
    cmdField.hidden = isFn;
  };
  kind.addEventListener("change", showTarget);
  showTarget();
  listAll("/v1/functions")
    .then((all) => {
      fn.replaceChildren(...(all.length ? all.map((f) => h("option", { value: f.name }, f.name)) : [h("option", { value: "" }, "no functions yet")]));
    })
    .catch((e) => errors.show(e));

  return formCard(
    "New schedule",
    [
      zones,
      h("div", { class: "form-row" },
        field("Name", name),
        field("Cron expression", cron, "5 fields (minute hour day month weekday), 6 with seconds first, or @hourly, @daily…"),
        field("Time zone (IANA)", tz)),
      h("div", { class: "form-row" }, field("Target", kind), fnField, tplField, cmdField),
      h("div", { class: "form-row" },
        field("Payload (JSON)", payload, "The function's event, or $PANDASTACK_PAYLOAD"),
        field("While a run is under way", policy, "allow: run too; forbid: skip; replace: cancel it"),
        field("Retries", retries)),
      h("div", { class: "check" }, paused, h("label", { for: "sched-paused" }, "Create it paused")),
    ],
    async () => {
      let body;
      try {
        body = payload.value.trim() ? JSON.parse(payload.value) : null;
      } catch (e) {
        throw new Error(`Payload: not JSON (${e.message})`);
      }
      const target = kind.value === "function"
        ? { type: "function", name: fn.value }
        : { type: "sandbox_exec", template: template.value.trim(), command: command.value };
      if (target.type === "function" && !target.name) throw new Error("Target: create a function first, or run a command");
      const s = await api("POST", "/v1/schedules", {
        name: name.value.trim(),
        cron: cron.value.trim(),
        timezone: tz.value.trim() || "UTC",
        target,
        payload: body,
        concurrency_policy: policy.value,
        retries: Number(retries.value || 0),
        paused: paused.checked,
      });
      created({ ...s, last: null });
      announce(`Schedule ${s.name} created`);
      name.value = "";
    },
    { errors, inline: false },
  );
}
