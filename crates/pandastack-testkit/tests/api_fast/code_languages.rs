//! The code interpreter's other languages over the fake driver: JavaScript and TypeScript
//! (kernel.mjs under this host's Node.js, with Debian's node-acorn and node-typescript) and
//! Bash, each in its default context and in contexts of its own.

use super::*;

/// JavaScript: state between runs (top-level `let`/`const`/functions/classes, which a cell can
/// declare again), top-level `await`, `import` of built-ins and of a package installed in the
/// working directory, `require`, the final expression's value with JSON and HTML where it fits,
/// console output streamed, errors as data with the cell's frames only, and a run over its
/// bound interrupted with the context's state kept.
#[tokio::test(flavor = "multi_thread")]
async fn javascript_contexts_keep_state_await_import_and_return_values() {
    let s = fake_stack(Duration::from_secs(10)).await;
    let (id, kernels) = kernel_sandbox(&s).await;
    let code = format!("/v1/sandboxes/{id}/code");
    let js = |src: &str| json!({"code": src, "language": "javascript"});
    let run = |body: Value| call(&s, "POST", &code, Some(body));

    let (st, v) = run(js("let n = 40; const k = 2;\nfunction add(a, b) { return a + b }\nclass Pt { constructor(x) { this.x = x } }\nadd(n, k)")).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(
        (&v["results"], &v["error"]),
        (&json!([{"text": "42"}]), &Value::Null),
        "{v}"
    );
    // The same names again (a cell run twice), then used from the next run.
    let (_, v) = run(js("let n = 1; const k = 1; n + k + new Pt(3).x")).await;
    assert_eq!(v["results"], json!([{"text": "5"}]), "{v}");

    // A package in the working directory, built-ins by both import forms, and top-level await.
    let pkg = kernels.0.join("proj/node_modules/greeter");
    std::fs::create_dir_all(&pkg).unwrap();
    std::fs::write(
        pkg.join("package.json"),
        r#"{"name": "greeter", "main": "index.js"}"#,
    )
    .unwrap();
    std::fs::write(
        pkg.join("index.js"),
        "module.exports = { greet: (w) => `hello ${w}` };",
    )
    .unwrap();
    let proj = kernels.0.join("proj");
    let (_, v) = run(js(&format!(
        "process.chdir({:?})",
        proj.display().to_string()
    )))
    .await;
    assert_eq!(v["error"], Value::Null, "{v}");
    let (_, v) = run(js("import greeter from \"greeter\";\nimport { join } from \"node:path\";\nconst os = await import(\"node:os\");\nconst wait = await new Promise((r) => setTimeout(() => r(\"waited\"), 20));\n({ g: greeter.greet(\"js\"), p: join(\"a\", \"b\"), os: typeof os.platform, wait, r: require(\"greeter\").greet(\"cjs\") })")).await;
    assert_eq!(
        v["results"][0]["json"],
        json!({"g": "hello js", "p": "a/b", "os": "function", "wait": "waited", "r": "hello cjs"}),
        "{v}"
    );

    // Output as it happens (the stream), then an HTML string and an object as rich results.
    let (st, events) = sse(
        &s,
        &format!("{code}/stream"),
        js("console.log(\"out\", { a: 1 }); console.error(\"err\"); \"<b>bold</b>\""),
    )
    .await;
    assert_eq!(st, StatusCode::OK);
    let folded = fold(&events);
    assert_eq!(
        (&folded["stdout"], &folded["stderr"], &folded["results"]),
        (
            &json!("out { a: 1 }\n"),
            &json!("err\n"),
            &json!([{"text": "'<b>bold</b>'", "html": "<b>bold</b>"}])
        ),
        "{events:?}"
    );

    // Errors, thrown and rejected, are data: name, message, and the cell's frames only.
    let (_, v) = run(js(
        "function boom() { throw new TypeError(\"bad thing\") }\nboom()",
    ))
    .await;
    let e = &v["error"];
    assert_eq!(
        (e["name"].as_str(), e["value"].as_str()),
        (Some("TypeError"), Some("bad thing")),
        "{v}"
    );
    let tb = e["traceback"].as_str().unwrap();
    assert!(
        tb.starts_with("TypeError: bad thing\n")
            && tb.contains("at boom (")
            && !tb.contains("node:vm"),
        "{tb}"
    );
    let (_, v) = run(js("await Promise.reject(new RangeError(\"nope\"))")).await;
    assert_eq!(v["error"]["name"], "RangeError", "{v}");
    let (_, v) = run(js("let broken = ;")).await;
    assert_eq!(v["error"]["name"], "SyntaxError", "{v}");

    // A loop over its bound is broken off; the context's variables stay.
    let (_, v) =
        run(json!({"code": "while (true) {}", "language": "javascript", "timeout_seconds": 1}))
            .await;
    assert_eq!(v["error"]["name"], "TimeoutError", "{v}");
    let (_, v) = run(js("n * 10")).await;
    assert_eq!(v["results"], json!([{"text": "10"}]), "{v}");

    // The Python default context is another kernel: none of these names.
    let (_, v) = run(json!({"code": "n"})).await;
    assert_eq!(v["error"]["name"], "NameError", "{v}");
}

/// TypeScript: types are removed (not checked), imports kept, enums compiled; a syntax error is
/// data. A context made for TypeScript refuses a run that asks for another language.
#[tokio::test(flavor = "multi_thread")]
async fn typescript_contexts_run_typed_code() {
    let s = fake_stack(Duration::from_secs(10)).await;
    let (id, _kernels) = kernel_sandbox(&s).await;
    let code = format!("/v1/sandboxes/{id}/code");
    let (st, c) = call(
        &s,
        "POST",
        &format!("{code}/contexts"),
        Some(json!({"language": "typescript"})),
    )
    .await;
    assert_eq!(
        (st, &c["language"]),
        (StatusCode::CREATED, &json!("typescript")),
        "{c}"
    );
    let ctx = c["id"].as_str().unwrap().to_owned();
    let ts = |src: &str| json!({"code": src, "context_id": ctx});
    let run = |body: Value| call(&s, "POST", &code, Some(body));

    let (st, v) = run(ts("import { basename } from \"node:path\";\nimport type { ParsedPath } from \"node:path\";\ninterface User { name: string; age?: number }\nenum Color { Red, Green }\nconst u: User = { name: \"ada\" };\nfunction hello(who: User): string { return `hi ${who.name}` }\n[hello(u), basename(\"/a/b.txt\"), Color.Green]")).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(
        (&v["results"][0]["json"], &v["error"]),
        (&json!(["hi ada", "b.txt", 1]), &Value::Null),
        "{v}"
    );
    let (_, v) = run(ts("hello({ name: \"bob\" } as User) as string")).await;
    assert_eq!(v["results"], json!([{"text": "'hi bob'"}]), "{v}");
    let (_, v) = run(ts("let x: = 1")).await;
    assert_eq!(v["error"]["name"], "SyntaxError", "{v}");

    // The context's language is its own: asking for another is refused, saying so.
    let (st, v) = run(json!({"code": "1", "context_id": ctx, "language": "python"})).await;
    assert_eq!(
        (st, &v["error"]["code"]),
        (StatusCode::UNPROCESSABLE_ENTITY, &json!("invalid_argument")),
        "{v}"
    );
    assert_eq!(
        v["error"]["message"],
        format!("language: context {ctx} runs typescript, not python")
    );
    // And the default TypeScript context is another kernel.
    let (_, v) = run(json!({"code": "typeof hello", "language": "typescript"})).await;
    assert_eq!(v["results"], json!([{"text": "'undefined'"}]), "{v}");
}

/// Bash: the working directory, variables and functions live on; output of both streams; a
/// failing last command is an `ExitStatus` error; a run over its bound is interrupted and the
/// shell's state stays; `exit` ends the shell, and the next run starts a new one.
#[tokio::test(flavor = "multi_thread")]
async fn bash_contexts_keep_cwd_variables_and_functions() {
    let s = fake_stack(Duration::from_secs(10)).await;
    let (id, kernels) = kernel_sandbox(&s).await;
    let code = format!("/v1/sandboxes/{id}/code");
    let sh = |src: &str| json!({"code": src, "language": "bash"});
    let run = |body: Value| call(&s, "POST", &code, Some(body));

    let dir = kernels.0.display().to_string();
    let (st, v) = run(sh(&format!(
        "cd {dir}\nGREETING=hello\ngreet() {{ echo \"$GREETING $1\"; }}\necho to-err >&2"
    )))
    .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(
        (&v["stdout"], &v["stderr"], &v["error"]),
        (&json!(""), &json!("to-err\n"), &Value::Null),
        "{v}"
    );
    let (_, v) = run(sh("pwd; greet bash")).await;
    assert_eq!(v["stdout"], format!("{dir}\nhello bash\n"), "{v}");
    let (_, v) = run(sh("echo before; false")).await;
    assert_eq!(
        (&v["stdout"], &v["error"]["name"], &v["error"]["value"]),
        (
            &json!("before\n"),
            &json!("ExitStatus"),
            &json!("exit status 1")
        ),
        "{v}"
    );
    let (_, v) =
        run(json!({"code": "sleep 30; echo never", "language": "bash", "timeout_seconds": 1}))
            .await;
    assert_eq!(v["error"]["name"], "TimeoutError", "{v}");
    assert_eq!(v["stdout"], "", "{v}");
    let (_, v) = run(sh("greet again")).await;
    assert_eq!(v["stdout"], "hello again\n", "{v}");
    let (_, v) = run(sh("exit 3")).await;
    assert_eq!(v["error"]["name"], "Exit", "{v}");
    let (_, v) = run(sh("echo \"[$GREETING]\"")).await;
    assert_eq!(
        (&v["stdout"], &v["error"]),
        (&json!("[]\n"), &Value::Null),
        "{v}"
    );
}
