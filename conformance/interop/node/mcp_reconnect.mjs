// A client that reconnects without ever ending its sessions, played by the official MCP
// TypeScript SDK (`@modelcontextprotocol/sdk`, pinned in package.json): `Client.close()` closes
// the transport and sends no HTTP DELETE, as Claude Code, the MCP Inspector and the conformance
// suite do. Each round opens a new session with the device's bearer, lists the tools and calls
// `browser_profile_list` (a tool that touches no page; a `rate_limited` answer is retried after
// the `retryAfterMs` it gives, as a client should), then closes.
//
//   node mcp_reconnect.mjs MCP_URL BEARER_FILE [ROUNDS=50]
//
// Prints one JSON line {rounds, working, failures, protocolVersion, p50Ms, p99Ms} and exits 0
// when every round worked, 1 otherwise.
import fs from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, bearerFile, roundsArg] = process.argv.slice(2);
if (!url || !bearerFile) {
  console.error("usage: node mcp_reconnect.mjs MCP_URL BEARER_FILE [ROUNDS]");
  process.exit(2);
}
const rounds = Number(roundsArg ?? 50);
const bearer = fs.readFileSync(bearerFile, "utf8").trim();

async function callPaced(client, name, args) {
  for (let attempt = 0; attempt < 20; attempt++) {
    const result = await client.callTool({ name, arguments: args });
    const code = result.structuredContent?.code;
    if (result.isError && code === "rate_limited") {
      const wait = Number(result.structuredContent?.cause?.retryAfterMs ?? 100);
      await new Promise((resolve) => setTimeout(resolve, wait));
      continue;
    }
    return result;
  }
  throw new Error(`${name} stayed rate limited`);
}

const failures = [];
const took = [];
let protocolVersion = null;
let working = 0;
for (let round = 0; round < rounds; round++) {
  const started = performance.now();
  const client = new Client({ name: "pap-reconnect", version: "1.0.0" });
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${bearer}` } },
  });
  try {
    await client.connect(transport);
    protocolVersion = transport.protocolVersion ?? protocolVersion;
    const listed = await client.listTools();
    if (!listed.tools.some((t) => t.name === "browser_profile_list")) {
      throw new Error("browser_profile_list is not listed");
    }
    const result = await callPaced(client, "browser_profile_list", {});
    if (result.isError) {
      throw new Error(`browser_profile_list answered ${JSON.stringify(result.structuredContent)}`);
    }
    working++;
    took.push(performance.now() - started);
  } catch (error) {
    failures.push({ round, error: String(error?.message ?? error).slice(0, 300) });
  } finally {
    // No terminateSession(): the session is left for the server to end.
    await client.close().catch(() => {});
  }
}
took.sort((a, b) => a - b);
const at = (q) => (took.length ? Math.round(took[Math.min(took.length - 1, Math.floor(q * took.length))] * 100) / 100 : null);
console.log(JSON.stringify({ rounds, working, failures, protocolVersion, p50Ms: at(0.5), p99Ms: at(0.99) }));
process.exit(working === rounds ? 0 : 1);
