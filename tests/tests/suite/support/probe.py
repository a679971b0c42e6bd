"""Escape probes run inside a sandbox by the sandbox_* tests.

Each subcommand prints one line: "ok" when the operation succeeded, else the errno name
(EACCES, EPERM, EROFS, ...). Network probes append the elapsed milliseconds.
"""
import ctypes
import errno
import os
import socket
import sys
import time


def name(e):
    if isinstance(e, OSError) and e.strerror == "EOF":
        return "EOF"
    return errno.errorcode.get(e.errno, str(e.errno)) if isinstance(e, OSError) and e.errno else type(e).__name__


def attempt(fn):
    try:
        r = fn()
        print("ok" if r is None else f"ok {r}")
    except Exception as e:  # noqa: BLE001 - the error name is the result
        print(name(e))


def timed(fn):
    t = time.monotonic()
    try:
        fn()
        res = "ok"
    except Exception as e:  # noqa: BLE001
        res = name(e)
    print(f"{res} {int((time.monotonic() - t) * 1000)}")


def write(path):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.write(fd, b"sandgate-probe\n")
    os.close(fd)


def read(path):
    with open(path, "rb") as f:
        f.read()


def tcp(host, port):
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(3)
    s.connect((host, int(port)))


def talk(host, port):
    """A TCP exchange: connect, send a line, read the answer. Through the transparent capture
    the connect itself succeeds (the proxy accepts it); the refusal is what comes back: a reset
    (ECONNRESET) or the end of the stream (EOF) instead of the echo host's answer."""
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect((host, int(port)))
    s.sendall(b"probe\n")
    if not s.recv(512):
        raise OSError(0, "EOF")


def udp(host, port):
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_DGRAM)
    s.settimeout(1)
    s.sendto(b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07example\x03com\x00\x00\x01\x00\x01", (host, int(port)))
    s.recvfrom(512)


def unix(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)


def abstract(nm):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect("\0" + nm)


def family(num, kind):
    socket.socket(int(num), int(kind)).close()


def pair(num, kind):
    for s in socket.socketpair(int(num), int(kind)):
        s.close()


def raw():
    socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)


libc = ctypes.CDLL(None, use_errno=True)


def check(ret):
    if ret < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def ptrace(pid):
    check(libc.ptrace(16, int(pid), None, None))  # PTRACE_ATTACH


def tiocsti():
    c = ctypes.c_char(b"x")
    check(libc.ioctl(0, 0x5412, ctypes.byref(c)))


def io_uring():
    params = ctypes.create_string_buffer(120)  # struct io_uring_params
    fd = libc.syscall(425, 8, params)  # io_uring_setup(8 entries)
    check(fd)
    os.close(fd)


def x32():
    # getpid (39) through the x32 ABI: ENOSYS where the kernel has no x32, a pid where it has.
    check(libc.syscall(0x40000000 | 39))


def mount(target):
    check(libc.mount(b"none", target.encode(), b"tmpfs", 0, None))


def unshare(flags):
    check(libc.unshare(int(flags, 0)))


def main():
    op, args = sys.argv[1], sys.argv[2:]
    ops = {
        "write": lambda: attempt(lambda: write(args[0])),
        "read": lambda: attempt(lambda: read(args[0])),
        "mkdir": lambda: attempt(lambda: os.mkdir(args[0])),
        "chmod": lambda: attempt(lambda: os.chmod(args[0], 0o777)),
        "utime": lambda: attempt(lambda: os.utime(args[0], (0, 0))),
        "symlink-write": lambda: attempt(lambda: (os.symlink(args[0], args[1]), write(args[1]))[1]),
        "hardlink": lambda: attempt(lambda: os.link(args[0], args[1])),
        "tcp": lambda: timed(lambda: tcp(args[0], args[1])),
        "udp": lambda: timed(lambda: udp(args[0], args[1])),
        "talk": lambda: timed(lambda: talk(args[0], args[1])),
        "unix": lambda: attempt(lambda: unix(args[0])),
        "abstract": lambda: attempt(lambda: abstract(args[0])),
        "raw": lambda: attempt(raw),
        "family": lambda: attempt(lambda: family(args[0], args[1])),
        "pair": lambda: attempt(lambda: pair(args[0], args[1])),
        "kill": lambda: attempt(lambda: os.kill(int(args[0]), 0)),
        "ptrace": lambda: attempt(lambda: ptrace(args[0])),
        "tiocsti": lambda: attempt(tiocsti),
        "io_uring": lambda: attempt(io_uring),
        "x32": lambda: attempt(x32),
        "mount": lambda: attempt(lambda: mount(args[0])),
        "unshare": lambda: attempt(lambda: unshare(args[0])),
        "rename": lambda: attempt(lambda: os.rename(args[0], args[1])),
        "rmdir": lambda: attempt(lambda: os.rmdir(args[0])),
    }
    ops[op]()


main()
