#!/usr/bin/env bash
# The MCP server through the MCP Inspector's CLI mode (npm `@modelcontextprotocol/inspector`,
# installed into $PANDASTACK_CACHE/mcp-inspector), over stdio (`$PANDASTACK_BIN mcp`): the tools
# listed, then every tool called — a sandbox created, a file written, code that reads it run in
# the default and in a new context, a command, the file read and listed, a preview URL, a
# snapshot, a fork whose child sees the file, the list; the platform tools answered by their
# routes (refusals that need no database VM or app build); the sandbox killed, and a call on it
# afterwards a tool error with the API's code.
#
# Needs PANDASTACK_BASE_URL, PANDASTACK_API_KEY, PANDASTACK_BIN and PANDASTACK_TEST_TEMPLATE, as
# tests/mcp/test_mcp.py. The Inspector's CLI (0.15) sends no HTTP headers, so it cannot give
# `/mcp` a bearer key: the HTTP transport is tested by test_mcp.py only.
set -euo pipefail

: "${PANDASTACK_BASE_URL:?}" "${PANDASTACK_API_KEY:?}" "${PANDASTACK_BIN:?}" "${PANDASTACK_TEST_TEMPLATE:?}"
cache=${PANDASTACK_CACHE:-/var/cache/pandastack}/mcp-inspector
version=0.15.0
if [[ ! -x $cache/node_modules/.bin/mcp-inspector ]]; then
    npm install --prefix "$cache" --no-audit --no-fund --loglevel=error \
        "@modelcontextprotocol/inspector@$version" >&2
fi

inspector() {
    "$cache/node_modules/.bin/mcp-inspector" --cli \
        -e "PANDASTACK_API_KEY=$PANDASTACK_API_KEY" -e "PANDASTACK_BASE_URL=$PANDASTACK_BASE_URL" \
        -e PANDASTACK_LOG=warn "$PANDASTACK_BIN" mcp "$@"
}

# call TOOL [key=value…]: the tool's result (JSON) on stdout.
call() {
    local tool=$1
    shift
    if (($#)); then
        inspector --method tools/call --tool-name "$tool" --tool-arg "$@"
    else
        inspector --method tools/call --tool-name "$tool"
    fi
}

# get EXPR: evaluates a Python expression over the result on stdin (`r`: the result, `s`: its
# structured content); fails the script, printing the result, if the tool reported an error.
get() {
    python3 -c '
import json, sys
r = json.load(sys.stdin)
if r.get("isError"):
    sys.exit("tool error: " + json.dumps(r))
s = r.get("structuredContent")
print(eval(sys.argv[1]))' "$1"
}

# expect_error CODE: the result on stdin is a tool error with the API code CODE.
expect_error() {
    python3 -c '
import json, sys
r = json.load(sys.stdin)
code = (r.get("structuredContent") or {}).get("error", {}).get("code")
if not r.get("isError") or code != sys.argv[1]:
    sys.exit("expected a tool error " + sys.argv[1] + ", got " + json.dumps(r))' "$1"
}

check() { # check WHAT ACTUAL EXPECTED
    if [[ $2 != "$3" ]]; then
        echo "inspector: $1: got '$2', expected '$3'" >&2
        exit 1
    fi
    echo "inspector: $1 ok" >&2
}

n=$(inspector --method tools/list | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["tools"]))')
check "tools/list" "$n" 18

sb=$(call create_sandbox "template=$PANDASTACK_TEST_TEMPLATE" ttl_seconds=600 \
    'metadata={"suite":"mcp-inspector"}' | get 's["id"]')
trap 'call kill_sandbox "sandbox_id=$sb" >/dev/null 2>&1 || true' EXIT
check "create_sandbox" "${sb:0:3}" "sb-"
check "write_file" "$(call write_file "sandbox_id=$sb" path=/tmp/inspector.txt 'content=hello inspector' |
    get 's["bytes_written"]')" 15
check "run_code" "$(call run_code "sandbox_id=$sb" "code=open('/tmp/inspector.txt').read()" |
    get 's["results"][0]["text"]')" "'hello inspector'"
ctx=$(call create_code_context "sandbox_id=$sb" | get 's["id"]')
call run_code "sandbox_id=$sb" "context_id=$ctx" 'code=y = 41' | get 's["error"]' >/dev/null
check "run_code in a context" "$(call run_code "sandbox_id=$sb" "context_id=$ctx" 'code=y + 1' |
    get 's["results"][0]["text"]')" 42
check "run_command" "$(call run_command "sandbox_id=$sb" 'command=cat /tmp/inspector.txt; exit 3' |
    get 's["exit_code"], s["stdout"]')" "(3, 'hello inspector')"
check "read_file" "$(call read_file "sandbox_id=$sb" path=/tmp/inspector.txt | get 's["content"]')" \
    "hello inspector"
check "list_files" "$(call list_files "sandbox_id=$sb" path=/tmp |
    get 'any(e["path"] == "/tmp/inspector.txt" for e in s["entries"])')" True
url=$(call get_file_url "sandbox_id=$sb" path=/tmp/inspector.txt | get 's["url"]')
check "get_file_url: fetched with no key" "$(curl -sS "$url")" "hello inspector"
check "get_preview_url" "$(call get_preview_url "sandbox_id=$sb" port=8000 |
    get 's["port"], s["url"].startswith("http")')" "(8000, True)"
check "snapshot_sandbox" "$(call snapshot_sandbox "sandbox_id=$sb" | get 's["sandbox_id"]')" "$sb"
child=$(call fork_sandbox "sandbox_id=$sb" 'metadata={"suite":"mcp-inspector"}' |
    get 's["children"][0]["id"]')
check "fork_sandbox: the child has the file" "$(call run_command "sandbox_id=$child" \
    'command=cat /tmp/inspector.txt' | get 's["stdout"]')" "hello inspector"
check "list_sandboxes" "$(call list_sandboxes state=running |
    get "sum(x['id'] in ('$sb', '$child') for x in s['sandboxes'])")" 2
call kill_sandbox "sandbox_id=$child" | get 's["killed"]' >/dev/null

call query_database database=nodb_inspector 'sql=select 1' | expect_error database_not_found
call create_database name=Bad-Name | expect_error invalid_argument
call deploy_app name=inspector-app git_url=file:///etc | expect_error invalid_argument
call get_app name=no-app-inspector | expect_error app_not_found
call invoke_function name=no-fn-inspector 'event={"x":1}' | expect_error app_not_found
echo "inspector: platform tools ok" >&2

check "kill_sandbox" "$(call kill_sandbox "sandbox_id=$sb" | get 's["killed"]')" "$sb"
trap - EXIT
call run_command "sandbox_id=$sb" command=true | expect_error sandbox_not_found
echo "inspector: all tools called" >&2
