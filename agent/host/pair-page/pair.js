// AIP-59 pair/v2 for a browser, with WebCrypto only: the offer (§1), the route and auth tokens
// (§2), the sealed hello and the signed reply (§3), the e2e channel (§3.5) and the tunnel
// frames (§5). Byte for byte what `pap-pair` (Rust) does; the pair page and its service worker
// both import it. No secret is ever logged, posted or put in a URL.

const te = new TextEncoder();
const td = new TextDecoder();

export const b64 = {
  encode: (bytes) => btoa(String.fromCharCode(...new Uint8Array(bytes))),
  decode: (text) => Uint8Array.from(atob(text), (c) => c.charCodeAt(0)),
  url: (bytes) => b64.encode(bytes).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, ""),
  fromUrl: (text) => b64.decode(text.replace(/-/g, "+").replace(/_/g, "/") + "=".repeat((4 - (text.length % 4)) % 4)),
};

const concat = (...parts) => {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.byteLength, 0));
  let at = 0;
  for (const p of parts) {
    out.set(new Uint8Array(p), at);
    at += p.byteLength;
  }
  return out;
};

const u64be = (n) => {
  const out = new Uint8Array(8);
  new DataView(out.buffer).setBigUint64(0, BigInt(n));
  return out;
};

/** HKDF-SHA256 of `ikm` (bytes, or an HKDF CryptoKey that cannot be read back). */
export async function hkdf(ikm, salt, info, length) {
  const key = ikm instanceof CryptoKey ? ikm : await crypto.subtle.importKey("raw", ikm, "HKDF", false, ["deriveBits"]);
  const bits = await crypto.subtle.deriveBits({ name: "HKDF", hash: "SHA-256", salt, info }, key, length * 8);
  return new Uint8Array(bits);
}

export async function fingerprintOf(spki) {
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", spki));
  return [...digest].map((b) => b.toString(16).padStart(2, "0")).join("").slice(0, 32);
}

/** §1.4: the offer's parameters (the fragment's), checked before any socket. */
export async function parseOffer(params, nowSeconds) {
  const get = (name) => {
    const all = params.getAll(name);
    if (all.length !== 1 || all[0] === "") throw new Error(`the offer's ${name} is missing or given twice`);
    return all[0];
  };
  const v = get("v");
  if (v === "1") throw new Error("pairing_protocol_outdated: mint a new offer");
  if (v !== "2") throw new Error("the offer's version is not 2");
  const rv = new URL(get("rv"));
  if (rv.protocol !== "ws:" && rv.protocol !== "wss:") throw new Error("the offer's rv is not ws: or wss:");
  const id = get("id");
  const pk = b64.fromUrl(get("pk"));
  const sk = b64.fromUrl(get("sk"));
  if (!/^[0-9a-f]{32}$/.test(id) || id !== (await fingerprintOf(pk))) throw new Error("the offer's id is not the fingerprint of its pk");
  const exp = Number(get("exp"));
  if (!Number.isInteger(exp) || exp <= nowSeconds) throw new Error("the offer has expired");
  return { rv: rv.href, id, pk, sk, s: get("s"), exp };
}

export async function offerTokens(secret) {
  const salt = te.encode("agentproto/pair-offer");
  return {
    route: b64.url(await hkdf(te.encode(secret), salt, te.encode("agentproto/rv-route"), 16)),
    auth: b64.url(await hkdf(te.encode(secret), salt, te.encode("agentproto/rv-auth"), 32)),
  };
}

export async function epochTokens(root, epoch) {
  const day = u64be(epoch);
  return {
    route: b64.url(await hkdf(root, te.encode("agentproto/rv-route-salt"), concat(te.encode("agentproto/rv-route"), day), 16)),
    auth: b64.url(await hkdf(root, te.encode("agentproto/rv-auth-salt"), concat(te.encode("agentproto/rv-auth"), day), 32)),
  };
}

export const epochNow = () => Math.floor(Date.now() / 86400000);

const x25519 = () => crypto.subtle.generateKey({ name: "X25519" }, true, ["deriveBits"]);
const spkiOf = async (key) => new Uint8Array(await crypto.subtle.exportKey("spki", key));
const x25519Public = (spki) => crypto.subtle.importKey("spki", spki, { name: "X25519" }, true, []);
const agree = async (secret, pub) => new Uint8Array(await crypto.subtle.deriveBits({ name: "X25519", public: pub }, secret, 256));
const aesKey = (raw) => crypto.subtle.importKey("raw", raw, "AES-GCM", false, ["encrypt", "decrypt"]);

/** The seal box (§3.1): X25519, HKDF-SHA256, AES-256-GCM; base64 of its JSON envelope. */
async function seal(plaintext, recipientSpki) {
  const recipient = await x25519Public(recipientSpki);
  const eph = await x25519();
  const epk = await spkiOf(eph.publicKey);
  const shared = await agree(eph.privateKey, recipient);
  const key = await aesKey(await hkdf(shared, concat(epk, recipientSpki), te.encode("agentproto/secrets/seal v1"), 32));
  const iv = crypto.getRandomValues(new Uint8Array(12));
  const sealed = new Uint8Array(await crypto.subtle.encrypt({ name: "AES-GCM", iv }, key, plaintext));
  const envelope = {
    v: 1,
    alg: "x25519-hkdf-sha256-aes256gcm",
    epk: b64.encode(epk),
    iv: b64.encode(iv),
    ct: b64.encode(sealed.slice(0, -16)),
    tag: b64.encode(sealed.slice(-16)),
  };
  return b64.encode(te.encode(JSON.stringify(envelope)));
}

/** A socket's messages as a queue; the socket's end as a rejection. */
function queue(ws) {
  const waiting = [];
  const ready = [];
  let ended = null;
  ws.binaryType = "arraybuffer";
  ws.onmessage = (e) => {
    const text = typeof e.data === "string" ? e.data : td.decode(e.data);
    if (waiting.length) waiting.shift().resolve(text);
    else ready.push(text);
  };
  const end = (why) => {
    ended = ended || new Error(why);
    while (waiting.length) waiting.shift().reject(ended);
  };
  ws.onclose = (e) => end(`the connection closed (${e.code})`);
  ws.onerror = () => end("the connection failed");
  return () =>
    ready.length ? Promise.resolve(ready.shift()) : ended ? Promise.reject(ended) : new Promise((resolve, reject) => waiting.push({ resolve, reject }));
}

/** `wss:` anywhere, `ws:` only on this machine's loopback (S4: plain WebSocket off loopback
 * shows every route to an on-path observer). */
export function rendezvousAllowed(rv) {
  let url;
  try {
    url = new URL(rv);
  } catch {
    return false;
  }
  const host = url.hostname.replace(/^\[|\]$/g, "").toLowerCase();
  const loopback = host === "localhost" || host === "::1" || /^127\.\d+\.\d+\.\d+$/.test(host);
  return url.protocol === "wss:" || (url.protocol === "ws:" && loopback);
}

function dial(rv, route) {
  if (!rendezvousAllowed(rv)) return Promise.reject(new Error("the offer's broker is not wss:// (ws:// only on loopback)"));
  const url = new URL(rv);
  url.searchParams.append("side", "client");
  url.searchParams.append("t", route);
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url.href);
    const next = queue(ws);
    ws.onopen = () => resolve({ ws, next });
    setTimeout(() => reject(new Error("the broker did not answer")), 10000);
  });
}

/** A live e2e channel (§3.5): frames in counter order, each way. */
class Channel {
  constructor(ws, next, sendKey, recvKey) {
    Object.assign(this, { ws, next, sendKey, recvKey, sent: 0, expected: 0 });
  }
  async send(frame) {
    const n = this.sent++;
    const nonce = concat(new Uint8Array(4), u64be(n));
    const data = await crypto.subtle.encrypt({ name: "AES-GCM", iv: nonce, additionalData: u64be(n) }, this.sendKey, te.encode(JSON.stringify(frame)));
    this.ws.send(JSON.stringify({ t: "e2e", n, d: b64.encode(data) }));
  }
  async recv() {
    const message = JSON.parse(await this.next());
    if (message.t !== "e2e" || message.n !== this.expected) {
      this.ws.close();
      throw new Error("the channel broke (a frame out of order or not encrypted)");
    }
    const nonce = concat(new Uint8Array(4), u64be(message.n));
    const plain = await crypto.subtle.decrypt({ name: "AES-GCM", iv: nonce, additionalData: u64be(message.n) }, this.recvKey, b64.decode(message.d));
    this.expected++;
    return JSON.parse(td.decode(plain));
  }
}

/**
 * §3: dials `route`, seals a hello proving `auth` to the pinned `pk`, checks the reply's
 * signature against the pinned `sk`, and waits for the daemon's first frame. Returns the
 * channel, the host's label and the pair root's ingredients.
 */
export async function handshake(rv, route, auth, pk, sk, clientName) {
  const { ws, next } = await dial(rv, route);
  const e = await x25519();
  const ePub = await spkiOf(e.publicKey);
  const payload = te.encode(JSON.stringify({ clientPub: b64.encode(ePub), clientName, auth }));
  const ct0 = await seal(payload, pk);
  // The reference's framing (agentproto/ts e2e.ts): the hello's JSON, base64, in an
  // e2e_handshake frame; the reply comes back the same way (or bare, from a literal reader).
  const hello = JSON.stringify({ v: 2, ePub: b64.encode(ePub), ct0 });
  ws.send(JSON.stringify({ t: "e2e_handshake", d: b64.encode(te.encode(hello)) }));
  const answer = JSON.parse(await next());
  const reply = answer.t === "e2e_handshake" ? JSON.parse(td.decode(b64.decode(answer.d))) : answer;
  if (reply.v !== 2) throw new Error("the reply is not pair/v2");
  const dePub = b64.decode(reply.dePub);
  const transcript = new Uint8Array(await crypto.subtle.digest("SHA-256", concat(ePub, te.encode(ct0), dePub)));
  const signer = await crypto.subtle.importKey("spki", sk, { name: "Ed25519" }, false, ["verify"]);
  if (!(await crypto.subtle.verify({ name: "Ed25519" }, signer, b64.decode(reply.sig), transcript))) {
    ws.close();
    throw new Error("the host's signature does not verify against the pinned key");
  }
  const ikm = concat(await agree(e.privateKey, await x25519Public(dePub)), await agree(e.privateKey, await x25519Public(pk)));
  const keys = await hkdf(ikm, transcript, te.encode("agentproto/pair/v2"), 64);
  const [c2d, d2c] = [keys.slice(0, 32), keys.slice(32)];
  const channel = new Channel(ws, next, await aesKey(c2d), await aesKey(d2c));
  const first = await channel.recv();
  if (first.t === "error" && first.code === "pairing_revoked") throw Object.assign(new Error("the host revoked this pairing: pair again from a new offer"), { revoked: true });
  if (first.t !== "hello") throw new Error("the host did not say hello");
  const [low, high] = compare(c2d, d2c) <= 0 ? [c2d, d2c] : [d2c, c2d];
  const pairRoot = () => hkdf(concat(low, high), transcript, te.encode("agentproto/pair-root"), 32);
  return { channel, label: first.label, pairRoot };
}

function compare(a, b) {
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return a[i] - b[i];
  return 0;
}

// The credential store (§4.2): IndexedDB, one credential per fingerprint, the pair root a
// non-extractable HKDF key (§4.3).
const db = () =>
  new Promise((resolve, reject) => {
    const open = indexedDB.open("pap-pair", 1);
    open.onupgradeneeded = () => open.result.createObjectStore("credentials", { keyPath: "fingerprint" });
    open.onsuccess = () => resolve(open.result);
    open.onerror = () => reject(open.error);
  });

export async function keep(credential) {
  const store = (await db()).transaction("credentials", "readwrite").objectStore("credentials");
  await new Promise((resolve, reject) => {
    const put = store.put(credential);
    put.onsuccess = resolve;
    put.onerror = () => reject(put.error);
  });
}

export async function credentialOf(fingerprint) {
  const store = (await db()).transaction("credentials").objectStore("credentials");
  return new Promise((resolve, reject) => {
    const get = store.get(fingerprint);
    get.onsuccess = () => resolve(get.result);
    get.onerror = () => reject(get.error);
  });
}

export const importRoot = (raw) => crypto.subtle.importKey("raw", raw, "HKDF", false, ["deriveBits"]);
