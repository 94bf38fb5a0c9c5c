"""A paired device of the agent's browser, played by the official MCP Python SDK (`mcp` from PyPI,
pinned in mcp-requirements.txt): a client nobody on this project wrote.

    python mcp_client.py http   BASE_URL PAIRING_CODE
    python mcp_client.py stdio  CLIENT_CONFIG
    python mcp_client.py tunnel BASE_URL BEARER_FILE
    python mcp_client.py rtt    BASE_URL (code PAIRING_CODE | bearer-file BEARER_FILE)
    python mcp_client.py reconnect BASE_URL BEARER_FILE ROUNDS
    python mcp_client.py watch  BASE_URL BEARER_FILE URI

`tunnel`: BASE_URL is a device's `pap-agent pair connect` endpoint (AIP-59 pair/v2), with the
endpoint's own bearer from BEARER_FILE; the tunnel serves it as its paired device; the same
session as `http`. `rtt`: times 100 calls of `browser_profile_list` (a tool that touches no page,
so the figures are the path's) and prints their p50 and p99 in milliseconds; with a code it
pairs first (the direct path).

`reconnect`: ROUNDS sessions one after another, none of them ended (`terminate_on_close=False`:
no HTTP DELETE, as a client that crashes or restarts leaves them); each lists the tools and calls
`browser_profile_list`. Prints how many worked; every one must (issue 39).

`watch`: listens (`subscriptions/listen`, protocol 2026-07-28) for changes of the resource URI,
says `mcp_client: watching` on stderr once the server acknowledged it, waits (2 minutes at most)
for `notifications/resources/updated`, then reads the resource and prints one JSON line: the
protocol, the URI heard, the resource's `state` and how many milliseconds after `watching` it
was heard.

`http`: redeems PAIRING_CODE at BASE_URL/pair (AIP-59) for a bearer, then speaks streamable HTTP
to BASE_URL/mcp with it. `stdio`: spawns the server exactly as CLIENT_CONFIG (a config
`pap-agent install-mcp --client cursor` wrote) says. Either way it lists the tools (every name
must match ^[a-zA-Z0-9_-]{1,64}$: Claude Desktop withholds the whole tool set when one name
fails it), loads https://shop.example/ and takes a screenshot (MCP image content, a PNG), then
carries a Session of its own into the website: `pap_session_start`, `pap_signin_start` (it
prints `mcp_client: approve USER_CODE` on stderr and waits: the person approves at the
company), `pap_propose`, `pap_join` onto the operation's page; it reads the page, and its
click on the page's confirm button must be refused (AIP-7: the person decides). It finds the
operation among the resources, reads it (still `proposed`) and watches it for the person's
decision (`subscriptions/listen` at protocol 2026-07-28, `resources/subscribe` before). It prints one
JSON line of what it saw (the tool names among it) and exits 0, or names what failed and exits 1.
"""

import asyncio
import base64
import json
import re
import sys
import time
import warnings

import httpx2
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPDeprecationWarning


# What Claude Desktop (and OpenAI's function names) accept as a tool name.
MCP_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")


def fail(what):
    print(f"mcp_client: {what}", file=sys.stderr)
    sys.exit(1)


async def tool(client, name, arguments):
    result = await client.call_tool(name, arguments)
    if result.is_error:
        fail(f"{name} answered an error: {result.structured_content}")
    return result


async def session(client):
    listed = await client.list_tools()
    names = {t.name for t in listed.tools}
    refused = sorted(n for n in names if not MCP_NAME.fullmatch(n))
    if refused:
        fail(f"tool names MCP clients refuse: {refused}")
    for wanted in ("browser_navigate", "browser_screenshot", "browser_get_dom", "pap_join"):
        if wanted not in names:
            fail(f"{wanted} is not listed: {sorted(names)}")

    opened = await tool(client, "browser_navigate", {"url": "https://shop.example/"})
    target = opened.structured_content["target"]
    shot = await tool(client, "browser_screenshot", {"target": target})
    images = [c for c in shot.content if getattr(c, "type", None) == "image"]
    if not images or images[0].mime_type != "image/png":
        fail(f"the screenshot is not PNG image content: {shot.content}")
    png = base64.b64decode(images[0].data)
    if not png.startswith(b"\x89PNG"):
        fail("the screenshot's data is not a PNG")

    shop = {"domain": "shop.example"}
    await tool(client, "pap_session_start", shop)
    signin = await tool(client, "pap_signin_start", shop)
    print(f"mcp_client: approve {signin.structured_content['userCode']}", file=sys.stderr, flush=True)
    for _ in range(300):
        status = (await tool(client, "pap_signin_status", shop)).structured_content
        if status["state"] == "signed_in":
            break
        if status["state"] != "pending":
            fail(f"the sign-in did not finish: {status}")
        await asyncio.sleep(0.2)
    else:
        fail("the sign-in was not approved in 60 s")
    proposed = await tool(
        client, "pap_propose", {**shop, "method": "POST", "path": "/api/orders/ord_7Hk2/exchanges"}
    )
    operation = proposed.structured_content
    page_url = operation["url"]

    joined = await tool(client, "pap_join", {**shop, "returnTo": page_url})
    landed = joined.structured_content
    if landed["url"] != page_url or landed["status"] != 200:
        fail(f"the join did not land on the operation page: {landed}")
    page = await tool(client, "browser_get_dom", {"target": landed["target"]})
    html = page.structured_content["html"]
    if 'value="confirm"' not in html:
        fail("the operation page has no confirm form")
    click = await client.call_tool("browser_click", {"target": landed["target"], "selector": "button[value=confirm]"})
    if not click.is_error or click.structured_content.get("code") != "permission_denied":
        fail(f"a tool's click on the confirm button was not refused: {click}")

    refused = await client.call_tool("browser_navigate", {"url": "file:///etc/passwd"})
    if not refused.is_error or refused.structured_content.get("code") != "permission_denied":
        fail(f"file: was not refused as permission_denied: {refused}")

    # The operation as a resource: listed, read (still proposed: the tool's click changed
    # nothing), and watched for the person's decision, as the negotiated protocol does it.
    uri = f"pap://shop.example/operations/{operation['operation_id']}"
    resources = await client.list_resources()
    if uri not in {str(r.uri) for r in resources.resources}:
        fail(f"{uri} is not among the listed resources: {resources}")
    read = await client.read_resource(uri)
    state = json.loads(read.contents[0].text)["state"]
    if state != "proposed":
        fail(f"the operation's resource reads {state}, not proposed")
    if client.protocol_version >= "2026-07-28":
        async with client.listen(resource_subscriptions=[uri]) as subscription:
            if uri not in (subscription.honored.resource_subscriptions or ()):
                fail(f"subscriptions/listen did not honour {uri}: {subscription.honored}")
        watched = "subscriptions/listen"
    else:
        # Deprecated only from 2026-07-28 on, which this session did not negotiate.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            await client.subscribe_resource(uri)
        watched = "resources/subscribe"

    return {
        "protocolVersion": client.protocol_version,
        "tools": len(names),
        "names": sorted(names),
        "screenshotBytes": len(png),
        "operation": operation["operation_id"],
        "joined": landed["url"],
        "confirmRefused": True,
        "pageBytes": len(html),
        "resourceWatched": watched,
    }


async def over_http(base, code):
    async with httpx2.AsyncClient() as plain:
        paired = await plain.post(f"{base}/pair", json={"code": code})
        if paired.status_code != 200:
            fail(f"POST /pair answered {paired.status_code}")
        bearer = paired.json()["bearer"]
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {bearer}"})
    async with http:
        async with Client(streamable_http_client(f"{base}/mcp", http_client=http)) as client:
            return await session(client)


def bearer_of(path):
    with open(path) as f:
        return f.read().strip()


async def over_tunnel(base, bearer_file):
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {bearer_of(bearer_file)}"})
    async with http:
        async with Client(streamable_http_client(f"{base}/mcp", http_client=http)) as client:
            return await session(client)


async def round_trips(base, how, value):
    if how == "code":
        async with httpx2.AsyncClient() as plain:
            paired = await plain.post(f"{base}/pair", json={"code": value})
            if paired.status_code != 200:
                fail(f"POST /pair answered {paired.status_code}")
            bearer = paired.json()["bearer"]
    elif how == "bearer-file":
        bearer = bearer_of(value)
    else:
        fail(__doc__)
    headers = {"Authorization": f"Bearer {bearer}"}
    http = create_mcp_http_client(headers=headers)
    async with http:
        async with Client(streamable_http_client(f"{base}/mcp", http_client=http)) as client:
            await tool(client, "browser_profile_list", {})
            version = client.protocol_version
            took = []
            for _ in range(100):
                # Paced under the host's per-device rate limit (10 calls a second a tool);
                # each call is timed alone.
                await asyncio.sleep(0.11)
                started = time.perf_counter()
                await tool(client, "browser_profile_list", {})
                took.append((time.perf_counter() - started) * 1000)
    took.sort()
    return {
        "protocolVersion": version,
        "calls": len(took),
        "p50Ms": round(took[49], 2),
        "p99Ms": round(took[98], 2),
    }


async def watch(base, bearer_file, uri):
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {bearer_of(bearer_file)}"})
    async with http:
        async with Client(streamable_http_client(f"{base}/mcp", http_client=http)) as client:
            if client.protocol_version < "2026-07-28":
                fail(f"subscriptions/listen needs 2026-07-28; negotiated {client.protocol_version}")
            async with client.listen(resource_subscriptions=[uri]) as subscription:
                if uri not in (subscription.honored.resource_subscriptions or ()):
                    fail(f"subscriptions/listen did not honour {uri}: {subscription.honored}")
                print("mcp_client: watching", file=sys.stderr, flush=True)
                began = time.perf_counter()
                try:
                    async with asyncio.timeout(120):
                        async for event in subscription:
                            heard = getattr(event, "uri", None)
                            if heard == uri:
                                break
                        else:
                            fail("the stream ended before the resource changed")
                except TimeoutError:
                    fail(f"no notifications/resources/updated for {uri} within 120 s")
                took = (time.perf_counter() - began) * 1000
            read = await client.read_resource(uri)
            return {
                "protocolVersion": client.protocol_version,
                "heard": heard,
                "state": json.loads(read.contents[0].text)["state"],
                "afterWatchingMs": round(took, 1),
            }


async def reconnects(base, bearer_file, rounds):
    headers = {"Authorization": f"Bearer {bearer_of(bearer_file)}"}
    working = 0
    failures = []
    version = None
    for round_ in range(rounds):
        try:
            http = create_mcp_http_client(headers=headers)
            async with http:
                transport = streamable_http_client(f"{base}/mcp", http_client=http, terminate_on_close=False)
                async with Client(transport) as client:
                    version = client.protocol_version
                    listed = await client.list_tools()
                    if "browser_profile_list" not in {t.name for t in listed.tools}:
                        raise RuntimeError("browser_profile_list is not listed")
                    for _ in range(20):
                        result = await client.call_tool("browser_profile_list", {})
                        code = (result.structured_content or {}).get("code")
                        if result.is_error and code == "rate_limited":
                            await asyncio.sleep(result.structured_content["cause"]["retryAfterMs"] / 1000)
                            continue
                        break
                    if result.is_error:
                        raise RuntimeError(f"browser_profile_list answered {result.structured_content}")
            working += 1
        except Exception as error:  # noqa: BLE001 - each round's failure is reported, not raised
            failures.append({"round": round_, "error": str(error)[:300]})
    return {"protocolVersion": version, "rounds": rounds, "working": working, "failures": failures}


async def over_stdio(config_path):
    with open(config_path) as f:
        servers = json.load(f)["mcpServers"]
    # The local host's entry, or one host's through the tunnel (pap-agent-browser-<fp>).
    ours = [name for name in servers if name.startswith("pap-agent-browser")]
    if len(ours) != 1:
        fail(f"expected one pap-agent-browser entry in {config_path}: {sorted(servers)}")
    entry = servers[ours[0]]
    server = StdioServerParameters(command=entry["command"], args=entry["args"])
    async with Client(server) as client:
        return await session(client)


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode == "http" and len(sys.argv) == 4:
        seen = asyncio.run(over_http(sys.argv[2], sys.argv[3]))
    elif mode == "stdio" and len(sys.argv) == 3:
        seen = asyncio.run(over_stdio(sys.argv[2]))
    elif mode == "tunnel" and len(sys.argv) == 4:
        seen = asyncio.run(over_tunnel(sys.argv[2], sys.argv[3]))
    elif mode == "rtt" and len(sys.argv) == 5:
        timed = asyncio.run(round_trips(sys.argv[2], sys.argv[3], sys.argv[4]))
        print(json.dumps({"mode": mode, **timed}))
        print(f"mcp_client: rtt: {timed['calls']} calls, p50 {timed['p50Ms']} ms, p99 {timed['p99Ms']} ms", file=sys.stderr)
        return
    elif mode == "reconnect" and len(sys.argv) == 5:
        counted = asyncio.run(reconnects(sys.argv[2], sys.argv[3], int(sys.argv[4])))
        print(json.dumps({"mode": mode, **counted}))
        print(f"mcp_client: reconnect: {counted['working']} of {counted['rounds']} sessions worked", file=sys.stderr)
        if counted["working"] != counted["rounds"]:
            sys.exit(1)
        return
    elif mode == "watch" and len(sys.argv) == 5:
        heard = asyncio.run(watch(sys.argv[2], sys.argv[3], sys.argv[4]))
        print(json.dumps({"mode": mode, **heard}))
        return
    else:
        fail(__doc__)
    print(json.dumps({"mode": mode, **seen}))
    print(f"mcp_client: {mode}: MCP {seen['protocolVersion']}, {seen['tools']} tools, joined {seen['joined']}", file=sys.stderr)


if __name__ == "__main__":
    main()
