// PandaStack code interpreter, JavaScript and TypeScript kernel (guest side). kernel.py starts
// it for a `javascript` or `typescript` context, holding the context's lock, as
//
//   node --input-type=module -e <this file> serve CTX LANGUAGE
//
// and it then speaks kernel.py's protocol on the context's Unix socket: one JSON request line
// ({"code", "timeout"} or {"stop": true}), then JSON-lines events (stdout, stderr, result,
// error, done) until it closes the connection.
//
// A cell is parsed with acorn (Debian's node-acorn) and rewritten so that its top-level names
// live on between runs: `let`, `const`, `var`, `class` and `function` declarations become global
// variables (so a cell can run again without "already declared"), `import` declarations become
// `await import(...)` resolved from the working directory (packages installed there, or
// Node's built-ins), and the whole cell runs in an async function, so `await` works at the top
// level. The value of a final expression is the cell's result. TypeScript is turned into
// JavaScript first with the `typescript` package (Debian's node-typescript, or one installed
// in the working directory or globally with npm); its types are removed, not checked.
//
// What a cell writes with console.* or process.stdout/stderr is streamed as it happens; output
// of child processes that inherit the kernel's fds is not (start them with pipes). A run over
// its bound is interrupted (a synchronous loop is broken off; awaited work is left to finish in
// the background); a kernel stuck in a loop after an `await` is ended, and its context restarts
// empty at the next run.

import fs from "node:fs";
import { createRequire } from "node:module";
import net from "node:net";
import path from "node:path";
import util from "node:util";
import vm from "node:vm";
import { Worker } from "node:worker_threads";

const [cmd, ctx, language] = process.argv.slice(1);
if (cmd !== "serve" || !ctx || (language !== "javascript" && language !== "typescript")) {
  process.stderr.write("usage: node -e <kernel.mjs> serve CTX javascript|typescript\n");
  process.exit(2);
}
if (!vm.constants?.USE_MAIN_CONTEXT_DEFAULT_LOADER) {
  process.stderr.write(`Node.js ${process.version} is too old for the code interpreter: it needs 20.12 or later\n`);
  process.exit(3);
}
const DIR = process.env.PANDASTACK_KERNEL_DIR || "/run/pandastack-kernel";
// Where Debian's packages (node-acorn, node-typescript) and npm's global installs live.
const GLOBAL_DIRS = ["/usr/share/nodejs", "/usr/lib/nodejs", "/usr/local/lib/node_modules", "/usr/lib/node_modules"];
// After a run's bound, how long a kernel stuck in a loop gets before it is ended.
const STUCK_GRACE_MS = 5000;

// A package from the working directory's node_modules, else from the global directories.
function load(name, hint) {
  try {
    return createRequire(path.join(process.cwd(), "noop.js"))(name);
  } catch {}
  for (const dir of GLOBAL_DIRS) {
    try {
      return createRequire(path.join(dir, "noop.js"))(path.join(dir, name));
    } catch {}
  }
  throw Object.assign(new Error(`${name} was not found in this sandbox: ${hint}`), { name: "KernelError" });
}

let conn = null;
function send(obj) {
  if (conn && !conn.destroyed) conn.write(JSON.stringify(obj) + "\n");
}

// console.* and process.stdout/stderr go to the current client as events.
for (const [stream, type] of [[process.stdout, "stdout"], [process.stderr, "stderr"]]) {
  stream.write = (chunk, encoding, cb) => {
    const text = typeof chunk === "string" ? chunk : Buffer.from(chunk).toString("utf8");
    send({ type, text });
    const done = typeof encoding === "function" ? encoding : cb;
    if (typeof done === "function") process.nextTick(done);
    return true;
  };
}

// A value as a rich result: its inspection as text; plain objects and arrays also as JSON; a
// string that is an HTML fragment also as HTML.
function bundle(value) {
  const data = { text: util.inspect(value, { depth: 6, maxArrayLength: 200, breakLength: 100 }) };
  if (typeof value === "string" && /^\s*<([a-zA-Z][\w-]*|!doctype)[\s\S]*>\s*$/i.test(value)) {
    data.html = value;
  }
  if (value !== null && typeof value === "object") {
    const proto = Object.getPrototypeOf(value);
    if (Array.isArray(value) || proto === Object.prototype || proto === null) {
      try {
        const json = JSON.stringify(value);
        if (json !== undefined) data.json = JSON.parse(json);
      } catch {}
    }
  }
  return data;
}

// `require` as in a CommonJS module in the working directory (it may change between runs).
const cwdRequire = () => createRequire(path.join(process.cwd(), "[cell]"));
globalThis.require = Object.assign((id) => cwdRequire()(id), {
  resolve: (id, options) => cwdRequire().resolve(id, options),
  cache: createRequire(import.meta.url).cache,
});

globalThis.display = (...values) => {
  for (const v of values) send({ type: "result", data: bundle(v) });
};

// A stack trace without the kernel's own frames: the message, then the cells' frames.
function userStack(stack) {
  const lines = String(stack).split("\n");
  const first = lines.findIndex((l) => /^\s+at /.test(l));
  if (first < 0) return lines.join("\n");
  return [...lines.slice(0, first), ...lines.slice(first).filter((l) => l.includes("[cell-"))].join("\n");
}

function errorEvent(e) {
  if (e instanceof Error || (e && typeof e === "object" && "message" in e && "name" in e)) {
    return { type: "error", name: String(e.name), value: String(e.message), traceback: userStack(e.stack || `${e.name}: ${e.message}`) };
  }
  const text = util.inspect(e);
  return { type: "error", name: "Error", value: `Uncaught ${text}`, traceback: `Uncaught ${text}` };
}

// ---- the rewrite --------------------------------------------------------------------------

// TypeScript to JavaScript: types removed (not checked), imports kept as written.
function transpile(code) {
  const ts = load("typescript", "TypeScript cells need the typescript package (apt install node-typescript, or npm install -g typescript)");
  const [major] = ts.versionMajorMinor.split(".").map(Number);
  const options = {
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.ESNext,
    moduleDetection: 3, // force: every cell is a module, so top-level await is allowed
    isolatedModules: true,
    sourceMap: false,
    ...(major >= 5 ? { verbatimModuleSyntax: true } : { preserveValueImports: true }),
  };
  const out = ts.transpileModule(code, { compilerOptions: options, reportDiagnostics: true, fileName: "cell.ts" });
  const syntax = (out.diagnostics || []).find((d) => d.category === ts.DiagnosticCategory.Error && d.code < 2000);
  if (syntax) {
    const where = syntax.file && syntax.start !== undefined ? syntax.file.getLineAndCharacterOfPosition(syntax.start) : null;
    const message = ts.flattenDiagnosticMessageText(syntax.messageText, "\n");
    throw Object.assign(new SyntaxError(where ? `${message} (${where.line + 1}:${where.character + 1})` : message), { stack: "" });
  }
  return out.outputText.replace(/^export \{\};\s*$/m, "");
}

// The names a binding pattern declares.
function bound(pattern, out) {
  switch (pattern.type) {
    case "Identifier": out.push(pattern.name); break;
    case "ObjectPattern": for (const p of pattern.properties) bound(p.type === "RestElement" ? p.argument : p.value, out); break;
    case "ArrayPattern": for (const e of pattern.elements) if (e) bound(e, out); break;
    case "AssignmentPattern": bound(pattern.left, out); break;
    case "RestElement": bound(pattern.argument, out); break;
  }
  return out;
}

// A cell as a script that keeps its top-level names (see the header) and whose completion is a
// promise of { value } (a final expression) or undefined.
function rewrite(code) {
  const acorn = load("acorn", "JavaScript cells need the acorn package (apt install node-acorn)");
  let ast;
  try {
    ast = acorn.parse(code, { ecmaVersion: "latest", sourceType: "module", allowAwaitOutsideFunction: true, allowHashBang: true, locations: true });
  } catch (e) {
    throw Object.assign(new SyntaxError(e.message), { stack: `SyntaxError: ${e.message}` });
  }
  const src = (n) => code.slice(n.start, n.end);
  const names = new Set();
  const exported = []; // function declarations: global as soon as the cell starts
  const edits = []; // [start, end, text], in order
  let imports = 0;
  const declaration = (node, start, end) => {
    switch (node.type) {
      case "VariableDeclaration": {
        const parts = node.declarations.map((d) => {
          const ids = bound(d.id, []);
          ids.forEach((n) => names.add(n));
          if (d.id.type === "Identifier") return `${d.id.name} = ${d.init ? src(d.init) : "undefined"}`;
          return `(${src(d.id)} = ${src(d.init)})`;
        });
        edits.push([start, end, `void (${parts.join(", ")});`]);
        return true;
      }
      case "FunctionDeclaration":
        names.add(node.id.name);
        exported.push(node.id.name);
        if (start !== node.start) edits.push([start, node.start, ""]);
        return true;
      case "ClassDeclaration":
        names.add(node.id.name);
        edits.push([start, end, `${node.id.name} = ${src(node)};`]);
        return true;
    }
    return false;
  };
  const body = ast.body;
  body.forEach((node, i) => {
    switch (node.type) {
      case "ImportDeclaration": {
        const m = `__pandastack_import${imports++}`;
        const parts = [`const ${m} = await import(${src(node.source)});`];
        for (const s of node.specifiers) {
          names.add(s.local.name);
          if (s.type === "ImportDefaultSpecifier") parts.push(`${s.local.name} = ${m}.default;`);
          else if (s.type === "ImportNamespaceSpecifier") parts.push(`${s.local.name} = ${m};`);
          else parts.push(`${s.local.name} = ${m}[${JSON.stringify(s.imported.name ?? s.imported.value)}];`);
        }
        edits.push([node.start, node.end, parts.join(" ")]);
        return;
      }
      case "ExportNamedDeclaration":
        if (node.declaration) declaration(node.declaration, node.start, node.end);
        else edits.push([node.start, node.end, ""]);
        return;
      case "ExportAllDeclaration":
        edits.push([node.start, node.end, ""]);
        return;
      case "ExportDefaultDeclaration":
        if (!(node.declaration.id && declaration(node.declaration, node.start, node.end))) {
          edits.push([node.start, node.declaration.start, ""]);
        }
        return;
      case "ExpressionStatement":
        if (i === body.length - 1) {
          edits.push([node.start, node.end, `return { value: (${src(node.expression)}) };`]);
        }
        return;
      default:
        declaration(node, node.start, node.end);
    }
  });
  let out = "";
  let at = 0;
  for (const [start, end, text] of edits) {
    out += code.slice(at, start) + text;
    at = end;
  }
  out += code.slice(at);
  const vars = names.size ? `var ${[...names].join(", ")}; ` : "";
  const early = exported.map((n) => `globalThis[${JSON.stringify(n)}] = ${n}; `).join("");
  // One line of prefix, so the cell's line numbers hold in stack traces.
  return `${vars}(async () => { ${early}${out}\n})()`;
}

// ---- running --------------------------------------------------------------------------------

// Interrupts a synchronous loop at the bound (SIGINT breaks `runInThisContext`), and ends a
// kernel that is still stuck STUCK_GRACE_MS later (a loop after an `await` cannot be broken).
const watchdog = new Worker(
  // Evaluated as a module, as this file is (--input-type=module).
  `import { parentPort } from "node:worker_threads";
   let timers = [];
   parentPort.on("message", (m) => {
     timers.forEach(clearTimeout);
     timers = [];
     if (m.arm) {
       timers.push(setTimeout(() => process.kill(process.pid, "SIGINT"), m.arm));
       timers.push(setTimeout(() => process.kill(process.pid, "SIGKILL"), m.arm + m.grace));
     }
   });`,
  { eval: true },
);
watchdog.unref();
watchdog.on("error", (e) => fs.writeSync(2, `watchdog: ${e.stack}\n`));
// Outside a run, SIGINT does nothing (not the default: exit).
process.on("SIGINT", () => {});

let cells = 0;
async function run(code, timeout) {
  cells += 1;
  const filename = path.join(process.cwd(), `[cell-${cells}]`);
  let script;
  try {
    const js = rewrite(language === "typescript" ? transpile(code) : code);
    script = new vm.Script(js, { filename, importModuleDynamically: vm.constants.USE_MAIN_CONTEXT_DEFAULT_LOADER });
  } catch (e) {
    send(errorEvent(e));
    return;
  }
  const ms = timeout > 0 ? timeout * 1000 : 0;
  if (ms) watchdog.postMessage({ arm: ms, grace: STUCK_GRACE_MS });
  let timer;
  const expired = new Promise((resolve) => {
    if (ms) timer = setTimeout(() => resolve("expired"), ms);
  });
  try {
    const pending = script.runInThisContext({ breakOnSigint: true, displayErrors: false });
    const out = await Promise.race([pending, expired]);
    if (out === "expired") {
      send({ type: "error", name: "TimeoutError", value: `execution timed out after ${timeout}s`, traceback: "" });
    } else if (out && out.value !== undefined) {
      globalThis._ = out.value;
      send({ type: "result", data: bundle(out.value) });
    }
  } catch (e) {
    if (e && e.code === "ERR_SCRIPT_EXECUTION_INTERRUPTED") {
      send({ type: "error", name: "TimeoutError", value: `execution timed out after ${timeout}s`, traceback: "" });
    } else {
      send(errorEvent(e));
    }
  } finally {
    clearTimeout(timer);
    watchdog.postMessage({});
  }
}

// A rejection nobody awaited, or an error thrown later by a timer: said to the current client,
// never the kernel's end.
process.on("unhandledRejection", (e) => send({ type: "stderr", text: `Unhandled rejection: ${util.inspect(e)}\n` }));
process.on("uncaughtException", (e) => send({ type: "stderr", text: `Uncaught exception: ${e && e.stack ? e.stack : util.inspect(e)}\n` }));

function serve() {
  const sock = path.join(DIR, `${ctx}.sock`);
  // One run at a time, as in kernel.py: connections queue here.
  let queue = Promise.resolve();
  const server = net.createServer((c) => {
    let line = "";
    c.setEncoding("utf8");
    const onData = (chunk) => {
      line += chunk;
      const nl = line.indexOf("\n");
      if (nl < 0) return;
      c.off("data", onData);
      let req;
      try {
        req = JSON.parse(line.slice(0, nl));
      } catch {
        c.destroy();
        return;
      }
      if (req.stop) {
        c.end("x", () => process.exit(0));
        return;
      }
      if (typeof req.code !== "string") {
        c.end();
        return;
      }
      queue = queue.then(async () => {
        conn = c;
        c.on("error", () => {});
        try {
          await run(req.code, Number(req.timeout) || 0);
        } catch (e) {
          send({ type: "error", name: "KernelError", value: String(e && e.message), traceback: "" });
        }
        send({ type: "done" });
        conn = null;
        await new Promise((resolve) => c.end(resolve));
      });
    };
    c.on("data", onData);
    c.on("error", () => {});
  });
  server.listen(sock, () => fs.chmodSync(sock, 0o600));
  try {
    process.chdir(process.env.HOME || "/");
  } catch {
    process.chdir("/");
  }
}

serve();
