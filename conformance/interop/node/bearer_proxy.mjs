// A paired device's credential in front of an MCP host, for MCP clients that carry none (the
// official conformance suite has no option for a header): every request to LISTEN_PORT goes to
// UPSTREAM with `Authorization: Bearer <the file's credential>` added, and every other header,
// Host and Origin included, as the client sent it, so the host's own Host/Origin guard still
// judges what the client sent. Responses (event streams included) stream back unchanged.
//
//   node bearer_proxy.mjs BEARER_FILE
//
// Prints `listening on http://127.0.0.1:PORT` once bound (the host must be told to answer that
// Host: `--allow-host 127.0.0.1:PORT`), then reads the host's URL as the first line of its
// stdin; ends with its stdin.
import http from "node:http";
import fs from "node:fs";

const [bearerFile] = process.argv.slice(2);
if (!bearerFile) {
  console.error("usage: node bearer_proxy.mjs BEARER_FILE (then the host's URL on stdin)");
  process.exit(2);
}
let target = null;
const bearer = fs.readFileSync(bearerFile, "utf8").trim();

const server = http.createServer((request, response) => {
  if (target === null) {
    response.writeHead(503, { "content-type": "text/plain" });
    response.end("the proxy has no host yet");
    return;
  }
  const headers = { ...request.headers, authorization: `Bearer ${bearer}` };
  const forwarded = http.request(
    {
      host: target.hostname,
      port: target.port,
      method: request.method,
      path: request.url,
      headers,
      setHost: false,
    },
    (answer) => {
      response.writeHead(answer.statusCode ?? 502, answer.headers);
      answer.pipe(response);
    },
  );
  forwarded.on("error", (error) => {
    if (!response.headersSent) {
      response.writeHead(502, { "content-type": "text/plain" });
    }
    response.end(`the host did not answer: ${error.message}`);
  });
  request.pipe(forwarded);
});
server.listen(0, "127.0.0.1", () => {
  console.log(`listening on http://127.0.0.1:${server.address().port}`);
});
let pending = "";
process.stdin.setEncoding("utf8");
process.stdin.on("data", (chunk) => {
  if (target !== null) return;
  pending += chunk;
  const newline = pending.indexOf("\n");
  if (newline >= 0) {
    target = new URL(pending.slice(0, newline).trim());
    console.log(`forwarding to ${target.origin}`);
  }
});
process.stdin.on("end", () => process.exit(0));
