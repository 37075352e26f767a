"""A TCP forwarder from an address inside a network namespace to one on this machine's loopback.

The real node (`e2e.node`) lives in a network namespace of its own; the local apiserver listens on
127.0.0.1 of the machine. This process opens its listening socket inside the node's namespace (a
socket keeps the namespace it was made in), returns to its own, and copies bytes both ways to the
target. So the node's kubelet and pods reach the apiserver at the ``kubernetes`` Service's address,
``10.0.0.1:443``, the node's own address, and no traffic leaves the machine's loopback and the
harness's namespace.

    python -m e2e.node.forward /run/netns/NAME 10.0.0.1 443 127.0.0.1 PORT
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import socket
import sys

CLONE_NEWNET = 0x40000000


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"setns: {os.strerror(error)}")


def listen_in(netns: str, host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` in the network namespace at ``netns``."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(netns, os.O_RDONLY)
    try:
        _setns(target)
        try:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(128)
            sock.setblocking(False)
        finally:
            _setns(own)
    finally:
        os.close(own)
        os.close(target)
    return sock


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def serve(listener: socket.socket, target_host: str, target_port: int) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(target_host, target_port)
        except OSError as error:
            print(f"cannot reach {target_host}:{target_port}: {error}", flush=True)
            writer.close()
            return
        await asyncio.gather(_pump(reader, upstream_writer), _pump(upstream_reader, writer))

    server = await asyncio.start_server(handle, sock=listener)
    print(f"forwarding {listener.getsockname()} to {target_host}:{target_port}", flush=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str]) -> None:
    netns, host, port, target_host, target_port = argv
    listener = listen_in(netns, host, int(port))
    asyncio.run(serve(listener, target_host, int(target_port)))


if __name__ == "__main__":
    main(sys.argv[1:])
