"""sandbox.git against a real guest: a bare repository served over HTTP with a token (git
http-backend behind Basic authentication, fixtures/git_http_server.py) inside one sandbox of
the `app` template (git, python3; PANDASTACK_TEST_GIT_TEMPLATE overrides), cloned, committed,
pushed and pulled from two working copies there."""

from __future__ import annotations

import base64
import hashlib
import os
import re
import secrets
import time
from typing import Dict, Iterator, Tuple

import pytest
import pytest_asyncio

from pandastack import (
    AsyncPandaStack,
    GitAuthError,
    GitConflictError,
    GitError,
    PandaStack,
    PandaStackError,
    Sandbox,
)

from conftest import Factory

TEMPLATE = os.environ.get("PANDASTACK_TEST_GIT_TEMPLATE") or "app"
SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "git_http_server.py")
PORT = 8471
URL = f"http://127.0.0.1:{PORT}/repo.git"
#: The bare repository with one commit on main: README.md and shared.txt.
SETUP = """set -e
mkdir -p /srv/git
git init -q --bare -b main /srv/git/repo.git
git -C /srv/git/repo.git config http.receivepack true
git init -q -b main /tmp/seed
cd /tmp/seed
printf 'seed\\n' > README.md
printf 'one\\ntwo\\nthree\\n' > shared.txt
git add -A
git -c user.name=seed -c user.email=seed@example.com commit -q -m seed
git push -q /srv/git/repo.git main
"""


@pytest.fixture(scope="module")
def served(client: PandaStack, tags: Dict[str, str]) -> Iterator[Tuple[Sandbox, str]]:
    """The sandbox with the server running, and the token it accepts (user x-access-token)."""
    f = Factory(client, TEMPLATE, tags)
    try:
        sb = f(metadata={"kind": "git"})
        token = "pdt_" + secrets.token_hex(16)
        with open(SERVER, encoding="utf-8") as src:
            sb.filesystem.write("/srv/git_http_server.py", src.read())
        sb.exec(SETUP, check=True)
        expected = hashlib.sha256(f"x-access-token:{token}".encode()).hexdigest()
        sb.exec(
            [
                "sh",
                "-c",
                'setsid python3 /srv/git_http_server.py /srv/git "$1" "$2" >/tmp/git-http.log 2>&1 </dev/null &',
                "sh",
                str(PORT),
                expected,
            ],
            check=True,
        )
        probe = f"curl -s -o /dev/null -w '%{{http_code}}' {URL}/info/refs"
        ready = sb.exec(f"for i in $(seq 300); do [ \"$({probe})\" = 401 ] && exit 0; sleep 0.1; done; exit 1")
        assert ready.ok, sb.exec("cat /tmp/git-http.log").stdout
        yield sb, token
    finally:
        f.cleanup()


def read(sb: Sandbox, path: str) -> str:
    return sb.filesystem.read(path)


def test_clone_commit_push_pull_round_trip(served: Tuple[Sandbox, str]) -> None:
    sb, token = served
    sb.git.clone(URL, "/work/rt-a", token=token)
    st = sb.git.status("/work/rt-a")
    assert (st.branch, st.upstream, st.ahead, st.behind, st.clean) == ("main", "origin/main", 0, 0, True)
    assert st.commit is not None and re.fullmatch(r"[0-9a-f]{40}", st.commit)

    sb.filesystem.write("/work/rt-a/new.txt", "new\n")
    st = sb.git.status("/work/rt-a")
    assert [(f.path, f.index, f.worktree, f.untracked) for f in st.files] == [("new.txt", "?", "?", True)]
    sb.git.add("/work/rt-a")
    st = sb.git.status("/work/rt-a")
    assert [(f.path, f.index, f.worktree, f.staged) for f in st.files] == [("new.txt", "A", ".", True)]
    sha = sb.git.commit("/work/rt-a", "add new.txt")
    assert re.fullmatch(r"[0-9a-f]{40}", sha)
    st = sb.git.status("/work/rt-a")
    assert (st.commit, st.ahead, st.clean) == (sha, 1, True)
    author = sb.exec(["git", "log", "-1", "--format=%an <%ae>"], cwd="/work/rt-a").stdout
    assert author == "PandaStack <sandbox@pandastack.local>\n"  # the repo has no identity
    sb.git.push("/work/rt-a", token=token)
    assert sb.git.status("/work/rt-a").ahead == 0

    # A second working copy sees the push, and pushes a change of its own.
    sb.git.clone(URL, "/work/rt-b", token=token)
    assert read(sb, "/work/rt-b/new.txt") == "new\n"
    sb.filesystem.write("/work/rt-b/README.md", "changed in b\n")
    sb.git.add("/work/rt-b", ["README.md"])
    sha_b = sb.git.commit("/work/rt-b", "change README", author_name="Agent Smith", author_email="agent@example.com")
    sb.git.push("/work/rt-b", remote="origin", branch="main", token=token)

    sb.git.pull("/work/rt-a", token=token)
    assert read(sb, "/work/rt-a/README.md") == "changed in b\n"
    st = sb.git.status("/work/rt-a")
    assert (st.commit, st.ahead, st.behind) == (sha_b, 0, 0)
    log = sb.exec(["git", "log", "-1", "--format=%an <%ae>|%cn"], cwd="/work/rt-a").stdout
    assert log == "Agent Smith <agent@example.com>|Agent Smith\n"

    # Branches.
    sb.git.create_branch("/work/rt-a", "feature")
    br = sb.git.branches("/work/rt-a")
    assert (br.current, br.local) == ("feature", ["feature", "main"]) and "origin/main" in br.remote
    sb.git.checkout_branch("/work/rt-a", "main")
    sb.git.create_branch("/work/rt-a", "later", checkout=False)
    br = sb.git.branches("/work/rt-a")
    assert (br.current, br.local) == ("main", ["feature", "later", "main"])
    with pytest.raises(GitError) as ei:
        sb.git.checkout_branch("/work/rt-a", "no-such-branch")
    assert "no-such-branch" in str(ei.value) and ei.value.command[:2] == ["git", "switch"]


def test_wrong_or_missing_token_fails_at_once(served: Tuple[Sandbox, str]) -> None:
    sb, token = served
    wrong = "pdt_wrong_" + secrets.token_hex(8)
    t0 = time.monotonic()
    with pytest.raises(GitAuthError) as ei:
        sb.git.clone(URL, "/work/auth-x", token=wrong)
    assert time.monotonic() - t0 < 60  # no prompt waited for
    assert isinstance(ei.value, GitError) and isinstance(ei.value, PandaStackError)
    assert wrong not in str(ei.value) and ei.value.exit_code not in (None, 0)
    with pytest.raises(GitAuthError):
        sb.git.clone(URL, "/work/auth-y")
    sb.git.clone(URL, "/work/auth-ok", token=token)
    sb.filesystem.write("/work/auth-ok/x.txt", "x\n")
    sb.git.add("/work/auth-ok", "x.txt")
    sb.git.commit("/work/auth-ok", "x")
    with pytest.raises(GitAuthError):
        sb.git.push("/work/auth-ok", token=wrong, username="someone")
    with pytest.raises(GitAuthError):
        sb.git.pull("/work/auth-ok", token=wrong)


def test_conflicting_pull_names_the_file(served: Tuple[Sandbox, str]) -> None:
    sb, token = served
    for d in ("/work/cf-a", "/work/cf-b"):
        sb.git.clone(URL, d, token=token)
    sb.filesystem.write("/work/cf-a/shared.txt", "one\nchanged in a\nthree\n")
    sb.git.add("/work/cf-a")
    sb.git.commit("/work/cf-a", "a's change")
    sb.filesystem.write("/work/cf-b/shared.txt", "one\nchanged in b\nthree\n")
    sb.git.add("/work/cf-b")
    sb.git.commit("/work/cf-b", "b's change")
    sb.git.push("/work/cf-b", token=token)
    with pytest.raises(GitError):  # rejected: the remote has b's commit
        sb.git.push("/work/cf-a", token=token)
    with pytest.raises(GitConflictError) as ei:
        sb.git.pull("/work/cf-a", token=token)
    assert ei.value.files == ["shared.txt"] and "shared.txt" in str(ei.value)
    st = sb.git.status("/work/cf-a")
    assert st.conflicts == ["shared.txt"] and st.files[0].conflicted


def test_token_is_in_no_argv_and_no_file(served: Tuple[Sandbox, str]) -> None:
    sb, token = served
    sb.git.clone(URL, "/work/sec", token=token)
    sb.filesystem.write("/work/sec/s.txt", "s\n")
    sb.git.add("/work/sec")
    sb.git.commit("/work/sec", "s")
    # Every process's argv, over and over while the push runs.
    sb.exec(
        "rm -f /tmp/ps.stop; setsid sh -c 'while [ ! -e /tmp/ps.stop ]; do ps -eo args; sleep 0.02; done' "
        ">/tmp/ps.log 2>&1 </dev/null &",
        check=True,
    )
    try:
        sb.git.push("/work/sec", token=token)
    finally:
        sb.exec("touch /tmp/ps.stop; sleep 0.3", check=True)
    listing = read(sb, "/tmp/ps.log")
    # The watcher saw the push (else the next check proves nothing), not the token.
    assert "git push" in listing or "git-remote-http" in listing, "ps never ran during the push"
    assert token not in listing
    # The token and its header form in no file of the working copies, the home directory
    # (credential stores, ~/.gitconfig), /tmp or the served repositories; grep reads them from
    # stdin, so they are in no argv either. Exit 1: nothing found, and no error.
    basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
    found = sb.exec(["grep", "-rlF", "-f", "-", "/work", "/root", "/tmp", "/srv"], stdin=f"{token}\n{basic}\n")
    assert (found.exit_code, found.stdout, found.stderr) == (1, "", "")
    assert token not in read(sb, "/work/sec/.git/config")


@pytest_asyncio.fixture
async def aclient(server_env):
    async with AsyncPandaStack(
        api_key=server_env["PANDASTACK_API_KEY"], base_url=server_env["PANDASTACK_BASE_URL"]
    ) as c:
        yield c


@pytest.mark.asyncio
async def test_async_client(served: Tuple[Sandbox, str], aclient: AsyncPandaStack) -> None:
    sb, token = served
    asb = await aclient.sandboxes.get(sb.id)
    await asb.git.clone(URL, "/work/async", token=token, depth=1, branch="main")
    st = await asb.git.status("/work/async")
    assert (st.branch, st.upstream) == ("main", "origin/main")
    assert (await asb.git.branches("/work/async")).current == "main"
    with pytest.raises(GitError):
        await asb.git.status("/")  # not a repository
