"""An agent writes a Vite app in a sandbox, the code is pushed to a repository, and the app is
deployed from there and served through the server's proxy.

1. A sandbox of the ``app`` template (Debian trixie with Node.js 20, npm and git; the server
   bakes it on first use) is the agent's workspace.
2. The agent writes a small Vite project there with the files API and commits it with git.
3. The sandbox holds no git credentials, and never will: the code running in it is untrusted.
   The orchestrator (this script) holds them. The agent packs its commit as a ``git bundle``;
   the orchestrator reads the bundle out with the files API.
   ``--repo URL`` (or ``PANDASTACK_EXAMPLE_REPO``) pushes it to a repository of yours with
   your own git and credentials, on a new branch ``agent/<app name>`` (nothing of yours is
   overwritten; the branch stays there), so no push token ever enters the sandbox. The server
   fetches that URL itself over the network, so it must be one the server can reach: a public
   ``https://`` repository (a private one needs the app's ``deploy_key`` on it first:
   ``apps.create(..., deploy=False)``, add the key, ``apps.deploy``) — never a path or
   ``file://`` URL on the server, nor a loopback or private address unless its operator
   allowed it (``--allow-internal-fetch``).
   By default there is no repository: the orchestrator checks the commit out of the bundle
   and uploads that tree (``apps.deploy_directory``) to an app created without a deploy.
4. The deploy (of the pushed branch, or of the upload): the server detects Vite, runs
   ``npm install`` and ``vite build`` in a build VM (which needs the server's sandbox
   networking: the install fetches from the npm registry), serves ``dist/`` and checks it.
   The script follows the deploy's log, prints its phases, fetches the app through the proxy
   and prints the marker the built bundle serves. Then the app is deleted.

Under TCG (no KVM) the install and build take a few minutes.

    PANDASTACK_BASE_URL=... PANDASTACK_API_KEY=... python3 examples/python/agent_deploys_app.py [--repo URL]

The app answers at ``app.url`` (``http://<name>.localhost:<proxy port>`` on a dev server). When
that name does not resolve here, the request goes to ``PANDASTACK_PROXY`` (the proxy's
``host:port``, which ``scripts/dev-server.sh`` prints) or, for a ``.localhost`` name, to
127.0.0.1, with the app's host name in the ``Host`` header.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from pandastack import PandaStack

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument(
    "--repo",
    default=os.environ.get("PANDASTACK_EXAMPLE_REPO"),
    help="push to this repository (your git credentials) instead of a new local bare one",
)
args = parser.parse_args()

client = PandaStack()  # PANDASTACK_API_KEY (or PANDASTACK_TOKEN), PANDASTACK_BASE_URL
name = f"agent-app-{uuid.uuid4().hex[:8]}"  # the app's name is its host name
project = "/workspace/site"
started = time.monotonic()
#: The deploy's phases in the order they run (others, if any, follow).
PHASES = ["clone", "vm", "deps_restore", "install", "build", "build_total", "bake", "check", "switch"]


def git(*argv: str, cwd: Path) -> str:
    """Runs git on the orchestrator's side (with the user's configuration and credentials)."""
    return subprocess.run(["git", *argv], cwd=cwd, check=True, capture_output=True, text=True).stdout


def get(url: str, path: str) -> httpx.Response:
    """GET ``path`` of the app at ``url``, through the proxy's address if the name does not
    resolve here."""
    parts = urlsplit(url)
    target = f"{parts.scheme}://{parts.netloc}"
    proxy = os.environ.get("PANDASTACK_PROXY")
    if proxy:
        target = f"{parts.scheme}://{proxy}"
    elif (parts.hostname or "").endswith(".localhost"):
        target = f"{parts.scheme}://127.0.0.1:{parts.port or 80}"
    r = httpx.get(target + path, headers={"Host": parts.netloc}, timeout=120)
    r.raise_for_status()
    return r


# ---- 1-2. The agent's sandbox: write the project, commit it, pack the commit.
with client.sandboxes.create(template="app", ttl_seconds=1800, metadata={"example": "agent-deploys-app"}) as sb:
    versions = sb.exec("node --version && git --version", check=True).stdout.split("\n")
    print(
        f"sandbox {sb.id} ({sb.template}) ready after {time.monotonic() - started:.0f} s: "
        f"node {versions[0]}, {versions[1]}"
    )
    marker = f"Built by an agent in sandbox {sb.id}"
    files = {
        "package.json": json.dumps(
            {
                "name": "agent-site",
                "private": True,
                "version": "0.1.0",
                "type": "module",
                "scripts": {"dev": "vite", "build": "vite build", "preview": "vite preview"},
                "devDependencies": {"vite": "^6"},  # Vite 6 runs on Node.js 18, 20 and 22+
            },
            indent=2,
        )
        + "\n",
        "vite.config.js": 'import { defineConfig } from "vite";\n\n'
        'export default defineConfig({ build: { outDir: "dist" } });\n',
        "index.html": "<!doctype html>\n<html lang=\"en\">\n  <head>\n"
        '    <meta charset="utf-8" />\n    <title>Agent-built app</title>\n  </head>\n'
        '  <body>\n    <h1 id="app"></h1>\n    <script type="module" src="/src/main.js"></script>\n'
        "  </body>\n</html>\n",
        "src/message.js": f"export const message = {json.dumps(marker)};\n",
        "src/main.js": 'import { message } from "./message.js";\n\n'
        'document.querySelector("#app").textContent = message;\n',
        ".gitignore": "node_modules/\ndist/\n",
    }
    for path, text in files.items():
        sb.files.write(f"{project}/{path}", text)
    sb.exec(
        "git init -q -b main && git add -A && "
        "git -c user.name='PandaStack agent' -c user.email=agent@example.invalid "
        "commit -q -m 'A Vite app, written by an agent' && "
        "git bundle create -q /tmp/site.bundle main",
        cwd=project,
        check=True,
    )
    commit = sb.exec("git log -1 --format='%h %s'", cwd=project, check=True).stdout.strip()
    print(f"agent wrote {len(files)} files and committed {commit}")
    bundle = sb.files.read_bytes("/tmp/site.bundle")
    print(f"read the commit out as a git bundle: {len(bundle)} bytes")
# Leaving the `with` block deleted the sandbox: the code lives in the bundle now.

with tempfile.TemporaryDirectory(prefix="agent-app-") as tmp:
    # ---- 3. From the orchestrator's side, with its git and credentials.
    tmpdir = Path(tmp)
    (tmpdir / "site.bundle").write_bytes(bundle)
    if args.repo:
        git("clone", "-q", "--bare", "site.bundle", "staging.git", cwd=tmpdir)
        repo_url, branch = args.repo, f"agent/{name}"
        git("push", "-q", repo_url, f"main:refs/heads/{branch}", cwd=tmpdir / "staging.git")
        print(f"pushed to {repo_url} (branch {branch})")
    else:
        git("clone", "-q", "--branch", "main", "site.bundle", "site", cwd=tmpdir)
        print(f"checked the commit out of the bundle: {tmpdir / 'site'}")

    # ---- 4. Deploy (the pushed branch, or the checked-out tree), follow it, visit the app.
    if args.repo:
        app = client.apps.create(name, repo_url, ref=branch)
        deploy = next(iter(client.apps.deploys(name)))
    else:
        # The app's repository is where its later pushes would come from; this deploy is an
        # upload of the tree.
        app = client.apps.create(name, f"https://git.example.invalid/{name}.git", deploy=False)
    try:
        print(f"app {app.name}: {app.url}")
        if not args.repo:
            deploy = client.apps.deploy_directory(name, tmpdir / "site")
            print(f"uploaded the checked-out tree as deploy #{deploy.number}")
        print(f"deploy #{deploy.number} ({deploy.id}): following its log")
        pending = ""

        def show(text: str) -> None:
            """Prints the log's complete lines as they arrive, indented."""
            global pending
            *lines, pending = (pending + text).split("\n")
            for line in lines:
                print(f"  | {line}", flush=True)

        client.apps.deploy_logs(name, deploy.id, follow=True, on_log=show)
        if pending:
            print(f"  | {pending}")
        deploy = client.apps.wait_for_deploy(name, deploy.id, timeout=1800)
        print(f"deploy ended {deploy.state} after {time.monotonic() - started:.0f} s in all")
        if deploy.state != "live":
            sys.exit(f"deploy {deploy.id} ended {deploy.state}: {deploy.error}")
        plan = deploy.plan or {}
        print(
            f"deploy #{deploy.number} live at commit {(deploy.commit or '')[:7]}; "
            f"framework: {plan.get('framework')} (install: {plan.get('install')}, "
            f"build: {plan.get('build')}, serves {plan.get('output_dir')}/ on port {plan.get('port')})"
        )
        order = sorted(deploy.phases_ms, key=lambda k: PHASES.index(k) if k in PHASES else len(PHASES))
        print("phases: " + ", ".join(f"{k} {deploy.phases_ms[k] / 1000:.1f} s" for k in order))

        page = get(app.url, "/").text
        title = re.search(r"<title>(.*?)</title>", page)
        script = re.search(r'src="(/assets/[^"]+\.js)"', page)  # what `vite build` wrote
        if not script:
            sys.exit(f"the page names no built bundle:\n{page}")
        print(f"the app's page: {title.group(1) if title else '?'}, script {script.group(1)}")
        js = get(app.url, script.group(1)).text
        if marker not in js:
            sys.exit(f"{marker!r} is not in {script.group(1)}")
        print(f'the app serves: "{marker}"')
    finally:
        client.apps.delete(name)
        print(f"app {name} deleted")
print("done")
