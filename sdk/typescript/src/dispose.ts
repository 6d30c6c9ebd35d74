/**
 * `Symbol.asyncDispose` for runtimes that lack it (Node 18 before 18.18), so that
 * `await using sandbox = await client.sandboxes.create()` works wherever the syntax does, and
 * `sandbox[Symbol.asyncDispose]()` works everywhere. Node itself uses
 * `Symbol.for("nodejs.asyncDispose")`, so this agrees with its own polyfill.
 * Imported for its side effect before any class that defines a dispose method.
 */
const sym = Symbol as unknown as { asyncDispose?: symbol; dispose?: symbol };
if (typeof sym.asyncDispose !== "symbol") {
  Object.defineProperty(Symbol, "asyncDispose", {
    value: Symbol.for("nodejs.asyncDispose"),
    writable: false,
    enumerable: false,
    configurable: false,
  });
}
if (typeof sym.dispose !== "symbol") {
  Object.defineProperty(Symbol, "dispose", {
    value: Symbol.for("nodejs.dispose"),
    writable: false,
    enumerable: false,
    configurable: false,
  });
}

export {};
