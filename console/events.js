// The workspace's live events: one EventSource (GET /v1/events as Server-Sent Events, the
// session cookie authenticates it) for the whole console, opened at sign-in and closed at
// sign-out. Pages subscribe to event types or `<kind>.*` and get each event's JSON
// `{id, type, resource: {kind, id}, at, data}`; unsubscribing is the returned function.

// Every type the server emits (docs/events.md). EventSource delivers a named event only to
// listeners of that name, so each is listened for.
export const EVENT_TYPES = [
  "sandbox.created", "sandbox.paused", "sandbox.resumed", "sandbox.hibernated",
  "sandbox.woken", "sandbox.expired", "sandbox.killed", "sandbox.lost", "sandbox.forked",
  "sandbox.melted", "snapshot.created", "template.build_succeeded", "template.build_failed",
  "deploy.phase", "deploy.live", "deploy.failed", "deploy.rolled_back", "deploy.log",
  "function.version_live", "database.ready", "database.hibernated", "database.restored",
  "schedule.fired", "schedule.failed",
];

let source = null;
const subscribers = new Set(); // {patterns, fn}
let statusEl = null;
let opened = null; // resolves when the stream is first open (or has given up waiting)

function matches(patterns, type) {
  return patterns.some(
    (p) => p === "*" || p === type || (p.endsWith(".*") && type.startsWith(p.slice(0, -1))),
  );
}

function deliver(ev) {
  let e;
  try {
    e = JSON.parse(ev.data);
  } catch {
    return;
  }
  for (const s of [...subscribers]) {
    if (matches(s.patterns, e.type)) {
      try {
        s.fn(e);
      } catch (err) {
        console.error("event subscriber failed", err);
      }
    }
  }
}

function setStatus(text) {
  if (statusEl) statusEl.textContent = text;
}

/** Opens the stream (once per sign-in); `el` shows whether it is live. */
export function openEvents(el) {
  statusEl = el;
  if (source) return;
  source = new EventSource("/v1/events");
  setStatus("connecting…");
  let markOpen;
  opened = new Promise((resolve) => (markOpen = resolve));
  // A stream that cannot open is not waited for long: pages then list without it.
  setTimeout(() => markOpen(), 3000);
  source.addEventListener("open", () => {
    setStatus("live");
    markOpen();
  });
  source.addEventListener("error", () => setStatus("reconnecting…"));
  for (const t of EVENT_TYPES) source.addEventListener(t, deliver);
  source.addEventListener("message", deliver);
}

/**
 * Resolves once the stream is open: the server streams events from the moment it answered, so
 * a page that lists after this misses nothing between its list and the events (an event about
 * a listed resource only makes the page read it again). Waits at most 3 s.
 */
export function eventsReady() {
  return opened || Promise.resolve();
}

/** Closes the stream and forgets every subscriber (sign-out). */
export function closeEvents() {
  if (source) source.close();
  source = null;
  opened = null;
  subscribers.clear();
  setStatus("");
}

/** Calls `fn(event)` for each event whose type matches one of `patterns` (exact types,
 * `<kind>.*`, or `*`); returns the function that stops it. */
export function onEvents(patterns, fn) {
  const s = { patterns: Array.isArray(patterns) ? patterns : [patterns], fn };
  subscribers.add(s);
  return () => subscribers.delete(s);
}
