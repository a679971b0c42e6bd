//! The network namespace: `lo`, and for the proxy mode a veth pair with a default route so that
//! direct connections reach the firewall's output hook (logged and refused at once) instead of
//! failing early with "network unreachable" where nothing would see them.

use std::ffi::OsStr;
use std::io::{self, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::os::fd::OwnedFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
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

/// Root-owned directories searched for `ip` before `PATH` (the same order as the firewall
/// manager's `sandgate_pf::SYSTEM_DIRS`): a normal user's `PATH` on Debian has no `/usr/sbin`, and
/// a program that runs with `CAP_NET_ADMIN` in the namespace should not come from a directory on
/// a `PATH` the caller may write. (Replaced by netlink later; until then this mirrors pf's lookup.)
const SYSTEM_DIRS: [&str; 6] =
    ["/usr/sbin", "/sbin", "/usr/bin", "/bin", "/usr/local/sbin", "/usr/local/bin"];

/// Finds `program` in [`SYSTEM_DIRS`], then in the absolute directories of `path`; the error
/// names the Debian package to install.
pub fn system_program(
    program: &str,
    path: Option<&OsStr>,
    is_program: &dyn Fn(&Path) -> bool,
) -> Result<PathBuf, String> {
    let from_path = path.map(std::env::split_paths).into_iter().flatten();
    let dirs = SYSTEM_DIRS.iter().map(PathBuf::from).chain(from_path.filter(|d| d.is_absolute()));
    if let Some(found) = dirs.map(|d| d.join(program)).find(|p| is_program(p)) {
        return Ok(found);
    }
    let package = match program {
        "ip" => "; install the `iproute2` package (Debian/Ubuntu: apt install iproute2)",
        "nft" => "; install the `nftables` package (Debian/Ubuntu: apt install nftables)",
        _ => "",
    };
    Err(format!("cannot run `{program}`: not found in {} or PATH{package}", SYSTEM_DIRS.join(", ")))
}

fn is_executable_file(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Runs `program args` with `input` on stdin; a failure carries its stderr.
pub fn run_stdin(program: &str, args: &[&str], input: &str) -> Result<(), String> {
    let path = system_program(program, std::env::var_os("PATH").as_deref(), &is_executable_file)?;
    let mut child = Command::new(path)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_is_found_in_sbin_without_sbin_on_path() {
        let debian = OsStr::new("/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games");
        let at = |want: &'static str| move |p: &Path| p == Path::new(want);
        for want in ["/usr/sbin/ip", "/sbin/ip", "/bin/ip"] {
            assert_eq!(system_program("ip", Some(debian), &at(want)).unwrap(), Path::new(want));
        }
        let e = system_program("ip", Some(debian), &|_| false).unwrap_err();
        assert!(e.contains("/usr/sbin") && e.contains("`iproute2`"), "{e}");
        assert!(system_program("ip", Some(OsStr::new("rel")), &at("rel/ip")).is_err());
    }
}
