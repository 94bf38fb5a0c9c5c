// The pair page (AIP-59 §1.3, §3.6, §4, §5.1): reads the offer from the fragment once, removes
// it before any network I/O, shows the fingerprint, pairs, shows the host's name, and keeps the
// credential only when the person says so; then registers the service worker for /d/<fp>/.
import { parseOffer, offerTokens, handshake, keep, importRoot } from "./pair.js";

const $ = (id) => document.getElementById(id);
const state = (name, said) => {
  document.body.dataset.state = name;
  if (said) $("said").textContent = said;
};

async function main() {
  const fragment = location.hash.slice(1);
  // §1.3: out of the address bar and the history before anything leaves this page.
  history.replaceState(null, "", location.pathname);
  if (!fragment) return state("no-offer", "Open this page from an offer (its link or QR code).");
  const offer = await parseOffer(new URLSearchParams(fragment), Math.floor(Date.now() / 1000));
  // §5.8: on a host's own origin (its fingerprint the first label), only that host's offer.
  const own = location.hostname.split(".")[0];
  if (/^[0-9a-f]{32}$/.test(own) && own !== offer.id) {
    return state("wrong-origin", `This page is host ${own}'s; the offer is for host ${offer.id}. Open the offer's own link.`);
  }
  $("fingerprint").textContent = offer.id;
  state("pairing", "Pairing through the rendezvous…");
  const tokens = await offerTokens(offer.s);
  const { channel, label, pairRoot } = await handshake(offer.rv, tokens.route, tokens.auth, offer.pk, offer.sk, navigator.userAgent.includes("Mobile") ? "phone" : "browser");
  channel.ws.close();
  $("name").textContent = label || "(no name)";
  $("name-line").hidden = false;
  $("ask").hidden = false;
  state("confirm", "Paired. Check the fingerprint and the name against your host.");
  const kept = await new Promise((resolve) => {
    $("keep").onclick = () => resolve(true);
    $("decline").onclick = () => resolve(false);
  });
  $("ask").hidden = true;
  state("keeping");
  if (!kept) return state("declined", "Declined: nothing was kept. Revoke the new device on the host.");
  const root = await importRoot(await pairRoot());
  await keep({ fingerprint: offer.id, pk: offer.pk, sk: offer.sk, rv: offer.rv, root, clientName: "browser", pairedAt: Date.now() });
  const scope = `/d/${offer.id}/`;
  state("registering");
  const registration = await navigator.serviceWorker.register("/sw.js", { type: "module", scope });
  const worker = registration.installing || registration.waiting || registration.active;
  state("activating");
  await new Promise((resolve, reject) => {
    const check = () => {
      if (worker.state === "activated") resolve();
      if (worker.state === "redundant") reject(new Error("the service worker did not install"));
    };
    check();
    worker.addEventListener("statechange", check);
  });
  $("open-link").href = `${scope}health`;
  $("open").hidden = false;
  state("paired", "Kept. This browser reaches the host through the tunnel.");
}

main().catch((error) => state("error", `Not paired: ${error.message}`));
