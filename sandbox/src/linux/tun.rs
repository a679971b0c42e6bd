//! The proxy mode's route device as one tun device instead of a veth pair.
//!
//! Direct connections need a route (or they fail with "network unreachable" before the firewall's
//! output hook sees them, and nothing is reported); the device at the end of that route never
//! carries a packet, since the firewall refuses everything but loopback first. A veth pair is two
//! network devices (two registrations, each with its sysfs entries, IPv4/IPv6 configuration and
//! sysctl tables); a tun device is one, and made half a millisecond of CPU less per `net`/`build`
//! launch (`bench/launch-cpu.sh`). Were a packet to get past the firewall, it would end in the
//! tun's queue, read by nobody — as with the veth pair, whose peer led nowhere either.
//!
//! Where no tun device can be made (containers without `/dev/net/tun`, kernels without TUN, a
//! security module refusing it) the launcher falls back to the veth pair.

#![allow(unsafe_code)]

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// Creates the tun device `name` in the calling process's network namespace (which needs
/// `CAP_NET_ADMIN` there). The device lives while the returned descriptor is open: its queue
/// keeps the carrier on, so that the link is `UP` as the veth was. `None`: no tun here (no
/// device node, no driver, refused by a security module, something else at that path), and the
/// caller makes the veth pair instead — the same wall, one device more.
pub fn create(name: &str) -> Option<OwnedFd> {
    // SAFETY: a constant NUL-terminated path and constant flags.
    let fd = unsafe {
        libc::open(c"/dev/net/tun".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC | libc::O_NONBLOCK)
    };
    if fd < 0 {
        return None;
    }
    // SAFETY: fd was just returned by open() and is owned by nobody else.
    let tun = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: a zeroed ifreq is valid; the name is copied within bounds (IFNAMSIZ - 1), the flags
    // are a c_short in the union, and TUNSETIFF reads the struct it is given.
    unsafe {
        let mut req = std::mem::zeroed::<libc::ifreq>();
        for (dst, src) in req.ifr_name.iter_mut().zip(name.bytes().take(libc::IFNAMSIZ - 1)) {
            *dst = src as libc::c_char;
        }
        req.ifr_ifru.ifru_flags = (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short;
        if libc::ioctl(tun.as_raw_fd(), libc::TUNSETIFF, &req) < 0 {
            return None;
        }
        // Persistent: closing the descriptor (when init exits) then only detaches it, and the
        // device goes with the namespace, in the kernel's cleanup worker. A non-persistent one
        // is unregistered by that close, which waits for RCU grace periods in init's exit:
        // ~17 ms of wall time per launch, where the veth pair cost nothing there.
        if libc::ioctl(tun.as_raw_fd(), libc::TUNSETPERSIST, 1 as libc::c_ulong) < 0 {
            return None;
        }
    }
    Some(tun)
}
