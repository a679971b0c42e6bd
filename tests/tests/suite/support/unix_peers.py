# Tries every way a sandboxed command could make a unix socket name a peer outside: for each
# socket type, a socket made by socket(), each end of a socketpair(), and an end received over
# another pair (SCM_RIGHTS); for each, connect(), sendto() and sendmsg() with a name, after bind()
# to a path of its own, and (for pairs) after the other end was connected. The targets are the
# paths given as arguments. Prints one line per attempt ("<what>: ok" or an errno name); what
# reached a target is for the listener to say, not this script.
import array, errno, os, socket, sys

targets = sys.argv[1:]
TYPES = {"stream": socket.SOCK_STREAM, "dgram": socket.SOCK_DGRAM,
         "seqpacket": socket.SOCK_SEQPACKET, "raw": socket.SOCK_RAW}
counter = [0]


def writable_dir():
    for d in (os.getcwd(), "/tmp"):
        if os.access(d, os.W_OK):
            return d
    return None


def fresh_path():
    d = writable_dir()
    counter[0] += 1
    return os.path.join(d or "/tmp", f".peer-{os.getpid()}-{counter[0]}.sock")


def passed(kind):
    """An end of a `kind` pair received over a stream pair, as a socket."""
    a, b = socket.socketpair(socket.AF_UNIX, kind)
    x, y = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    x.sendmsg([b"f"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [a.fileno()]))])
    _, anc, _, _ = y.recvmsg(1, socket.CMSG_SPACE(4))
    fd = array.array("i", anc[0][2][:4])[0]
    return socket.socket(fileno=fd), (a, b, x, y)


def makers(kind):
    yield "socket", lambda: (socket.socket(socket.AF_UNIX, kind), ())
    yield "pair-end", lambda: (lambda p: (p[0], p))(socket.socketpair(socket.AF_UNIX, kind))
    yield "passed-end", lambda: passed(kind)


def ways(target):
    msg = lambda what: f"{what} -> {os.path.basename(target)}".encode()

    def connect(s, what):
        s.connect(target)
        s.send(msg(what))

    def sendto(s, what):
        s.sendto(msg(what), target)

    def sendmsg(s, what):
        s.sendmsg([msg(what)], [], 0, target)

    def bound_sendto(s, what):
        s.bind(fresh_path())
        s.sendto(msg(what), target)

    def bound_connect(s, what):
        s.bind(fresh_path())
        s.connect(target)
        s.send(msg(what))

    yield "connect", connect
    yield "sendto", sendto
    yield "sendmsg", sendmsg
    yield "bind+sendto", bound_sendto
    yield "bind+connect", bound_connect


for tname, kind in TYPES.items():
    for mname, make in makers(kind):
        for target in targets:
            for wname, way in ways(target):
                what = f"{mname} {tname} {wname}"
                try:
                    s, keep = make()
                except OSError as e:
                    print(f"{what} {os.path.basename(target)}: make {errno.errorcode[e.errno]}")
                    continue
                # Non-blocking: a full queue at the listener (unix datagram queues are short)
                # answers EAGAIN instead of holding the script.
                s.setblocking(False)
                try:
                    way(s, what)
                    print(f"{what} {os.path.basename(target)}: ok")
                except OSError as e:
                    print(f"{what} {os.path.basename(target)}: {errno.errorcode[e.errno]}")
                # the other end of a pair, connected first to the target, then this end sends
                if mname == "pair-end" and keep:
                    try:
                        keep[1].setblocking(False)
                        keep[0].setblocking(False)
                        keep[1].connect(target)
                        keep[0].sendto(f"{what} other-end".encode(), target)
                        print(f"{what} other-end: ok")
                    except OSError as e:
                        print(f"{what} other-end: {errno.errorcode[e.errno]}")
print("done")
