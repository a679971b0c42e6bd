# Host-side listeners for the unix peer test: a datagram, a stream and a seqpacket socket bound at
# the paths given (mode 0666), "ready" once bound; when standard input closes, prints every
# datagram received and every connection accepted (with what it sent), then "end".
import os, socket, sys

kinds = {"dgram": socket.SOCK_DGRAM, "stream": socket.SOCK_STREAM,
         "seqpacket": socket.SOCK_SEQPACKET}
socks = {}
for path in sys.argv[1:]:
    kind = next(k for k in kinds if os.path.basename(path).startswith(k))
    s = socket.socket(socket.AF_UNIX, kinds[kind])
    s.bind(path)
    os.chmod(path, 0o666)
    if kind != "dgram":
        s.listen(64)
    s.setblocking(False)
    socks[path] = (kind, s)
print("ready", flush=True)
sys.stdin.read()
for path, (kind, s) in socks.items():
    name = os.path.basename(path)
    while True:
        try:
            if kind == "dgram":
                print(f"{name} got {s.recv(4096)!r}")
            else:
                c, _ = s.accept()
                c.setblocking(False)
                try:
                    data = c.recv(4096)
                except OSError:
                    data = b""  # the sender is gone; what it sent is already queued
                print(f"{name} accepted {data!r}")
        except BlockingIOError:
            break
print("end", flush=True)
