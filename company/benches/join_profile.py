"""Where a join's CPU goes: `perf script` output of the `join_load` bench, its samples sorted
into the join path's stages (company/benches/join_profile.sh records them).

    perf script -i perf.data | python3 join_profile.py

The bench's client and server share one process: a sample is the server's when its stack holds
a frame of the server's side (hyper's server dispatch, axum, the company's route, rustls's
server), the client's when it holds one of the client's (reqwest, hyper's client dispatch), and
otherwise the runtime's or the kernel's, shared by both. A server sample's stage is the
innermost frame that names one (so an allocation in the JSON parser is the parser's); a sample
whose leaf is in aws-lc (C, built without frame pointers, so no trustworthy stack above it) is
sorted by the leaf alone: the P-256 and SHA-256 code is the signature check's, AES-GCM the TLS
record layer's.

Prints one Markdown table: each stage's share of the server's samples, and of all samples.
"""

import re
import sys
from collections import Counter

SERVER = re.compile(
    r"hyper::proto::h1::dispatch::Server|hyper::server|hyper_util::server|axum::|pap_company::"
    r"|rustls::server|tokio_rustls::server|pap_net::"
)
CLIENT = re.compile(
    r"reqwest::|hyper_util::client|hyper::client|dispatch::Client|join_load::load|rustls::client"
    r"|tokio_rustls::client"
)

# Leaves in aws-lc, sorted by what they compute.
LEAF_SIGNATURE = re.compile(
    r"ecp_nistz256|p256|P256|ec_GFp|ec_point|EC_|ECDSA|ecdsa|bn_|BN_|beeu|sha256_block|SHA256|"
    r"ec_scalar|ec_simple|felem|fiat_p256"
)
LEAF_TLS = re.compile(r"aes_|aesni|gcm_|GCM|AES_|CRYPTO_gcm|ChaCha|poly1305")

# Innermost first: the first stage whose pattern a frame matches, walking from the leaf.
STAGES = [
    ("signature check (jsonwebtoken -> aws-lc ECDSA P-256)", re.compile(r"jsonwebtoken::crypto|aws_lc_rs::signature|aws_lc_rs::ec")),
    ("TLS record layer (rustls)", re.compile(r"rustls::|tokio_rustls::")),
    ("JWS and claims parsing (base64, JSON)", re.compile(r"jsonwebtoken::|serde_json::|base64::|pap_shared::jws|pap_shared::wire")),
    ("form parsing", re.compile(r"serde_urlencoded|form_urlencoded|axum::form|axum_extra::extract::form")),
    ("stores (replay mark, Session, cookie binding)", re.compile(r"moka::|pap_company::stores|crossbeam|quanta::")),
    ("logging (tracing)", re.compile(r"tracing_subscriber|tracing_core|tracing::")),
    ("cookie and response", re.compile(r"cookie::|axum::response|http::response|pap_company::route::respond")),
    ("route logic (the company's checks)", re.compile(r"pap_company::")),
    ("HTTP/1.1 (hyper, axum routing)", re.compile(r"hyper::|httparse|http::|axum::|tower::|matchit")),
    ("runtime (tokio tasks, wake-ups, timers)", re.compile(r"tokio::|mio::|parking_lot|futex")),
]


def classify(frames):
    """(side, stage) of one sample; frames leaf first, each `symbol (dso)`."""
    text = "\n".join(frames)
    if not frames:
        return "other", "unknown"
    leaf = frames[0]
    kernel = "[kernel.kallsyms]" in leaf
    if SERVER.search(text):
        side = "server"
    elif CLIENT.search(text):
        side = "client"
    else:
        side = "shared"
    if kernel:
        return side, "kernel (syscalls: TCP send/recv, epoll, futex)"
    if "aws-lc" in leaf or "aws_lc" in leaf or LEAF_SIGNATURE.search(leaf.split(" (")[0]) or LEAF_TLS.search(leaf.split(" (")[0]):
        symbol = leaf.split(" (")[0]
        if LEAF_TLS.search(symbol):
            return side if side != "shared" else "server?", "TLS record layer (rustls)"
        if LEAF_SIGNATURE.search(symbol):
            # Only the server verifies signatures (the client's assertions are signed before
            # the clock starts).
            return "server", "signature check (jsonwebtoken -> aws-lc ECDSA P-256)"
    for frame in frames:
        for stage, pattern in STAGES:
            if pattern.search(frame):
                return side, stage
    if re.search(r"malloc|free|realloc|memcpy|memmove", leaf):
        return side, "allocation and copies (outside a stage)"
    return side, "other"


def samples(lines):
    frames = []
    for line in lines:
        line = line.rstrip("\n")
        if not line.strip():
            if frames:
                yield frames
            frames = []
            continue
        if line.startswith((" ", "\t")):
            parts = line.strip().split(" ", 1)
            frames.append(parts[1] if len(parts) == 2 else parts[0])
        # The header line (command, pid, time, event) starts a sample.
    if frames:
        yield frames


def main():
    by = Counter()
    sides = Counter()
    total = 0
    for frames in samples(sys.stdin):
        side, stage = classify(frames)
        if side == "server?":
            side = "server"
        by[(side, stage)] += 1
        sides[side] += 1
        total += 1
    server = sides["server"]
    print(f"samples: {total}; server {server} ({server / total:.0%}), client {sides['client']} "
          f"({sides['client'] / total:.0%}), shared runtime/kernel {sides['shared']} ({sides['shared'] / total:.0%})")
    print()
    print("| stage (server side) | share of the server's samples | share of all |")
    print("|---|---|---|")
    for (side, stage), count in sorted(by.items(), key=lambda kv: -kv[1]):
        if side == "server":
            print(f"| {stage} | {count / server:.1%} | {count / total:.1%} |")
    print()
    print("| not the server's | share of all |")
    print("|---|---|")
    for (side, stage), count in sorted(by.items(), key=lambda kv: -kv[1]):
        if side != "server":
            print(f"| {side}: {stage} | {count / total:.1%} |")


if __name__ == "__main__":
    main()
