"""Loopback plumbing shared by our two peer wrappers (company.py and runner.py).

A test run gives every party a public name (`shop.example`, `atlas.example`) but serves each on
a port of 127.0.0.1. Two small pieces make the reference's code work unchanged across that gap:

* `Loopback`: an httpcore network backend that dials 127.0.0.1:PORT for the names it was given
  and refuses every other name, while TLS (SNI and certificate checks) still uses the public name;
* `by_host`: an ASGI application that hands each request to the application of the `Host` it
  names (421 for a host it does not serve), and answers the lifespan protocol.

Written for this project; only the reference's public API (`InProcessNetwork`) is used.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterable, Mapping
from typing import Any

import httpcore
import httpx
import uvicorn


class Loopback(httpcore.AsyncNetworkBackend):
    """Dial 127.0.0.1:PORT for each name of `ports`; every other name fails to connect."""

    def __init__(self, ports: Mapping[str, int]) -> None:
        self._ports = dict(ports)
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None,
                          socket_options: Iterable[Any] | None = None) -> httpcore.AsyncNetworkStream:
        local_port = self._ports.get(host)
        if local_port is None:
            raise httpcore.ConnectError(f"{host} is not served on this machine")
        return await self._inner.connect_tcp("127.0.0.1", local_port, timeout=timeout,
                                             local_address=local_address, socket_options=socket_options)

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: Iterable[Any] | None = None) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("unix sockets are not used here")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def transport(ports: Mapping[str, int], ca: str) -> httpx.AsyncHTTPTransport:
    """An httpx transport that trusts only `ca` and reaches the named hosts on loopback."""
    dialling = httpx.AsyncHTTPTransport(verify=ssl.create_default_context(cafile=ca))
    # httpx has no public hook for the network backend; its pool's attribute is the one seam.
    dialling._pool._network_backend = Loopback(ports)
    return dialling


def by_host(apps: Mapping[str, Any]) -> Any:
    """One ASGI application that routes by the request's Host header."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        headers = {name.lower(): value for name, value in scope.get("headers", [])}
        host = headers.get(b"host", b"").decode("latin-1").rsplit(":", 1)[0]
        target = apps.get(host)
        if target is None:
            await send({"type": "http.response.start", "status": 421, "headers": []})
            await send({"type": "http.response.body", "body": b"misdirected request"})
            return
        await target(scope, receive, send)

    return app


def tls_server(app: Any, port: int, cert: str, key: str) -> uvicorn.Server:
    """A uvicorn server for `app` on 127.0.0.1:PORT with the given leaf."""
    return uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, ssl_certfile=cert,
                                         ssl_keyfile=key, log_level="warning", lifespan="on"))


async def started(server: uvicorn.Server) -> asyncio.Task[None]:
    """Start `server` in the background and return once it listens (or raise its failure)."""
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
            raise RuntimeError("the server stopped before it listened")
        await asyncio.sleep(0.02)
    return task
