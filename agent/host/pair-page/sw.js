// The service worker of one pairing (AIP-59 §5): scoped to /d/<fingerprint>/, it forwards each
// request under its scope to the host through one tunnel client (§5.3), streams responses as
// their chunks come (§5.4), cancels what the page gave up on (§5.6), and reconnects with
// jittered, capped backoff (§5.7). A revoked pairing (an authenticated pairing_revoked) ends it.
import { credentialOf, epochTokens, epochNow, handshake, b64 } from "./pair.js";

const scope = new URL(self.registration.scope).pathname;
const fingerprint = scope.split("/")[2];
let client = null;
let revoked = false;
let nextId = 1;

self.addEventListener("install", () => self.skipWaiting());
self.addEventListener("activate", (event) => event.waitUntil(self.clients.claim()));

async function connect() {
  const credential = await credentialOf(fingerprint);
  if (!credential) throw new Error("no credential for this host");
  let last;
  for (const epoch of [epochNow(), epochNow() - 1]) {
    const { route, auth } = await epochTokens(credential.root, epoch);
    try {
      const { channel } = await handshake(credential.rv, route, auth, credential.pk, credential.sk, credential.clientName);
      return serve(channel);
    } catch (error) {
      if (error.revoked) {
        revoked = true;
        throw error;
      }
      last = error;
    }
  }
  throw last;
}

/** Reads the channel, routing each response frame to its request. */
function serve(channel) {
  const pending = new Map();
  const live = { channel, pending };
  (async () => {
    try {
      for (;;) {
        const frame = await channel.recv();
        if (frame.t === "error" && frame.code === "pairing_revoked") {
          revoked = true;
          break;
        }
        const waiting = pending.get(frame.reqId);
        if (waiting) waiting(frame);
      }
    } catch (_) {
      // The channel dropped: pending requests fail as network errors (§5.7).
    }
    for (const waiting of pending.values()) waiting(null);
    pending.clear();
    if (client === live) client = null;
  })();
  return live;
}

let backoff = 500;
async function channel() {
  if (revoked) throw new Error("the host revoked this pairing: pair again from a new offer");
  for (let tries = 0; !client && tries < 5; tries++) {
    try {
      client = await connect();
      backoff = 500;
    } catch (error) {
      if (revoked) throw error;
      await new Promise((r) => setTimeout(r, backoff / 2 + Math.random() * (backoff / 2)));
      backoff = Math.min(backoff * 2, 30000);
    }
  }
  if (!client) throw new Error("the host is offline");
  return client;
}

async function proxy(request) {
  const live = await channel();
  const reqId = `w${nextId++}`;
  const url = new URL(request.url);
  const headers = {};
  request.headers.forEach((value, name) => (headers[name] = value));
  const body = new Uint8Array(await request.arrayBuffer());
  const frames = [];
  let wake = null;
  live.pending.set(reqId, (frame) => {
    frames.push(frame);
    if (wake) wake();
  });
  const nextFrame = async () => {
    while (!frames.length) await new Promise((r) => (wake = r));
    return frames.shift();
  };
  await live.channel.send({
    t: "http_request",
    reqId,
    method: request.method,
    path: url.pathname.slice(scope.length - 1) + url.search,
    headers,
    ...(body.length ? { body: b64.encode(body) } : {}),
  });
  const first = await nextFrame();
  if (!first) return Response.error();
  if (first.t === "http_response") {
    live.pending.delete(reqId);
    return new Response(first.body ? b64.decode(first.body) : null, { status: first.status, headers: first.headers });
  }
  const stream = new ReadableStream({
    async pull(controller) {
      const frame = await nextFrame();
      if (!frame || frame.error) {
        live.pending.delete(reqId);
        return controller.error(new Error("the host's response failed"));
      }
      if (frame.data) controller.enqueue(b64.decode(frame.data));
      if (frame.end) {
        live.pending.delete(reqId);
        controller.close();
      }
    },
    cancel() {
      // §5.6: the page gave up; the host aborts the request.
      live.pending.delete(reqId);
      live.channel.send({ t: "http_cancel", reqId });
    },
  });
  return new Response(stream, { status: first.status, headers: first.headers });
}

self.addEventListener("fetch", (event) => {
  const url = new URL(event.request.url);
  if (url.origin !== self.location.origin || !url.pathname.startsWith(scope)) return;
  event.respondWith(proxy(event.request).catch((error) => new Response(error.message, { status: 503 })));
});
