"""A test host that records what reaches it, for `suite::redteam_transparent`.

Listens on every address of its namespace, IPv4 and IPv6: 443 (answers the first bytes with a TLS
handshake_failure alert, then reads), 8443 (answers the first
TLS record with a HelloRetryRequest, then reads), 80 (answers each request head with 200 `ok`),
5432 (speaks first: `BANNER`). When a connection ends it appends one line to the log (the first
argument): `conn LOCAL_IP:PORT BYTES HEX_OF_WHAT_CAME` (and `open LOCAL_IP:PORT` when it
starts). Prints `ready` once listening.
"""
import os
import socket
import struct
import sys
import threading

LOG = sys.argv[1]
LOCK = threading.Lock()
HRR_RANDOM = bytes.fromhex("cf21ad74e59a6111be1d8c021e65b891c2a211167abb8c5e079e09e2c8a8339c")


def hrr():
    exts = b"\x00\x2b\x00\x02\x03\x04" + b"\x00\x33\x00\x02\x00\x17"
    body = b"\x03\x03" + HRR_RANDOM + b"\x20" + os.urandom(32) + b"\x13\x01\x00"
    body += struct.pack("!H", len(exts)) + exts
    hs = b"\x02" + len(body).to_bytes(3, "big") + body
    return b"\x16\x03\x03" + struct.pack("!H", len(hs)) + hs


def local_ip(conn):
    """The address the connection was made to (an IPv4 one as IPv4, not IPv4-mapped)."""
    ip = conn.getsockname()[0]
    return ip[7:] if ip.startswith("::ffff:") else ip


def serve(conn, port):
    local = local_ip(conn)
    got = b""
    answered = False
    try:
        if port == 5432:
            conn.sendall(b"BANNER\n")
        while True:
            data = conn.recv(65536)
            if not data:
                break
            got += data
            if port == 443 and not answered:
                conn.sendall(b"\x15\x03\x03\x00\x02\x02\x28")  # alert: handshake_failure
                answered = True
            if port == 8443 and not answered:
                conn.sendall(hrr())
                answered = True
            if port == 80 and b"\r\n\r\n" in got and not answered:
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                answered = True
    except OSError:
        pass
    finally:
        conn.close()
        with LOCK, open(LOG, "a") as f:
            f.write(f"conn {local}:{port} {len(got)} {got.hex()}\n")


def listen(port):
    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.bind(("::", port))
    s.listen(64)
    return s


def accept(s, port):
    while True:
        conn, _ = s.accept()
        # Logged here, in accept order: a connection accepted later (the test's sentinel) is
        # logged after every one before it on this port.
        with LOCK, open(LOG, "a") as f:
            f.write(f"open {local_ip(conn)}:{port}\n")
        threading.Thread(target=serve, args=(conn, port), daemon=True).start()


socks = [(listen(p), p) for p in (443, 8443, 80, 5432)]
for s, p in socks:
    threading.Thread(target=accept, args=(s, p), daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
