"""The Python reference company ("Manzanita", https://manzanita.example) on real TLS, as a peer.

    python company.py --port PORT --cert cert.pem --key key.pem --ca ca.pem \
        [--agent-domain atlas.example --agent-port 9443] \
        [--static-agent atlas.example=agent.json,jwks.json]

Serves on 127.0.0.1:PORT; clients send Host manzanita.example over port-less URLs (for example
`curl --connect-to manzanita.example:443:127.0.0.1:PORT`). Prints `serving https://manzanita.example
on 127.0.0.1:PORT` once it accepts connections. The company fetches each --agent-domain's client
metadata and JWKS over TLS from 127.0.0.1:--agent-port (trusting --ca), or reads them from the
files of --static-agent.

The reference has no Device Sign-In page; this wrapper adds one at /device (users ada and
ada_business, password "correct horse battery staple": the page posts every hidden input back
with username, password and decision=approve), and a test-only operator API on the same
listener: POST /_operator/approve-device {"user_code", "account", "scopes"}, and
GET /_operator/performed/OPERATION_ID -> {"count": N}. What Manzanita offers is described for the
runners in ../manzanita.scenario.json.

Written for this project (the reference's public API only; see loopback.py).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import html
import json
from urllib.parse import parse_qs, urlsplit

from personal_agent_protocol.demo.kit import InProcessNetwork, json_site
from personal_agent_protocol.demo.manzanita import CONFIG, DOMAIN, manzanita
from personal_agent_protocol.reactor import SystemClock

from loopback import by_host, started, tls_server, transport

#: The device page's accounts: username -> Manzanita account. One password for all.
ACCOUNTS = {"ada": "acct_ada", "ada_business": "acct_ada_business"}
PASSWORD = "correct horse battery staple"
#: The largest request body the wrapper's own routes read.
MAX_BODY = 64 * 1024


def arguments() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, required=True, help="the TLS port on 127.0.0.1")
    p.add_argument("--cert", required=True, help="the leaf (must cover manzanita.example)")
    p.add_argument("--key", required=True, help="the leaf's private key")
    p.add_argument("--ca", required=True, help="the CA trusted when fetching agent documents")
    p.add_argument("--agent-domain", action="append", default=[], help="an agent served on --agent-port")
    p.add_argument("--agent-port", type=int, default=0, help="where the agents' documents are served")
    p.add_argument("--static-agent", action="append", default=[], metavar="DOMAIN=AGENT.json,JWKS.json",
                   help="an agent whose documents are read from files")
    p.add_argument("--device-interval", type=int, default=1, help="Device Sign-In polling interval (s)")
    return p.parse_args()


async def body_of(receive) -> bytes:
    """The request body, refused past MAX_BODY."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if len(body) > MAX_BODY:
            raise ValueError("request body too large")
        if not message.get("more_body"):
            return body


async def answer(send, status: int, content_type: str, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type.encode()), (b"cache-control", b"no-store")]})
    await send({"type": "http.response.body", "body": body})


async def answer_json(send, status: int, value: object) -> None:
    await answer(send, status, "application/json", json.dumps(value).encode())


async def answer_page(send, status: int, title: str, text: str) -> None:
    page = f"<!doctype html><title>{html.escape(title)}</title><p>{html.escape(text)}</p>"
    await answer(send, status, "text/html; charset=utf-8", page.encode())


class Wrapper:
    """Manzanita plus the device page and the operator API."""

    def __init__(self, service, executors, company) -> None:
        self.service = service
        self.executors = executors
        self.company = company

    async def __call__(self, scope, receive, send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or not (path == "/device" or path.startswith("/_operator/")):
            return await self.company(scope, receive, send)
        try:
            body = await body_of(receive)
        except ValueError:
            return await answer_json(send, 413, {"error": "too_large"})
        method = scope["method"]
        if path == "/device" and method == "GET":
            query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
            return await self.device_page(send, query.get("user_code", [""])[0])
        if path == "/device" and method == "POST":
            form = {name: values[0] for name, values in parse_qs(body.decode("utf-8", "replace")).items()}
            return await self.device_decision(send, form)
        if path == "/_operator/approve-device" and method == "POST":
            return await self.operator_approve(send, body)
        if path.startswith("/_operator/performed/") and method == "GET":
            operation = path.removeprefix("/_operator/performed/")
            count = sum(executor.performed.count(operation) for executor in self.executors)
            return await answer_json(send, 200, {"count": count})
        return await answer_json(send, 404, {"error": "not_found"})

    async def device_page(self, send, user_code: str) -> None:
        # Written exactly as the runners read hidden inputs: `<input type="hidden" name=".." value="..">`.
        page = (
            '<!doctype html><title>Approve a device</title><form method="post" action="/device">'
            f'<input type="hidden" name="user_code" value="{html.escape(user_code)}">'
            '<label>Username <input name="username"></label>'
            '<label>Password <input name="password" type="password"></label>'
            '<button name="decision" value="approve">Approve</button></form>'
        )
        await answer(send, 200, "text/html; charset=utf-8", page.encode())

    async def device_decision(self, send, form: dict[str, str]) -> None:
        account = ACCOUNTS.get(form.get("username", ""))
        if account is None or form.get("password") != PASSWORD or form.get("decision") != "approve":
            return await answer_page(send, 403, "Not approved", "Not approved.")
        try:
            await self.service.approve_device(form.get("user_code", ""), account_id=account)
        except KeyError:
            return await answer_page(send, 404, "Unknown code", "Unknown code.")
        await answer_page(send, 200, "Approved", "Approved.")

    async def operator_approve(self, send, body: bytes) -> None:
        try:
            request = json.loads(body or b"{}")
            user_code, account = request["user_code"], request["account"]
        except (ValueError, KeyError, TypeError):
            return await answer_json(send, 400, {"error": "expected {user_code, account, scopes}"})
        try:
            granted = await self.service.approve_device(user_code, account_id=account,
                                                        scopes=request.get("scopes"))
        except KeyError as error:
            return await answer_json(send, 404, {"error": str(error)})
        await answer_json(send, 200, {"granted": list(granted)})


async def unreachable(scope, receive, send) -> None:
    """Agents on --agent-port are dialled over TLS; nothing reaches them in process."""
    raise AssertionError("an agent domain was reached in process")


async def main(args: argparse.Namespace) -> None:
    network = InProcessNetwork()
    for domain in args.agent_domain:
        network.add(domain, unreachable)  # so the company's resolver answers for it
    for spec in args.static_agent:
        domain, files = spec.split("=", 1)
        metadata_file, jwks_file = files.split(",", 1)
        with open(metadata_file) as metadata_in, open(jwks_file) as jwks_in:
            metadata, jwks = json.load(metadata_in), json.load(jwks_in)
        network.add(domain, json_site({urlsplit(metadata["client_id"]).path: metadata,
                                       urlsplit(metadata["jwks_uri"]).path: jwks}))
    service, plugin = manzanita(network, SystemClock(),
                                config=dataclasses.replace(CONFIG, device_interval=args.device_interval))
    executors = (plugin.executor, plugin.gift_wrap, plugin.returns, plugin.repairs)
    network.apps[DOMAIN] = Wrapper(service, executors, network.apps[DOMAIN])
    if args.agent_domain:
        network.socket_transport = transport({d: args.agent_port for d in args.agent_domain}, args.ca)
    server = tls_server(by_host({DOMAIN: network.apps[DOMAIN]}), args.port, args.cert, args.key)
    task = await started(server)
    print(f"serving https://{DOMAIN} on 127.0.0.1:{args.port}", flush=True)
    await task


if __name__ == "__main__":
    asyncio.run(main(arguments()))
