#!/usr/bin/env bash
# Runs the agent-framework recipes in this folder — OpenAI Agents SDK, LangChain/LangGraph, the
# MCP route (Python) and the Vercel AI SDK (Node) — against a PandaStack server, each failing
# unless its agent's answer has what the sandbox computed. Without OPENAI_API_KEY their models are
# scripted (no key, no network but the server's); with it they call a real OpenAI model.
#
#   PANDASTACK_BASE_URL=… PANDASTACK_API_KEY=… [PANDASTACK_TEMPLATE=minimal] examples/recipes/run.sh
#
# Python packages (requirements.txt and ./sdk/python) go into a venv in $PANDASTACK_CACHE
# (default /var/cache/pandastack), made once; npm packages into examples/recipes/node_modules
# (git-ignored) from the committed lockfile. The TypeScript SDK must be built first
# (`cd sdk/typescript && npm ci && npm run build`). scripts/test-clients.sh runs this.
set -euo pipefail

: "${PANDASTACK_BASE_URL:?}" "${PANDASTACK_API_KEY:?}"
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
[[ -f $root/sdk/typescript/dist/index.js ]] || { echo "recipes: build sdk/typescript first" >&2; exit 2; }

venv=${PANDASTACK_CACHE:-/var/cache/pandastack}/venv-recipes
[[ -x $venv/bin/python ]] || python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check -r "$here/requirements.txt" "$root/sdk/python"
(cd "$here" && npm ci --no-audit --no-fund --loglevel=error)

for recipe in openai_agents_sdk.py langgraph_agent.py mcp_agent.py ai-sdk.mjs; do
    printf '\nrecipes: %s\n' "$recipe" >&2
    case $recipe in
    *.py) timeout 300 "$venv/bin/python" "$here/$recipe" ;;
    *.mjs) timeout 300 node "$here/$recipe" ;;
    esac
done
echo "recipes: all passed" >&2
