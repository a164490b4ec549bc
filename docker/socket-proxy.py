#!/usr/bin/env python3
"""A read-only proxy in front of the Docker Engine API socket, for weir's Docker
provider: it passes only the GET requests the provider makes (/_ping, /version,
/containers/json, /containers/{id}/json, /events) and answers 403 to anything
else, so a process holding the proxy's socket can watch containers but not
start, stop or exec into them (which the Docker socket itself allows: access to
it is root on the host).

    docker/socket-proxy.py LISTEN_SOCKET [UPSTREAM_SOCKET]   (default /var/run/docker.sock)

The listening socket is made 0666: give it to weir's container by mounting its
*directory* (see docker/README.md). Signals, for tests of the provider's
behaviour when the daemon goes away (docker/test-provider.sh):
    SIGUSR1  outage: every open connection is cut and new ones are closed at once;
    SIGUSR2  back to normal.
Standard library only (python3 >= 3.8).
"""

import asyncio
import os
import re
import signal
import sys

ALLOWED = re.compile(
    rb"^GET (/v[0-9.]+)?/(_ping|version|containers/json|containers/[A-Za-z0-9_.-]+/json|events)(\?[^ ]*)? HTTP/1\.[01]$"
)
MAX_HEAD = 64 * 1024

down = False
open_writers = set()


async def pump(reader, writer):
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        try:
            writer.close()
        except Exception:
            pass


async def requests(client_r, upstream_w, client_w):
    """Forwards request heads one by one (GET has no body), checking each."""
    buf = b""
    try:
        while True:
            while b"\r\n\r\n" not in buf:
                data = await client_r.read(65536)
                if not data:
                    return
                buf += data
                if len(buf) > MAX_HEAD:
                    return
            head, buf = buf.split(b"\r\n\r\n", 1)
            line = head.split(b"\r\n", 1)[0]
            if not ALLOWED.match(line) or re.search(rb"(?im)^(content-length|transfer-encoding):", head):
                body = b'{"message":"refused by the read-only docker socket proxy"}'
                client_w.write(
                    b"HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\nConnection: close\r\n"
                    + b"Content-Length: %d\r\n\r\n" % len(body)
                    + body
                )
                await client_w.drain()
                sys.stderr.write("socket-proxy: refused %r\n" % line.decode("latin-1"))
                return
            upstream_w.write(head + b"\r\n\r\n")
            await upstream_w.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        try:
            upstream_w.close()
            client_w.close()
        except Exception:
            pass


async def handle(client_r, client_w, upstream_path):
    if down:
        client_w.close()
        return
    try:
        up_r, up_w = await asyncio.open_unix_connection(upstream_path)
    except OSError as e:
        sys.stderr.write("socket-proxy: upstream %s: %s\n" % (upstream_path, e))
        client_w.close()
        return
    open_writers.add(client_w)
    open_writers.add(up_w)
    try:
        await asyncio.gather(requests(client_r, up_w, client_w), pump(up_r, client_w))
    finally:
        open_writers.discard(client_w)
        open_writers.discard(up_w)


def outage(on):
    global down
    down = on
    sys.stderr.write("socket-proxy: %s\n" % ("outage: connections cut" if on else "back"))
    if on:
        for w in list(open_writers):
            try:
                w.transport.abort()
            except Exception:
                pass


async def main():
    listen = sys.argv[1]
    upstream = sys.argv[2] if len(sys.argv) > 2 else "/var/run/docker.sock"
    if os.path.exists(listen):
        os.unlink(listen)
    server = await asyncio.start_unix_server(lambda r, w: handle(r, w, upstream), path=listen)
    os.chmod(listen, 0o666)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGUSR1, outage, True)
    loop.add_signal_handler(signal.SIGUSR2, outage, False)
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    sys.stderr.write("socket-proxy: %s -> %s\n" % (listen, upstream))
    async with server:
        await stop.wait()
    if os.path.exists(listen):
        os.unlink(listen)


if __name__ == "__main__":
    asyncio.run(main())
