#!/usr/bin/env python3
"""Helpers of bench/daemon-load.sh (python3 standard library only; 127.0.0.1 only).

  daemon_load_client.py echo PORT_FILE
      A TCP echo server on 127.0.0.1 (asyncio); writes its port to PORT_FILE.
  daemon_load_client.py client ECHO_PORT TUNNELS GO_FILE [CHURN]
      Runs inside a sandbox: opens TUNNELS CONNECT tunnels to 127.0.0.1:ECHO_PORT through the
      sandbox's proxy (127.0.0.1:3128), prints "open N", waits for GO_FILE (it holds the wall-clock
      end time), then on every tunnel sends 16 KiB and reads the same 16 KiB back, again and
      again, until the end time. With CHURN > 0 a tunnel is closed and a new one opened after
      every CHURN round trips. Prints one JSON line with the counts.

A failed exchange counts as an error; the tunnel is then opened again (each failed attempt also
counts), so one bad moment does not silence a tunnel for the rest of the run.
"""

import asyncio
import json
import os
import sys
import time

PROXY = ("127.0.0.1", 3128)
CHUNK = 16 * 1024
TIMEOUT = 30.0


class Echo(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.transport.write(data)


async def echo(port_file):
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Echo, "127.0.0.1", 0, backlog=4096)
    port = server.sockets[0].getsockname()[1]
    tmp = port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d\n" % port)
    os.rename(tmp, port_file)
    async with server:
        await server.serve_forever()


async def tunnel(port):
    reader, writer = await asyncio.open_connection(*PROXY)
    writer.write(b"CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % (port, port))
    head = await reader.readuntil(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        writer.close()
        raise OSError("CONNECT refused: %r" % head.split(b"\r\n")[0])
    return reader, writer


class Stats:
    def __init__(self):
        self.round_trips = 0
        self.bytes = 0
        self.errors = 0
        self.reconnects = 0
        self.reopened = 0
        self.first_error = None

    def error(self, e):
        self.errors += 1
        if self.first_error is None:
            self.first_error = "%s: %s" % (type(e).__name__, e)


async def pump(i, port, conn, end, stats, churn):
    payload = (b"%04d" % (i % 10000)) * (CHUNK // 4)
    done = 0
    failed = conn is None  # its first opening failed
    while time.time() < end:
        if conn is None:
            try:
                conn = await asyncio.wait_for(tunnel(port), TIMEOUT)
                if failed:
                    stats.reconnects += 1
                else:
                    stats.reopened += 1
                failed = False
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError) as e:
                stats.error(e)
                await asyncio.sleep(0.5)
                continue
        reader, writer = conn
        try:
            writer.write(payload)
            back = await asyncio.wait_for(reader.readexactly(CHUNK), TIMEOUT)
            if back != payload:
                raise OSError("echo mismatch")
            stats.round_trips += 1
            stats.bytes += 2 * CHUNK
            done += 1
            if churn and done % churn == 0:
                writer.close()
                await writer.wait_closed()
                conn = None
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError) as e:
            stats.error(e)
            writer.close()
            conn = None
            failed = True
    if conn is not None:
        conn[1].close()


async def client(port, n, go_file, churn):
    stats = Stats()
    results = await asyncio.gather(*(asyncio.wait_for(tunnel(port), TIMEOUT) for _ in range(n)),
                                   return_exceptions=True)
    conns = []
    for r in results:
        if isinstance(r, BaseException):
            stats.error(r)
            conns.append(None)
        else:
            conns.append(r)
    print("open %d" % sum(c is not None for c in conns), flush=True)
    while not os.path.exists(go_file):
        await asyncio.sleep(0.05)
    with open(go_file) as f:
        end = float(f.read())
    await asyncio.gather(*(pump(i, port, c, end, stats, churn) for i, c in enumerate(conns)))
    print(json.dumps({
        "tunnels": n,
        "round_trips": stats.round_trips,
        "bytes": stats.bytes,
        "errors": stats.errors,
        "reconnects": stats.reconnects,
        "reopened": stats.reopened,
        "first_error": stats.first_error,
    }), flush=True)


def main(argv):
    if len(argv) == 3 and argv[1] == "echo":
        asyncio.run(echo(argv[2]))
    elif len(argv) in (5, 6) and argv[1] == "client":
        churn = int(argv[5]) if len(argv) == 6 else 0
        asyncio.run(client(int(argv[2]), int(argv[3]), argv[4], churn))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
