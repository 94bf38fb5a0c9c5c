"""The Python reference's PAP conformance runner against any company over real TLS, as a peer.

    python runner.py --company shop.example --port PORT --ca ca.pem --scenario S.json \
        [--cert cert.pem --key key.pem --agent-port APORT] [--agent-key agent.pem] \
        [--approve device-page|operator] [--username U --password P] [--operator URL] \
        [--performed] [--case ID ...] [--all] [--json OUT] [--junit OUT]
    python runner.py --agent-key agent.pem --write-agent-docs DIR

The company is https://COMPANY (no port in any public URL), dialled at 127.0.0.1:PORT with TLS
naming COMPANY and trusting --ca only. The runner plays the reference's personal agent "Atlas"
(client_id https://AGENT/agent.json); with --agent-port it serves Atlas's client metadata and
JWKS over TLS on 127.0.0.1:--agent-port (leaf --cert/--key, which must cover --agent-domain),
where the company fetches them. --agent-key keeps the agent's P-256 key in a PEM file (created
0600 when missing), so its documents stay the same across runs; --write-agent-docs writes them
and exits.

The user's approval of Device Sign-In:
  --approve device-page  GET https://COMPANY/device?user_code=CODE, then POST /device with every
                         `<input type="hidden" name=".." value="..">` of that page plus username,
                         password and decision=approve (Origin and Sec-Fetch-Site: same-origin).
  --approve operator     POST {operator}/approve-device {"user_code", "account", "scopes"}.
With --performed, GET {operator}/performed/{operation_id} answers {"count": N}, and the
web-confirm case checks that the operation ran exactly once.

The scenario file (see ../shop.example.scenario.json) says what the company offers: scopes, the
API calls that propose operations, the website's confirm form, the accounts.

Default cases: the three about the website (lifecycle.browser-joins-session,
lifecycle.browser-assertion-refused, operations.web-confirm-at-most-once). Exit status: 0 when
every selected case passed, 1 when any failed or was skipped (a skip is no pass), 2 on a set-up
error.

Written for this project (the reference's public API only; see loopback.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import ssl
import sys
from pathlib import Path

import httpx
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from personal_agent_protocol.conformance import (
    CASES,
    ConformanceContext,
    Proposal,
    Scenario,
    run_conformance,
    select_cases,
)
from personal_agent_protocol.demo.kit import AgentIdentity, InProcessNetwork

from loopback import by_host, started, tls_server, transport

WEBSITE_CASES = (
    "lifecycle.browser-joins-session",
    "lifecycle.browser-assertion-refused",
    "operations.web-confirm-at-most-once",
)
HIDDEN_INPUT = re.compile(r'<input type="hidden" name="([^"]+)" value="([^"]*)">')


def arguments() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--company", default="shop.example", help="the company's domain")
    p.add_argument("--port", type=int, help="the company's TLS port on 127.0.0.1")
    p.add_argument("--ca", help="the CA of the company's (and the agent site's) certificate")
    p.add_argument("--cert", help="the agent site's leaf (must cover --agent-domain)")
    p.add_argument("--key", help="that leaf's private key")
    p.add_argument("--agent-domain", default="atlas.example")
    p.add_argument("--agent-port", type=int, default=0, help="serve the agent site here (0: do not)")
    p.add_argument("--agent-key", type=Path, help="PEM file with the agent's P-256 key (created if missing)")
    p.add_argument("--write-agent-docs", type=Path, metavar="DIR", help="write agent.json and jwks.json, then exit")
    p.add_argument("--scenario", type=Path, help="what the company offers (JSON)")
    p.add_argument("--approve", choices=("device-page", "operator"), default="device-page")
    p.add_argument("--username", default="ada", help="the account signed in to on the device page")
    p.add_argument("--password", default="", help="its password")
    p.add_argument("--operator", help="the operator API's base URL (default https://COMPANY/_operator)")
    p.add_argument("--performed", action="store_true", help="ask the operator API how often an operation ran")
    p.add_argument("--case", action="append", default=[], help="a case id (repeatable)")
    p.add_argument("--all", action="store_true", help="every case of the reference suite")
    p.add_argument("--json", type=Path, help="write the report as JSON")
    p.add_argument("--junit", type=Path, help="write the report as JUnit XML")
    return p.parse_args()


def agent_identity(args: argparse.Namespace) -> AgentIdentity:
    if args.agent_key is None:
        return AgentIdentity(domain=args.agent_domain, name="Atlas")
    if args.agent_key.exists():
        key = serialization.load_pem_private_key(args.agent_key.read_bytes(), password=None)
    else:
        key = ec.generate_private_key(ec.SECP256R1())
        pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
        args.agent_key.touch(mode=0o600, exist_ok=False)
        args.agent_key.write_bytes(pem)
    return AgentIdentity(domain=args.agent_domain, name="Atlas", private_key=key)


def read_scenario(path: Path) -> tuple[Scenario, tuple[str, str]]:
    """The scenario, and the company's two accounts (the suite's user and a second one)."""
    data = json.loads(path.read_text())
    proposals = {
        kind: Proposal(p["method"], p["path"], body=p.get("body"), documented_as=p.get("documented_as"))
        for kind, p in data.get("proposals", {}).items()
    }
    scenario = Scenario(
        read_path=data.get("read_path", "/"),
        read_scope=data.get("read_scope", ""),
        scopes=tuple(data["scopes"]),
        proposals=proposals,
        web_confirm_form=data.get("web_confirm_form"),
    )
    accounts = tuple(data.get("accounts", ("ada", "ada_business")))
    return scenario, (accounts[0], accounts[-1])


class Driver:
    """Plays the user approving Device Sign-In and, with --performed, the company's operator."""

    other_identity = None

    def __init__(self, args: argparse.Namespace, user_browser: httpx.AsyncClient,
                 operator_http: httpx.AsyncClient, accounts: tuple[str, str]) -> None:
        self.args = args
        self.accounts = accounts
        self.user_browser = user_browser  # the user's own browser, with its own cookies
        self.operator_http = operator_http
        self.base = f"https://{args.company}"
        self.operator = (args.operator or f"{self.base}/_operator").rstrip("/")
        self.capabilities = frozenset({"performed"}) if args.performed else frozenset()

    async def approve_device(self, user_code: str, *, account: str, scopes=None) -> None:
        if self.args.approve == "operator":
            request = {"user_code": user_code, "account": account,
                       "scopes": list(scopes) if scopes else None}
            (await self.operator_http.post(f"{self.operator}/approve-device", json=request)).raise_for_status()
            return
        page = await self.user_browser.get(f"{self.base}/device", params={"user_code": user_code})
        if page.status_code != 200:
            raise RuntimeError(f"GET /device answered {page.status_code}")
        form = dict(HIDDEN_INPUT.findall(page.text))
        form.setdefault("user_code", user_code)
        form.update(username=self.args.username, password=self.args.password, decision="approve")
        decided = await self.user_browser.post(
            f"{self.base}/device", data=form, follow_redirects=True,
            headers={"Origin": self.base, "Sec-Fetch-Site": "same-origin"},
        )
        if decided.status_code != 200:
            raise RuntimeError(f"POST /device answered {decided.status_code}")

    async def wait(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def performed(self, operation_id: str) -> int:
        response = await self.operator_http.get(f"{self.operator}/performed/{operation_id}")
        response.raise_for_status()
        return int(response.json()["count"])

    # Hooks this driver does not play: the cases that need them are skipped (and a skip fails).
    async def approve_authorization(self, *_, **__):
        raise NotImplementedError("Direct Sign-In is not played")

    async def revise(self, *_):
        raise NotImplementedError("revising an operation is not played")

    async def forget_events(self, *_):
        raise NotImplementedError("forgetting events is not played")

    async def disconnect(self, *_):
        raise NotImplementedError("disconnecting is not played")


async def unreachable(scope, receive, send) -> None:
    """The company is dialled over TLS; nothing reaches it in process."""
    raise AssertionError("the company was reached in process")


async def run(args: argparse.Namespace) -> int:
    identity = agent_identity(args)
    if args.write_agent_docs is not None:
        args.write_agent_docs.mkdir(parents=True, exist_ok=True)
        (args.write_agent_docs / "agent.json").write_text(json.dumps(identity.metadata, indent=1) + "\n")
        (args.write_agent_docs / "jwks.json").write_text(json.dumps(identity.jwks, indent=1) + "\n")
        print(f"wrote {args.write_agent_docs}/agent.json and jwks.json for {identity.client_id}")
        return 0
    missing = [name for name in ("port", "ca", "scenario") if getattr(args, name) is None]
    if args.agent_port and not (args.cert and args.key):
        missing += ["cert", "key"]
    if missing:
        print(f"runner: missing {', '.join('--' + m for m in missing)}", file=sys.stderr)
        return 2
    scenario, accounts = read_scenario(args.scenario)

    agent_site = None
    if args.agent_port:
        agent_site = tls_server(by_host({identity.domain: identity.website()}), args.agent_port,
                                args.cert, args.key)
        agent_task = await started(agent_site)

    network = InProcessNetwork()
    network.add(args.company, unreachable)  # so the runner's resolver answers a public address
    network.socket_transport = dialling = transport({args.company: args.port}, args.ca)
    http, browser, user_browser = network.client(), network.client(), network.client()
    operator_url = httpx.URL(args.operator or f"https://{args.company}/_operator")
    operator_http = (network.client() if operator_url.host == args.company else
                     httpx.AsyncClient(verify=ssl.create_default_context(cafile=args.ca), timeout=10.0))
    context = ConformanceContext(
        f"https://{args.company}",
        identity=identity,
        http=http,
        driver=Driver(args, user_browser, operator_http, accounts),
        scenario=scenario,
        address_resolver=network.resolve,
        browser_http=browser,
    )
    ids = list(CASES) if args.all else (args.case or list(WEBSITE_CASES))
    try:
        report = await run_conformance(context, cases=select_cases(ids=ids))
    finally:
        for client in (http, browser, user_browser, operator_http):
            await client.aclose()
        await dialling.aclose()
        if agent_site is not None:
            agent_site.should_exit = True
            await agent_task
    for result in report.results:
        print(f"{result.outcome:8} {result.id:50s} {result.duration_seconds:6.2f}s {result.message or ''}")
    counts = {o: sum(1 for r in report.results if r.outcome == o) for o in ("passed", "failed", "skipped")}
    print(f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
    if args.json:
        args.json.write_text(json.dumps(report.to_json(), indent=1) + "\n")
    if args.junit:
        args.junit.write_text(report.to_junit())
    return 0 if report.results and counts["passed"] == len(report.results) else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(run(arguments())))
