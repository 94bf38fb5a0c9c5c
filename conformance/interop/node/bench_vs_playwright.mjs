// Our MCP host and Playwright MCP, side by side over stdio, on the same local pages and the
// same Chromium (Debian's /usr/lib/chromium/chromium, headless), driven by one client (the
// official MCP TypeScript SDK), interleaved round by round (which server goes first alternates).
// Each round, on each server: navigate, snapshot, click by ref, type by ref, screenshot,
// evaluate. Prints p50/p99 per operation and the ratio ours/theirs, as Markdown and as JSON.
//
//   node bench_vs_playwright.mjs OURS_JSON ROUNDS OUT_JSON
//
// OURS_JSON: {"command": ..., "args": [...]} starting `pap-agent ... host stdio` (its
// --name-origin must name http://127.0.0.1:PORT, PORT from the env PAP_BENCH_PORT, which this
// script listens on). Playwright MCP is started from this directory's node_modules.
import fs from "node:fs";
import http from "node:http";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [oursJson, roundsArg, outJson] = process.argv.slice(2);
const rounds = Number(roundsArg ?? 50);
const here = path.dirname(fileURLToPath(import.meta.url));
const chromium = "/usr/lib/chromium/chromium";

// The pages: a shop front with a counter button and a search box, and a second page.
const FRONT = `<!doctype html><meta charset="utf-8"><title>Bench shop</title>
<h1>Bench shop</h1><nav><a href="/next">Next page</a></nav>
<main><p id="count">0 in cart</p>
<button id="add" onclick="document.getElementById('count').textContent = (parseInt(document.getElementById('count').textContent) + 1) + ' in cart'">Add to cart</button>
<label>Search <input id="q" name="q"></label>
<ul>${Array.from({ length: 30 }, (_, i) => `<li><a href="/item/${i}">Item ${i}</a> <span>${i * 3} EUR</span></li>`).join("")}</ul></main>`;
const NEXT = `<!doctype html><meta charset="utf-8"><title>Next</title><h1>Next</h1><a href="/">Back to the shop</a>`;
const server = http.createServer((req, res) => {
  res.writeHead(200, { "content-type": "text/html; charset=utf-8" });
  res.end(req.url === "/next" ? NEXT : FRONT);
});
await new Promise((resolve) => server.listen(Number(process.env.PAP_BENCH_PORT ?? 0), "127.0.0.1", resolve));
const base = `http://127.0.0.1:${server.address().port}`;

async function connect(command, args, env) {
  const client = new Client({ name: "pap-bench", version: "1.0.0" });
  const transport = new StdioClientTransport({ command, args, env: { ...process.env, ...env }, stderr: "ignore" });
  await client.connect(transport);
  return client;
}

const oursSpec = JSON.parse(fs.readFileSync(oursJson, "utf8"));
const ours = await connect(oursSpec.command, oursSpec.args, {});
const outputDir = fs.mkdtempSync("/tmp/pw-bench-");
const theirs = await connect(process.execPath, [
  path.join(here, "node_modules/@playwright/mcp/cli.js"),
  "--headless", "--isolated", "--browser", "chromium", "--executable-path", chromium,
  "--no-sandbox", "--output-dir", outputDir, "--viewport-size", "1280,720",
], {});

const text = (result) => (result.content ?? []).filter((c) => c.type === "text").map((c) => c.text).join("\n");
function refOf(snapshot, part) {
  const line = snapshot.split("\n").find((l) => l.includes(part) && l.includes("[ref="));
  if (!line) throw new Error(`no ${part} with a ref in:\n${snapshot.slice(0, 2000)}`);
  return line.match(/\[ref=([^\]]+)\]/)[1];
}

let rateLimited = 0;
async function call(client, name, args) {
  for (let attempt = 0; attempt < 50; attempt++) {
    const started = performance.now();
    const result = await client.callTool({ name, arguments: args });
    const ms = performance.now() - started;
    const code = result.structuredContent?.code;
    if (result.isError && code === "rate_limited") {
      rateLimited++;
      await new Promise((r) => setTimeout(r, Number(result.structuredContent?.cause?.retryAfterMs ?? 100)));
      continue;
    }
    if (result.isError) throw new Error(`${name}: ${text(result).slice(0, 500)}`);
    return { result, ms };
  }
  throw new Error(`${name}: rate limited 50 times`);
}

// One round on one server: the time of each operation.
const sides = {
  ours: {
    client: ours,
    target: null,
    async round() {
      const t = {};
      const nav = await call(ours, "browser_navigate", this.target ? { url: `${base}/`, target: this.target } : { url: `${base}/` });
      this.target ??= nav.result.structuredContent.target;
      t.navigate = nav.ms;
      const snap = await call(ours, "browser_snapshot", { target: this.target });
      t.snapshot = snap.ms;
      const s = text(snap.result);
      t.click = (await call(ours, "browser_click", { target: this.target, ref: refOf(s, 'button "Add to cart"') })).ms;
      t.type = (await call(ours, "browser_fill", { target: this.target, ref: refOf(s, 'textbox "Search"'), value: "hats" })).ms;
      t.screenshot = (await call(ours, "browser_screenshot", { target: this.target })).ms;
      t.evaluate = (await call(ours, "browser_evaluate", { target: this.target, expression: "document.getElementById('count').textContent" })).ms;
      return t;
    },
  },
  theirs: {
    client: theirs,
    async round() {
      const t = {};
      t.navigate = (await call(theirs, "browser_navigate", { url: `${base}/` })).ms;
      const snap = await call(theirs, "browser_snapshot", {});
      t.snapshot = snap.ms;
      const s = text(snap.result);
      // Playwright MCP 0.0.86 names the element `target` (a ref, or a selector).
      t.click = (await call(theirs, "browser_click", { element: "Add to cart", target: refOf(s, 'button "Add to cart"') })).ms;
      t.type = (await call(theirs, "browser_type", { element: "Search", target: refOf(s, 'textbox "Search"'), text: "hats" })).ms;
      t.screenshot = (await call(theirs, "browser_take_screenshot", { scale: "css" })).ms;
      t.evaluate = (await call(theirs, "browser_evaluate", { function: "() => document.getElementById('count').textContent" })).ms;
      return t;
    },
  },
};

const ops = ["navigate", "snapshot", "click", "type", "screenshot", "evaluate"];
const samples = { ours: Object.fromEntries(ops.map((o) => [o, []])), theirs: Object.fromEntries(ops.map((o) => [o, []])) };
// Two warm-up rounds each (browser launch, first page), not counted.
for (let i = 0; i < 2; i++) {
  await sides.ours.round();
  await sides.theirs.round();
}
for (let i = 0; i < rounds; i++) {
  const order = i % 2 === 0 ? ["ours", "theirs"] : ["theirs", "ours"];
  for (const side of order) {
    const t = await sides[side].round();
    for (const op of ops) samples[side][op].push(t[op]);
  }
}

const quantile = (values, q) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)];
};
const rows = ops.map((op) => {
  const o50 = quantile(samples.ours[op], 0.5), o99 = quantile(samples.ours[op], 0.99);
  const t50 = quantile(samples.theirs[op], 0.5), t99 = quantile(samples.theirs[op], 0.99);
  return { op, oursP50: o50, oursP99: o99, theirsP50: t50, theirsP99: t99, ratioP50: o50 / t50, ratioP99: o99 / t99 };
});
const f = (x) => x.toFixed(1);
console.log(`| operation (${rounds} interleaved rounds) | ours p50 / p99 ms | Playwright MCP p50 / p99 ms | ratio p50 / p99 |`);
console.log("|---|---|---|---|");
for (const r of rows) {
  console.log(`| ${r.op} | ${f(r.oursP50)} / ${f(r.oursP99)} | ${f(r.theirsP50)} / ${f(r.theirsP99)} | ${r.ratioP50.toFixed(2)}x / ${r.ratioP99.toFixed(2)}x |`);
}
console.log(`(our host answered rate_limited ${rateLimited} times; those waits are not in the figures)`);
if (outJson) fs.writeFileSync(outJson, JSON.stringify({ rounds, rows, rateLimited }, null, 2));

await ours.close();
await theirs.close();
server.close();
fs.rmSync(outputDir, { recursive: true, force: true });
process.exit(0);
