// Compile-only check of the public types (`npm run test:types`): the API.md snippet must
// type-check unchanged, and the main surface must have the documented shapes.
import {
  PandaStack,
  Sandbox,
  NotFoundError,
  RateLimitError,
  Execution,
  Result,
  TemplateBuildError,
  TemplateBuildTimeoutError,
  isBuilding,
  VolumeBusyError,
  VolumeBackupError,
  DatabaseNotFoundError,
  QueryError,
  AppNotFoundError,
  DeployTimeoutError,
  isDeployActive,
  FunctionVersionTimeoutError,
  isVersionBuilding,
  type FunctionInfo,
  type FunctionVersionInfo,
  type Invocation,
  type InvocationStatus,
  type ScheduleInfo,
  type HostInfo,
  type HostState,
  type HostCapacity,
  PermissionDeniedError,
  type ScheduleRunInfo,
  type ScheduleTarget,
  type RunState,
  type AppInfo,
  type AppDomain,
  type AppGit,
  type DeployInfo,
  type DeployState,
  type DomainTls,
  type BuildTemplateOptions,
  type DatabaseExtensions,
  type DatabaseInfo,
  type DatabaseState,
  type QueryResult,
  type VolumeBackupInfo,
  type VolumeInfo,
  type VolumeMount,
  type VolumeSnapshotInfo,
  type TemplateInfo,
  type CodeContext,
  type ExecEvent,
  type ExecResult,
  type ExecutionError,
  type FileInfo,
  type SandboxInfo,
  GitError,
  GitAuthError,
  GitConflictError,
  type GitBranches,
  type GitStatus,
  type InstanceMetrics,
  type MetricPoint,
  type MetricsOptions,
  type SandboxMetrics,
} from "@pandastack/sdk";

export async function snippet(): Promise<string> {
  const client = new PandaStack({ apiKey: process.env.PANDASTACK_API_KEY });
  const sandbox = await client.sandboxes.create({ template: "code-interpreter", ttlSeconds: 600 });
  const r = await sandbox.exec("python -c 'print(2 ** 10)'", { timeoutSeconds: 30 });
  return r.stdout;
}

export async function surface(client: PandaStack): Promise<void> {
  await using sb = await client.sandboxes.create({
    template: "base", ttlSeconds: 60, idleTimeoutSeconds: 30, onTimeout: "hibernate",
    metadata: { a: "b" }, env: { X: "1" },
  });
  const r: ExecResult = await sb.exec(["ls", "-l"], { cwd: "/", env: { A: "b" }, stdin: "x", check: true, onStdout: (d: string) => void d });
  const code: number = r.exitCode;
  for await (const ev of sb.execStream("echo")) {
    const e: ExecEvent = ev;
    if (e.type === "exit") void (e.exitCode + code);
    else void e.data.length;
  }
  const ctx: CodeContext = await sb.createCodeContext({ language: "python", env: { A: "b" } });
  const ex: Execution = await sb.runCode("x * 2", {
    context: ctx, env: { A: "b" }, timeoutSeconds: 5,
    onStdout: (d: string) => void d, onResult: (res: Result) => void res.pngBytes(),
    onError: (e: ExecutionError) => void e.traceback,
  });
  const last: string | undefined = ex.text;
  const err: ExecutionError | null = ex.error;
  const png: Uint8Array | undefined = ex.results[0]?.pngBytes();
  void [last, err, png, ex.durationMs, ex.truncated, ex.stdout, ex.stderr];
  await sb.runCode("1", { context: ctx.id });
  await sb.deleteCodeContext(ctx);
  const text: string = await sb.filesystem.read("/x");
  const bytes: Uint8Array = await sb.files.readBytes("/x");
  await sb.files.write("/x", text + bytes.length);
  const entries: FileInfo[] = await sb.files.list("/");
  void entries;
  const one: Sandbox = await sb.fork();
  const many: Sandbox[] = await sb.fork(5);
  void one; void many;
  const info: SandboxInfo = await sb.info();
  void info.expiresAt;
  for await (const s of client.sandboxes.list({ state: "running", metadata: { a: "b" }, limit: 10 })) void s.id;
  try {
    await client.sandboxes.get("x");
  } catch (e) {
    if (e instanceof NotFoundError) void e.requestId;
    if (e instanceof RateLimitError) void e.retryAfter;
  }
}

export async function templates(client: PandaStack): Promise<void> {
  const opts: BuildTemplateOptions = {
    name: "my-app", tarball: "my-app.tar", cpu: 2, memoryMb: 1024, diskMb: 4096, description: "d",
    onLog: (s: string) => void s, timeoutSeconds: 600, signal: AbortSignal.timeout(1000),
  };
  try {
    const t: TemplateInfo = await client.templates.build(opts);
    const v: number | null = t.readyVersion;
    void [v, t.version, t.source, t.error, t.buildMs, t.imageBytes, t.createdAt, isBuilding(t)];
  } catch (e) {
    if (e instanceof TemplateBuildTimeoutError) void e.template.state;
    else if (e instanceof TemplateBuildError) void (e.error ?? e.template.error);
  }
  await client.templates.build({ spec: 'name = "x"\n', wait: false });
  await client.templates.build({ name: "b", tarball: new Uint8Array(0), onLog: async () => {} });
  await client.templates.build({ name: "c", tarball: new Blob([]) });
  const log: string = await client.templates.logs("my-app", { version: 1 });
  const baked: TemplateInfo = await client.templates.bake("my-app");
  const gone: boolean = await client.templates.delete("my-app");
  const one: TemplateInfo = await client.templates.get("my-app");
  for await (const t of client.templates.list()) void t.name;
  void [log, baked, gone, one];
}

export async function volumes(client: PandaStack): Promise<void> {
  const v: VolumeInfo = await client.volumes.create({ name: "ws", sizeGb: 10 });
  await client.volumes.create({ name: "copy", fromSnapshot: "vs-1" });
  await client.volumes.create({ name: "restored", fromBackup: "vb-1", sizeGb: 20 });
  const attachedTo: string | null = v.attachedTo;
  void [attachedTo, v.attachments[0]?.sandboxId, v.source, v.sizeGb];
  const mounts: VolumeMount[] = [{ name: "ws", path: "/workspace" }, { name: "ref", path: "/ref", readOnly: true }];
  try {
    await using sb = await client.sandboxes.create({ template: "base", volumes: mounts });
    const mine: VolumeMount[] = sb.volumes;
    void [mine, sb.data.volumes];
  } catch (e) {
    if (e instanceof VolumeBusyError) void e.message;
  }
  for await (const x of client.volumes.list({ limit: 10 })) void x.name;
  const grown: VolumeInfo = await client.volumes.grow("ws", 20);
  const snap: VolumeSnapshotInfo = await client.volumes.snapshot("ws");
  for await (const s of client.volumes.snapshots("ws")) void s.frozen;
  const deleted: boolean = await client.volumes.deleteSnapshot("ws", snap.id);
  try {
    const b: VolumeBackupInfo = await client.volumes.backup("ws", { wait: true, timeoutSeconds: 600 });
    const again: VolumeBackupInfo = await client.volumes.waitBackup("ws", b.id);
    void [b.state, again.bytesUploaded, again.finishedAt];
  } catch (e) {
    if (e instanceof VolumeBackupError) void (e.error ?? e.backup.state);
  }
  for await (const b of client.volumes.backups("ws")) void b.id;
  const one: VolumeBackupInfo = await client.volumes.getBackup("ws", "vb-1");
  const gone: boolean = await client.volumes.delete("ws");
  void [grown, deleted, one, gone];
}

export async function databases(client: PandaStack): Promise<void> {
  const db: DatabaseInfo = await client.databases.create({ name: "app", version: 17, sizeGb: 1, memoryMb: 1024, idleSeconds: 0 });
  const state: DatabaseState = db.state;
  const parent: string | null = db.parent;
  const memoryMb: number = db.memoryMb;
  void [state, parent, memoryMb, db.connectionUri, db.pooledUri, db.httpUrl, db.sandboxId, db.volume, db.user];
  for await (const d of client.databases.list({ limit: 10 })) void d.name;
  const same: DatabaseInfo = await client.databases.get("app");
  const r: QueryResult = await client.databases.query(db.id, "select $1::int as n", [1], { statementTimeoutMs: 5000 });
  const first: unknown = r.rows[0]?.[0];
  const n: number | null = r.rowCount;
  void [first, n, r.command, r.fields[0]?.name, r.fields[0]?.dataTypeId];
  await client.databases.query(db.id, "select 1");
  try {
    await client.databases.query(db.id, "selec 1");
  } catch (e) {
    if (e instanceof QueryError) void [e.sqlstate, e.severity, e.pgMessage, e.status];
    if (e instanceof DatabaseNotFoundError) void e.code;
  }
  const branch: DatabaseInfo = await client.databases.branch(db.id, { name: "app_br", idleSeconds: 60 });
  await client.databases.branch(db.id);
  await client.databases.branch(db.id, { fromTime: new Date(), name: "app_pitr" });
  await client.databases.branch(db.id, { fromTime: "2026-01-01T00:00:00Z" });
  const restored: DatabaseInfo = await client.databases.restore(db.id, new Date(Date.now() - 3_600_000));
  await client.databases.restore(db.id, "2026-01-01T00:00:00Z", { idempotencyKey: "k", timeoutMs: 60_000 });
  void restored;
  const rotated: DatabaseInfo = await client.databases.rotatePassword(db.id);
  const ext: DatabaseExtensions = await client.databases.extensions();
  const names: string[] = (ext.versions["17"] ?? []).map((x) => `${x.name} ${x.defaultVersion}`);
  const bk: VolumeBackupInfo = await client.databases.backup(db.id, { wait: true, timeoutSeconds: 600 });
  await client.databases.waitBackup(db.id, bk.id, { pollMs: 100 });
  for await (const b of client.databases.backups(db.id)) void b.state;
  const gone: boolean = await client.databases.delete(db.id);
  void [same, branch, rotated, names, ext.preloaded, gone];
}

export async function apps(client: PandaStack): Promise<void> {
  const app: AppInfo = await client.apps.create({
    name: "web", git: "https://github.com/me/web.git", ref: "main", env: { A: "1" }, secrets: { T: "t" },
    build: { command: "npm run build", outputDir: "dist" }, start: { command: "node server.js", port: 3000 },
    memoryMb: 1024, minInstances: 0, idleSeconds: 300, healthPath: "/", deploy: false,
  });
  const git: AppGit = app.git;
  const live: string | null = app.liveDeploy;
  void [git.url, git.ref, live, app.url, app.secretNames, app.webhookSecret, app.deployKey, app.instanceState, app.build.outputDir, app.start.port];
  await client.apps.create({ name: "other", git: { url: "/srv/git/other.git", ref: "dev" } });
  for await (const a of client.apps.list({ limit: 10 })) void a.name;
  const same: AppInfo = await client.apps.get("web");
  const domains: AppDomain[] = (await client.apps.update("web", { domains: ["shop.example.com"] })).domains;
  const tls: DomainTls = domains[0].tls;
  await client.apps.create({ name: "dom", git: "https://github.com/me/web.git", domains: ["www.example.com"], deploy: false });
  void [tls, domains[0].name, domains[0].tlsExpiresAt, domains[0].tlsError];
  const rekeyed: string = (await client.apps.rotateDeployKey("web")).deployKey;
  void rekeyed;
  const updated: AppInfo = await client.apps.update("web", { env: { A: "2" }, minInstances: 1, git: "https://github.com/me/web2.git", ref: "v2" });
  const d: DeployInfo = await client.apps.deploy("web", { ref: "main" });
  const state: DeployState = d.state;
  const phases: Record<string, number> = d.phasesMs;
  void [state, phases, d.commit, d.plan, d.number, isDeployActive(d)];
  try {
    const up: DeployInfo = await client.apps.deployDirectory("web", "./web", { wait: true, timeoutSeconds: 600, pollMs: 500 });
    const waited: DeployInfo = await client.apps.waitForDeploy("web", up.id, { timeoutSeconds: 60 });
    void waited;
  } catch (e) {
    if (e instanceof DeployTimeoutError) void e.deploy.state;
    if (e instanceof AppNotFoundError) void e.code;
  }
  for await (const x of client.apps.deploys("web")) void x.id;
  const one: DeployInfo = await client.apps.getDeploy("web", d.id);
  const text: string = await client.apps.deployLogs("web", d.id);
  const all: string = await client.apps.deployLogs("web", d.id, { follow: true, onLog: (s: string) => void s });
  const out: string = await client.apps.logs("web", { follow: true, onLog: async (s: string) => void s, signal: AbortSignal.timeout(1000) });
  const back: DeployInfo = await client.apps.rollback("web", { deployId: d.id });
  await client.apps.rollback("web");
  const gone: boolean = await client.apps.delete("web");
  void [same, updated, one, text, all, out, back, gone];
}

export async function functions(client: PandaStack): Promise<void> {
  const f: FunctionInfo = await client.functions.create({
    name: "hello",
    runtime: "python",
    handler: "main.handler",
    files: { "main.py": "def handler(event, context):\n    return event\n" },
    dependencies: "requests\n",
    timeoutSeconds: 30,
    public: true,
  });
  const live: number | null = f.liveVersion;
  for await (const x of client.functions.list({ limit: 10 })) void x.name;
  const updated: FunctionInfo = await client.functions.update("hello", { concurrency: 2, public: false });
  try {
    const v: FunctionVersionInfo = await client.functions.createVersion("hello", { files: { "main.py": "" }, wait: true, timeoutSeconds: 600 });
    void [v.state, v.error, v.phasesMs, isVersionBuilding(v)];
  } catch (e) {
    if (e instanceof FunctionVersionTimeoutError) void e.version.state;
  }
  for await (const v of client.functions.versions("hello")) void v.version;
  const one: FunctionVersionInfo = await client.functions.waitForVersion("hello", 1, { timeoutSeconds: 60 });
  const log: string = await client.functions.versionLogs("hello", one.version);
  const back: FunctionVersionInfo = await client.functions.rollback("hello", { version: 1 });
  const r: Invocation = await client.functions.invoke("hello", { n: 1 });
  const status: InvocationStatus = r.status;
  const result: unknown = r.result;
  if (r.error) void [r.error.type, r.error.message, r.error.traceback];
  await client.functions.invoke("hello", undefined, { timeoutMs: 5000 });
  const queued: Invocation = await client.functions.submit("hello", { n: 2 }, { retries: 3 });
  const later: Invocation = await client.functions.getInvocation("hello", queued.id ?? "");
  void later.status;
  const gone: boolean = await client.functions.delete("hello");
  void [live, updated, log, back, status, result, r.cold, r.durationMs, gone];
}

export async function schedules(client: PandaStack): Promise<void> {
  const s: ScheduleInfo = await client.schedules.create({
    name: "nightly",
    cron: "0 3 * * *",
    timezone: "Europe/Berlin",
    target: { type: "sandbox_exec", template: "minimal", command: "echo hi" },
    payload: { full: true },
    concurrencyPolicy: "forbid",
    retries: 2,
  });
  await client.schedules.create({ name: "calls", cron: "@hourly", target: { type: "function", name: "hello" } });
  const target: ScheduleTarget | null = s.target;
  if (target?.type === "sandbox_exec") void [target.command, target.timeoutSeconds];
  if (target?.type === "function") void target.name;
  for await (const x of client.schedules.list()) void x.nextRunAt;
  await client.schedules.update("nightly", { cron: "0 4 * * *", startingDeadlineSeconds: 0 });
  await client.schedules.pause("nightly");
  await client.schedules.resume("nightly");
  const run: ScheduleRunInfo = await client.schedules.run("nightly");
  const state: RunState = run.state;
  for await (const x of client.schedules.runs("nightly", { limit: 5 })) void x.exitCode;
  const again: ScheduleRunInfo = await client.schedules.getRun("nightly", run.id);
  const gone: boolean = await client.schedules.delete("nightly");
  void [state, again.output, gone];
}

export async function hosts(client: PandaStack): Promise<void> {
  const all: HostInfo[] = await client.hosts.list();
  const h: HostInfo = await client.hosts.get(all[0]!.id);
  const state: HostState = (await client.hosts.drain(h.id)).state;
  const cap: HostCapacity = (await client.hosts.undrain(h.id)).capacity;
  const address: string | null = h.address;
  try {
    const gone: boolean = await client.hosts.forget(h.id);
    void gone;
  } catch (e) {
    if (e instanceof PermissionDeniedError) void e.code;
  }
  void [state, cap.freeSlots, address, h.leaseExpiresAt];
}

export async function git(sb: Sandbox): Promise<string> {
  await sb.git.clone({ url: "https://example.com/r.git", path: "/work/r", branch: "main", depth: 1, token: "t", username: "u", timeoutSeconds: 60 });
  const st: GitStatus = await sb.git.status("/work/r");
  const branch: string | null = st.branch;
  void [branch, st.upstream, st.ahead + st.behind, st.clean, st.conflicts, st.files.map((f) => [f.path, f.index, f.worktree, f.origPath, f.staged])];
  await sb.git.add("/work/r");
  await sb.git.add("/work/r", ["a.txt"]);
  const sha: string = await sb.git.commit("/work/r", "msg", { authorName: "A", authorEmail: "a@b", allowEmpty: true });
  await sb.git.push("/work/r", { remote: "origin", branch: "main", setUpstream: true, force: false, token: "t" });
  try {
    await sb.git.pull("/work/r", { token: "t", username: "u" });
  } catch (e) {
    if (e instanceof GitConflictError) void e.files.length;
    else if (e instanceof GitAuthError) void e.command;
    else if (e instanceof GitError) void [e.stderr, e.exitCode, e.result?.stdout];
  }
  const br: GitBranches = await sb.git.branches("/work/r");
  await sb.git.createBranch("/work/r", "feature", { startPoint: "main", checkout: false });
  await sb.git.checkoutBranch("/work/r", "feature");
  return sha + br.current + br.local.length + br.remote.length;
}

export async function metrics(client: PandaStack, sb: Sandbox): Promise<void> {
  const m: SandboxMetrics = await sb.metrics({ since: "15m", step: 60, signal: AbortSignal.timeout(5000) });
  await sb.metrics();
  await sb.metrics({ since: new Date(Date.now() - 60_000) });
  const p: MetricPoint | undefined = m.samples[0];
  const total: number | null = p?.memTotalBytes ?? null;
  void [m.state, m.step, m.hostRssBytes, m.cpuTimeMs, p?.t, p?.cpuPct, p?.memBytes, p?.pssBytes, p?.netRx, total];
  const opts: MetricsOptions = { since: "1h", step: 300 };
  const db: SandboxMetrics = await client.databases.metrics("app", opts);
  const app: SandboxMetrics = await client.apps.metrics("web", { step: 60 });
  const fn: SandboxMetrics = await client.functions.metrics("hello");
  const inst: InstanceMetrics[] = [...db.instances, ...app.instances, ...fn.instances];
  void inst.map((i) => [i.sandboxId, i.state, i.samples.length]);
}
