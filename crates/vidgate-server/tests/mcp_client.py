"""The official `mcp` Python SDK (pinned in .ci/run) against vidgate's /mcp.

`tests/it/dialects/mcp.rs` (`the_mcp_sdk_drives_the_tools`) starts a server
and runs this script with a Python that has `mcp==2.3.0`: its Streamable HTTP
client initializes, lists the tools and calls each, with the vidgate key as
`Authorization: Bearer`, as an agent's MCP client would.

Arguments: the server's /mcp URL and key.
Prints `mcp: ... ok` lines and `ids: <id> ...` of what it made.
"""

import asyncio
import sys

import httpx2
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

URL, KEY = sys.argv[1:3]
TOOLS = {"list_models", "quote", "create_generation", "get_generation", "cancel_generation", "list_generations"}
REQUEST = {"model": "vendor_1/model_1", "mode": "text-to-video", "input": {"prompt": "a kite from an agent", "duration": 2, "resolution": "480p"}}


def check(condition, message):
    if not condition:
        raise SystemExit(f"FAILED: {message}")


async def call(session, name, arguments):
    result = await session.call_tool(name, arguments)
    structured = result.structured_content
    check(result.content and result.content[0].type == "text", f"{name} has text too: {result}")
    return result.is_error, structured


async def main():
    made = []
    headers = {"Authorization": f"Bearer {KEY}"}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http_client:
        async with streamable_http_client(URL, http_client=http_client) as (read, write, *_):
            async with ClientSession(read, write) as session:
                info = await session.initialize()
                check(info.server_info.name == "vidgate", info.server_info)
                print("mcp: initialize ok")

                listed = await session.list_tools()
                names = {tool.name for tool in listed.tools}
                check(names == TOOLS, f"the six tools: {names}")
                print("mcp: list_tools ok")

                failed, models = await call(session, "list_models", {})
                check(not failed and models["object"] == "list" and len(models["data"]) >= 6, models)
                failed, quote = await call(session, "quote", REQUEST)
                check(not failed and quote["object"] == "quote" and quote["cost"]["amount_usd"] > 0, quote)
                failed, generation = await call(session, "create_generation", dict(REQUEST, idempotency_key="agent-1"))
                check(not failed and generation["object"] == "generation", generation)
                check(generation["source"] == "mcp", generation)
                made.append(generation["id"])
                failed, again = await call(session, "create_generation", dict(REQUEST, idempotency_key="agent-1"))
                check(not failed and again["id"] == generation["id"], "a retry with one key replays")
                for _ in range(300):
                    failed, current = await call(session, "get_generation", {"id": generation["id"]})
                    check(not failed, current)
                    if current["status"] not in ("queued", "running"):
                        break
                    await asyncio.sleep(0.2)
                check(current["status"] == "succeeded", current)
                check(current["cost"]["amount_usd"] == quote["cost"]["amount_usd"], "charged as quoted")
                failed, page = await call(session, "list_generations", {"limit": 10})
                check(not failed and generation["id"] in [item["id"] for item in page["data"]], page)
                failed, refused = await call(session, "cancel_generation", {"id": generation["id"]})
                check(failed and refused["error"]["code"] == "conflict", refused)
                failed, invalid = await call(session, "create_generation", dict(REQUEST, input={"prompt": ""}))
                check(failed and invalid["error"]["param"] == "prompt" and invalid["status"] == 400, invalid)
                print("mcp: call_tool ok")
    print("ids: " + " ".join(made))


asyncio.run(main())
