"""Attacks on the transparent path, run inside a sandbox by `suite::redteam_transparent`.

Each line of the script's arguments is one attack `NAME OP ARGS...` (split on spaces), run in
order; each prints one line `NAME RESULT`. Results: `alert` (a TLS access_denied alert came
back), `server-alert` (the test host's handshake_failure alert: the hello reached it), `hrr` (a HelloRetryRequest came back and nothing after the second hello), `http CODE`,
`banner TEXT` (the server spoke first), `silent` (connected, nothing came back in time),
`closed` (EOF), `reset`, an errno name, or for `resolve` the addresses.
"""
import os
import socket
import struct
import sys
import time

HRR_RANDOM = bytes.fromhex("cf21ad74e59a6111be1d8c021e65b891c2a211167abb8c5e079e09e2c8a8339c")


def ext(kind, body):
    return struct.pack("!HH", kind, len(body)) + body


def client_hello(sni):
    """A well-formed TLS 1.3 ClientHello naming `sni` (none when `-`)."""
    exts = b""
    if sni != "-":
        name = sni.encode()
        entry = b"\x00" + struct.pack("!H", len(name)) + name
        exts += ext(0, struct.pack("!H", len(entry)) + entry)
    exts += ext(0x2B, b"\x02\x03\x04")  # supported_versions: TLS 1.3
    exts += ext(0x0A, b"\x00\x02\x00\x1d")  # supported_groups: x25519
    share = b"\x00\x1d\x00\x20" + os.urandom(32)
    exts += ext(0x33, struct.pack("!H", len(share)) + share)  # key_share
    exts += ext(0x0D, b"\x00\x02\x04\x03")  # signature_algorithms
    body = b"\x03\x03" + os.urandom(32) + b"\x20" + os.urandom(32)
    body += b"\x00\x02\x13\x01" + b"\x01\x00" + struct.pack("!H", len(exts)) + exts
    hs = b"\x01" + len(body).to_bytes(3, "big") + body
    return b"\x16\x03\x01" + struct.pack("!H", len(hs)) + hs


def errname(e):
    if isinstance(e, socket.timeout):
        return "ETIMEDOUT"
    if isinstance(e, OSError) and e.errno:
        import errno

        return errno.errorcode.get(e.errno, str(e.errno))
    return type(e).__name__


def connect(host, port, timeout=8):
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect((host, int(port)))
    return s


def read_some(s, wait):
    """What came back within `wait` seconds: bytes, b"" (EOF), "reset" or None (nothing)."""
    s.settimeout(wait)
    try:
        return s.recv(65536)
    except socket.timeout:
        return None
    except ConnectionResetError:
        return "reset"


def verdict(data):
    if data is None:
        return "silent"
    if data == "reset":
        return "reset"
    if data == b"":
        return "closed"
    if data[:1] == b"\x15" and data[5:7] == b"\x02\x31":
        return "alert"
    if data[:1] == b"\x15" and data[5:7] == b"\x02\x28":
        return "server-alert"
    if data.startswith(b"HTTP/1."):
        return "http " + data.split(b" ")[1].decode()
    if data[:1] == b"\x16" and data[11:43] == HRR_RANDOM:
        return "hrr"
    return "banner " + data[:40].decode("latin-1").strip().replace(" ", "_")


def tls(host, port, sni, second=None):
    s = connect(host, port)
    s.sendall(client_hello(sni))
    got = read_some(s, 4)
    if second is None or verdict(got) != "hrr":
        return verdict(got)
    s.sendall(client_hello(second))
    return "hrr-then-" + verdict(read_some(s, 4))


def http(host, port, *hosts):
    s = connect(host, port)
    head = "GET / HTTP/1.1\r\n" + "".join(f"Host: {h}\r\n" for h in hosts) + "\r\n"
    s.sendall(head.encode())
    return verdict(read_some(s, 6))


def tcp(host, port, wait="1"):
    """Connects and says nothing (a server-speaks-first client)."""
    s = connect(host, port)
    return verdict(read_some(s, float(wait)))


def slow(host, port, wait):
    """Connects and sends the first 3 bytes of a ClientHello, then nothing."""
    s = connect(host, port)
    s.sendall(client_hello("x.example")[:3])
    t = time.monotonic()
    got = verdict(read_some(s, float(wait)))
    return f"{got} after {time.monotonic() - t:.0f}s"


def udp(host, port):
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_DGRAM)
    s.settimeout(2)
    s.connect((host, int(port)))
    s.send(b"\x00")
    s.recv(512)
    return "ok"


def resolve(name):
    try:
        infos = socket.getaddrinfo(name, 443, socket.AF_INET, socket.SOCK_STREAM)
    except socket.gaierror as e:
        return "gaierror " + str(e.errno)
    return " ".join(sorted({i[4][0] for i in infos}))


def ptr(ip):
    try:
        return "name " + socket.gethostbyaddr(ip)[0]
    except (socket.herror, socket.gaierror) as e:
        return "noname " + str(e.args[0])


def sockopt(level, opt, value):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(int(level), int(opt), value)
    return "ok"


def bound(dev, host, port):
    """SO_BINDTODEVICE to `dev`, then a connection to `host` that says nothing."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, dev.encode())
    except OSError as e:
        return "bind-" + errname(e)
    s.settimeout(8)
    s.connect((host, int(port)))
    return verdict(read_some(s, 5))


def fastopen(host, port):
    """TCP Fast Open: data in the SYN (MSG_FASTOPEN), to a server-speaks-first port."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.sendto(b"fastopen-data\n", 0x20000000, (host, int(port)))  # blocking: waits for the SYN-ACK
    return verdict(read_some(s, 5))


def names(count, suffix):
    """Resolves `count` new names under `suffix`; says how many got an address."""
    got = 0
    for i in range(int(count)):
        try:
            socket.getaddrinfo(f"n{i}.{suffix}", 443, socket.AF_INET, socket.SOCK_STREAM)
            got += 1
        except socket.gaierror:
            pass
    return f"resolved {got}"


def flood(count, suffix, port):
    """Resolves `count` new names under `suffix` and connects to each (waiting up to 5 s for an
    answer); the verdicts, counted, and how many connections were answered within 1 s."""
    seen = {}
    quick = 0
    for i in range(int(count)):
        t = time.monotonic()
        try:
            ip = socket.getaddrinfo(f"f{i}.{suffix}", 443, socket.AF_INET)[0][4][0]
            v = tcp(ip, port, "5")
        except Exception as e:  # noqa: BLE001 - the error name is the result
            v = errname(e)
        quick += time.monotonic() - t < 1
        seen[v] = seen.get(v, 0) + 1
    return " ".join(f"{k}={v}" for k, v in sorted(seen.items())) + f" quick={quick}"


def connect_each(first, count, port):
    """Connects to `count` synthetic addresses from `first` up; the verdicts, counted."""
    base = struct.unpack("!I", socket.inet_aton(first))[0]
    seen = {}
    for i in range(int(count)):
        ip = socket.inet_ntoa(struct.pack("!I", base + i))
        try:
            v = tcp(ip, port, "2")
        except Exception as e:  # noqa: BLE001 - the error name is the result
            v = errname(e)
        seen[v] = seen.get(v, 0) + 1
    return " ".join(f"{k}={v}" for k, v in sorted(seen.items()))


OPS = {
    "tls": tls,
    "http": http,
    "tcp": tcp,
    "slow": slow,
    "udp": udp,
    "resolve": resolve,
    "ptr": ptr,
    "raw": lambda: (socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP), "ok")[1],
    "transparent": lambda: sockopt(socket.SOL_IP, 19, 1),  # IP_TRANSPARENT
    "mark": lambda: sockopt(socket.SOL_SOCKET, 36, 1),  # SO_MARK
    "bound": bound,
    "fastopen": fastopen,
    "names": names,
    "connect_each": connect_each,
    "flood": flood,
}


def main():
    for line in sys.argv[1:]:
        name, op, *args = line.split(" ")
        args = [os.environ.get(a[1:], a) if a.startswith("$") else a for a in args]
        try:
            res = OPS[op](*args)
        except Exception as e:  # noqa: BLE001 - the error name is the result
            res = errname(e)
        print(f"{name} {res}", flush=True)
        if op == "resolve":
            os.environ[name] = res.split(" ")[0]


main()
