"""The floor under a cold join: Chromium alone, launched as the agent launches it, to a first
loaded page (issue 42: a cold join at most 300 ms).

No agent code runs here: no request guard, no control socket, no sandbox user, no signing, one
GET instead of the join's POST, 303 and GET. Whatever this prints, a cold join through
`join_timing` cannot beat. It launches the Chromium given, with the agent's flags
(`agent/browser/src/chromium/args.rs`, kept in step by hand) and DevTools on a pipe, and times:

- devtools:   the spawn to `Browser.getVersion` answered;
- first tab:  `Target.createTarget` on about:blank (in a new browser context with CONTEXT=1, as
              the tools open a joined company's tabs);
- first load: `Page.navigate` to a page on 127.0.0.1 until its load event;
- again:      a second navigation in the same tab (the warm figure, for comparison);
- tab again:  a second tab, attached and `Page.enable`d, in the warm browser;
- join:       in that tab (opened ahead, as the tools' next join takes it), what a warm join asks
              of Chromium: a form POST built by one `Runtime.evaluate` in its blank page, the
              server's 303, the GET, the landed page and its stylesheet, to the load event
              (0.5 s after the tab opened, as a next join comes after the last).

Each VARIANT is NAME=FLAG|FLAG... added to the agent's flags. Three kinds of item are not
flags: `+guard` turns the request guard's interception on for that variant (as GUARD=1 does
for all), `+tls` serves the pages over HTTPS as shop.example (a certificate made for the run,
pinned by its SPKI as the agent's tests pin theirs), and any other `+Domain` enables that
DevTools domain in the join's tab (chromiumoxide enables Network, Runtime, Performance and Log
in every tab it opens). Variants alternate run by run, so a machine that slows down slows each
alike. Run as root it adds --no-sandbox (Chromium refuses
root otherwise), unless SANDBOX_USER names a user to run Chromium as, sandboxed, as the agent
runs it as root (`pap-browser`, review N11). GUARD=1 turns on what the agent's request guard
turns on (`Fetch.enable` on the browser target, every request paused at the request stage) and
continues each paused request at once, to count interception's own cost.

    python3 agent/pap/benches/chromium_floor.py /usr/lib/chromium/chromium 20 agent=
"""

import base64
import hashlib
import http.server
import json
import os
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time

AGENT_FLAGS = [
    "--headless=new", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-quic", "--enable-features=SpareRendererForSitePerProcess",
    "--remote-debugging-pipe", "--no-startup-window",
]
SANDBOX_USER = os.environ.get("SANDBOX_USER")
if os.geteuid() == 0 and not SANDBOX_USER:
    AGENT_FLAGS.append("--no-sandbox")


class Shop(http.server.BaseHTTPRequestHandler):
    # Keep-alive, as the company's server: the join's three requests share a connection. Each
    # answer leaves in one write with Nagle off; split writes on a kept-alive connection would
    # wait out the peer's delayed ACK (40 ms on Linux) and time the server, not Chromium.
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    wbufsize = 1 << 16

    def do_GET(self):
        if self.path.startswith("/site.css"):
            self.answer(200, "text/css", b"body { font-family: sans-serif }")
        elif self.path.startswith("/landed"):
            self.answer(200, "text/html",
                        b'<!doctype html><title>shop</title><link rel="stylesheet" href="/site.css"><p>joined</p>')
        else:
            self.answer(200, "text/html", b"<!doctype html><title>shop</title><p>signed in</p>")

    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", "0")))
        self.send_response(303)
        self.send_header("location", "/landed")
        self.send_header("content-length", "0")
        self.end_headers()

    def answer(self, status, kind, body):
        self.send_response(status)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class Pipe:
    """DevTools over Chromium's pipe: fd 3 carries commands in, fd 4 answers out, each message
    ended by a NUL."""

    def __init__(self, to_browser, from_browser):
        self.to_browser, self.from_browser, self.buf, self.last_id = to_browser, from_browser, b"", 0

    def send(self, method, params=None, session=None):
        self.last_id += 1
        message = {"id": self.last_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.to_browser, json.dumps(message).encode() + b"\0")
        return self.last_id

    def receive(self):
        while True:
            message = self.receive_one()
            if message.get("method") == "Fetch.requestPaused" and "sessionId" not in message:
                # As the guard: every paused request answered, here always let go.
                self.send("Fetch.continueRequest", {"requestId": message["params"]["requestId"]})
                continue
            return message

    def receive_one(self):
        while b"\0" not in self.buf:
            chunk = os.read(self.from_browser, 1 << 16)
            if not chunk:
                raise EOFError("Chromium closed its pipe")
            self.buf += chunk
        message, self.buf = self.buf.split(b"\0", 1)
        return json.loads(message)

    def call(self, method, params=None, session=None):
        sent = self.send(method, params, session)
        while True:
            message = self.receive()
            if message.get("id") == sent:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]

    def until(self, event, session):
        while True:
            message = self.receive()
            if message.get("method") == event and message.get("sessionId") == session:
                return message


JOIN_FORM = ("(() => { const f = document.createElement('form'); f.method = 'post'; f.action = %s; "
             "const i = document.createElement('input'); i.type = 'hidden'; i.name = 'assertion'; "
             "i.value = 'x'.repeat(600); f.appendChild(i); document.body.appendChild(f); f.submit(); "
             "return true; })()")


def launch_once(chromium, extra, url, in_context, domains=(), guard=False):
    """One launch: (devtools, first tab, first load, total, again, tab again, join) in ms."""
    profile = tempfile.mkdtemp(prefix="chromium-floor-")
    as_user = []
    if SANDBOX_USER:
        shutil.chown(profile, SANDBOX_USER)
        as_user = ["runuser", "-u", SANDBOX_USER, "--"]
    commands_in, to_browser = os.pipe()
    from_browser, answers_out = os.pipe()

    def pipes_at_3_and_4():
        os.dup2(commands_in, 3)
        os.dup2(answers_out, 4)

    started = time.perf_counter()
    browser = subprocess.Popen(
        [*as_user, chromium, *AGENT_FLAGS, *extra, f"--user-data-dir={profile}"],
        preexec_fn=pipes_at_3_and_4, pass_fds=(3, 4), close_fds=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": profile},
    )
    os.close(commands_in)
    os.close(answers_out)
    pipe = Pipe(to_browser, from_browser)
    try:
        pipe.call("Browser.getVersion")
        devtools = time.perf_counter()
        if guard or os.environ.get("GUARD") == "1":
            pipe.call("Fetch.enable", {"patterns": [{"urlPattern": "*", "requestStage": "Request"}]})
        params = {"url": "about:blank"}
        if in_context:
            params["browserContextId"] = pipe.call("Target.createBrowserContext")["browserContextId"]
        target = pipe.call("Target.createTarget", params)["targetId"]
        tab = time.perf_counter()
        session = pipe.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        pipe.call("Page.enable", session=session)
        pipe.send("Page.navigate", {"url": url}, session=session)
        pipe.until("Page.loadEventFired", session)
        loaded = time.perf_counter()
        pipe.send("Page.navigate", {"url": url + "?again"}, session=session)
        pipe.until("Page.loadEventFired", session)
        again = time.perf_counter()
        second = pipe.call("Target.createTarget", params)["targetId"]
        session = pipe.call("Target.attachToTarget", {"targetId": second, "flatten": True})["sessionId"]
        pipe.call("Page.enable", session=session)
        second_tab = time.perf_counter()
        for domain in domains:
            pipe.call(f"{domain}.enable", session=session)
        # Think time, not a readiness wait: the tools open a tab ahead after a join, and the
        # next join of its context comes later; 0.5 s lets the new tab's renderer settle.
        time.sleep(0.5)
        settled = time.perf_counter()
        pipe.call("Runtime.evaluate", {"expression": JOIN_FORM % json.dumps(url + "join"), "returnByValue": True},
                  session=session)
        pipe.until("Page.loadEventFired", session)
        joined = time.perf_counter()
        ms = lambda a, b: (b - a) * 1e3
        return (ms(started, devtools), ms(devtools, tab), ms(tab, loaded), ms(started, loaded), ms(loaded, again),
                ms(again, second_tab), ms(settled, joined))
    finally:
        try:
            pipe.call("Browser.close")
        except (OSError, EOFError, RuntimeError):
            pass
        try:
            browser.wait(5)
        except subprocess.TimeoutExpired:
            browser.kill()
            browser.wait()
        os.close(to_browser)
        os.close(from_browser)
        shutil.rmtree(profile, ignore_errors=True)


def tls_shop():
    """The shop again over HTTPS on 127.0.0.1, as shop.example with a certificate made for the
    run: the flags that route and pin it, and its URL."""
    folder = tempfile.mkdtemp(prefix="chromium-floor-tls-")
    key, cert = os.path.join(folder, "key.pem"), os.path.join(folder, "cert.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                    "-nodes", "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=shop.example",
                    "-addext", "subjectAltName=DNS:shop.example"], check=True, capture_output=True)
    public = subprocess.run(["openssl", "x509", "-in", cert, "-pubkey", "-noout"], check=True,
                            capture_output=True).stdout
    der = subprocess.run(["openssl", "pkey", "-pubin", "-outform", "der"], input=public, check=True,
                         capture_output=True).stdout
    pin = base64.b64encode(hashlib.sha256(der).digest()).decode()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    shutil.rmtree(folder, ignore_errors=True)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Shop)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    flags = ["--host-resolver-rules=MAP shop.example 127.0.0.1", f"--ignore-certificate-errors-spki-list={pin}"]
    return flags, f"https://shop.example:{server.server_address[1]}/"


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    chromium, runs = sys.argv[1], int(sys.argv[2])
    variants = []
    for variant in sys.argv[3:]:
        name, _, flags = variant.partition("=")
        variants.append((name, [f for f in flags.split("|") if f]))
    in_context = os.environ.get("CONTEXT") == "1"
    shop = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Shop)
    threading.Thread(target=shop.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{shop.server_address[1]}/"
    # Made only when a variant asks for it: it needs the openssl command.
    any_tls = any("+tls" in items for _, items in variants)
    tls_flags, tls_url = tls_shop() if any_tls else ([], url)
    launch_once(chromium, [], url, in_context)  # Chromium's files into the page cache
    figures = {name: [] for name, _ in variants}
    for _ in range(runs):
        for name, items in variants:
            flags = [f for f in items if not f.startswith("+")]
            extras = [f[1:] for f in items if f.startswith("+")]
            tls = "tls" in extras
            figures[name].append(launch_once(
                chromium, flags + (tls_flags if tls else []), tls_url if tls else url, in_context,
                [d for d in extras if d not in ("tls", "guard")], "guard" in extras))
    print(f"p50 ms of {runs} launches, first tab in a new context: {in_context}")
    print(f"{'variant':24} {'devtools':>9} {'first tab':>9} {'first load':>10} {'total':>9} {'again':>9} {'tab again':>9}"
          f" {'join':>9}")
    for name, rows in figures.items():
        p50 = [statistics.median(row[i] for row in rows) for i in range(7)]
        print(f"{name:24} " + " ".join(f"{x:9.1f}" for x in p50[:2]) + f" {p50[2]:10.1f} " + " ".join(f"{x:9.1f}" for x in p50[3:]))


if __name__ == "__main__":
    main()
