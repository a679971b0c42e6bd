//! The network namespace: `lo`, and for the proxy mode a veth pair with a default route so that
//! direct connections reach the firewall's output hook (logged and refused at once) instead of
//! failing early with "network unreachable" where nothing would see them.

use std::io::{self, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::os::fd::OwnedFd;
use std::process::{Command, Stdio};

use super::sys;
use crate::spec::PROXY_PORT;

/// `ip -batch` lines for the veth pair. Both ends stay in the namespace; the addresses are from
/// the documentation ranges (RFC 5737 / RFC 3849), so they can collide with nothing real.
/// `nodad`: the IPv6 address must be usable at once, not after duplicate address detection.
pub const VETH_BATCH: &str = "link add sg0 type veth peer name sg1
link set sg1 up
link set sg0 up
addr add 192.0.2.1/24 dev sg0
addr add 2001:db8::1/64 dev sg0 nodad
route add default dev sg0
route add ::/0 dev sg0
";

/// Brings `lo` up (both network modes).
pub fn loopback_up() -> io::Result<()> {
    sys::interface_up("lo")
}

/// Creates the veth pair and routes (proxy mode) with one `ip -batch -`.
pub fn veth() -> Result<(), String> {
    run_stdin("ip", &["-batch", "-"], VETH_BATCH)
}

/// Runs `program args` with `input` on stdin; a failure carries its stderr.
pub fn run_stdin(program: &str, args: &[&str], input: &str) -> Result<(), String> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{program}: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(input.as_bytes()).map_err(|e| format!("{program}: {e}"))?;
    }
    let out = child.wait_with_output().map_err(|e| format!("{program}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// The proxy listener, bound inside the namespace to 127.0.0.1:[`PROXY_PORT`].
pub fn proxy_listener() -> io::Result<OwnedFd> {
    let l = TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, PROXY_PORT))?;
    Ok(OwnedFd::from(l))
}
