"""One MCP session against `afk-supervisor mcp` with the official Python SDK (`mcp`).

argv: <binary> <repo> <mode>, mode `read` (no --allow-writes) or `write`. Prints one JSON
object: the initialize instructions, the tool list, and each call's result (structured
content, text, isError), in the order made. The Rust test judges them."""

import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def result(r):
    text = "\n".join(getattr(c, "text", "") for c in (r.content or []))
    return {"is_error": bool(r.is_error), "structured": r.structured_content, "text": text}


async def call(session, out, label, name, args):
    try:
        r = await session.call_tool(name, args)
        out["calls"].append({"label": label, **result(r)})
    except Exception as e:  # a JSON-RPC error answer
        out["calls"].append({"label": label, "is_error": True, "structured": None,
                             "text": f"{type(e).__name__}: {e}", "rpc_error": True})


async def main():
    binary, repo, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    args = ["--repo", repo, "mcp"] + (["--allow-writes"] if mode == "write" else [])
    params = StdioServerParameters(command=binary, args=args)
    out = {"calls": []}
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            out["instructions"] = init.instructions
            out["server"] = init.server_info.name
            tools = await session.list_tools()
            out["tools"] = sorted(t.name for t in tools.tools)
            out["schemas"] = {t.name: {"input": t.input_schema, "output": t.output_schema}
                              for t in tools.tools}
            res = await session.list_resources()
            out["resources"] = sorted(str(r.uri) for r in res.resources)
            try:
                state = await session.read_resource("afk://state.toon")
                out["state_resource"] = state.contents[0].text
            except Exception as e:
                out["state_resource_error"] = str(e)
            c = call
            if mode == "read":
                await c(session, out, "status", "fleet_status", {})
                await c(session, out, "issues", "list_issues", {"label": "ready-for-agent"})
                await c(session, out, "issues_all", "list_issues", {"state": "all"})
                await c(session, out, "issue", "show_issue", {"number": 1})
                await c(session, out, "events", "tail_events", {"limit": 5})
                await c(session, out, "events_kind", "tail_events",
                        {"kinds": ["slot.spawn"], "limit": 1000})
                await c(session, out, "slot_log", "slot_log", {"slot": 0, "lines": 5})
                await c(session, out, "spend", "spend", {})
                await c(session, out, "spend_by_issue", "spend", {"by": "issue"})
                await c(session, out, "bad_spend", "spend", {"by": "week"})
                await c(session, out, "write_refused", "scale", {"target": 1})
                await c(session, out, "pause_refused", "pause_fleet", {"reason": "x"})
                await c(session, out, "unknown_tool", "no_such_tool", {})
                await c(session, out, "huge_cursor", "tail_events", {"since": "e1-" + "f" * (1 << 20)})
                await c(session, out, "bad_state", "list_issues", {"state": "sideways"})
                await c(session, out, "status_again", "fleet_status", {})
            else:
                await c(session, out, "negative", "scale", {"target": -1})
                await c(session, out, "too_big", "scale", {"target": 100000})
                await c(session, out, "huge_reason", "pause_fleet", {"reason": "r" * (1 << 20)})
                await c(session, out, "bad_slot", "stop_slot", {"slot": 99})
                await c(session, out, "scale", "scale", {"target": 1, "mode": "hard-kill"})
                await c(session, out, "pause", "pause_fleet", {"reason": "via mcp"})
                await c(session, out, "give_back_closed", "give_back", {"number": 99999})
                # #2 is ready-for-human, #3 quarantined (the Rust test files them).
                await c(session, out, "give_back", "give_back", {"number": 2})
                await c(session, out, "give_back_again", "give_back", {"number": 2})
                await c(session, out, "release_unquarantined", "release_quarantine", {"number": 1})
                await c(session, out, "release", "release_quarantine", {"number": 3})
                await c(session, out, "stop_slot", "stop_slot", {"slot": 0, "mode": "hard-kill"})
                await c(session, out, "status_after", "fleet_status", {})
    print(json.dumps(out))


asyncio.run(main())
