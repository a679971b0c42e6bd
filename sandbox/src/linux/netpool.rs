//! Network namespaces made ahead of the launch that uses them.
//!
//! A sandbox's network does not depend on the launch: for `run`, a namespace with `lo` up
//! ([`NetKind::Loopback`]); for `net` and `build` ([`NetKind::Proxy`]) also the route device,
//! the nf_tables table, the proxy listener, the DNS stub's sockets and the NFLOG socket, which
//! depend only on the sandbox id (the NFLOG prefix) and the NFLOG group. The daemon has one made
//! while nobody waits, by a [`NetworkFactory`] (a process forked from the daemon while it was
//! single-threaded, since only such a process may enter a user namespace), and hands it to the
//! next launcher, whose sandbox then joins it instead of making its own (see
//! `clone_into_network`). Each namespace serves one sandbox and is never reused.
//!
//! Ownership: the namespace belongs to the factory's user namespace (rootless: one the factory
//! made, mapping only the caller's uid; root: the host's), not to the sandbox's. The sandbox's
//! processes therefore hold no capability over their own network at any time, not only after
//! init drops them.
//!
//! Factory protocol (a `SOCK_SEQPACKET` pair): the daemon sends `ID GROUP KIND` (`proxy` or
//! `loopback`); the factory answers `ok` with the descriptors in [`FD_ORDER`] order, or `err
//! MESSAGE`.

use std::io;
use std::os::fd::{AsFd as _, AsRawFd, OwnedFd, RawFd};

use nix::sched::CloneFlags;

use super::{net, sys};
use crate::fdpass;
use crate::spec::{NetKind, SandboxId};

/// A network made for one sandbox.
#[derive(Debug)]
pub struct PreparedNetwork {
    /// The sandbox id it was made for (its NFLOG prefix).
    pub id: SandboxId,
    /// The NFLOG group its firewall logs to.
    pub group: u16,
    /// The user namespace that owns [`net`](Self::net) (`None`: the host's, for root).
    pub user: Option<OwnedFd>,
    /// The network namespace.
    pub net: OwnedFd,
    /// The route device (a tun), whose routes live as long as this descriptor (`None`: a veth
    /// pair, which needs none, or no route device).
    pub tun: Option<OwnedFd>,
    /// The proxy's sockets ([`NetKind::Proxy`]; `None`: [`NetKind::Loopback`]).
    pub proxy: Option<ProxySockets>,
}

impl PreparedNetwork {
    /// Which kind of network this is.
    pub fn kind(&self) -> NetKind {
        if self.proxy.is_some() { NetKind::Proxy } else { NetKind::Loopback }
    }

    /// Its descriptors in the order they travel ([`FD_ORDER`]), for `SCM_RIGHTS`.
    pub fn raw_fds(&self) -> Vec<RawFd> {
        let mut raw = vec![self.net.as_raw_fd()];
        if let Some(p) = &self.proxy {
            raw.extend([p.listener.as_raw_fd(), p.dns[0].as_raw_fd(), p.dns[1].as_raw_fd()]);
            raw.push(p.nflog.as_raw_fd());
        }
        raw.extend(self.tun.as_ref().map(AsRawFd::as_raw_fd));
        raw.extend(self.user.as_ref().map(AsRawFd::as_raw_fd));
        raw
    }

    /// The network of `kind` whose descriptors came in [`FD_ORDER`] order (`with_tun`,
    /// `with_user`: whether those are among them); an error unless they are exactly these.
    pub fn from_fds(
        id: SandboxId,
        group: u16,
        kind: NetKind,
        with_tun: bool,
        with_user: bool,
        fds: Vec<OwnedFd>,
    ) -> io::Result<PreparedNetwork> {
        let sockets = if kind == NetKind::Proxy { 4 } else { 0 };
        let expected = 1 + sockets + usize::from(with_tun) + usize::from(with_user);
        if fds.len() != expected {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} descriptor(s) where {expected} were due ({FD_ORDER})", fds.len()),
            ));
        }
        let mut fds = fds.into_iter();
        let mut next = || fds.next().ok_or_else(|| io::Error::other("descriptor missing"));
        Ok(PreparedNetwork {
            id,
            group,
            net: next()?,
            proxy: match kind {
                NetKind::Proxy => Some(ProxySockets {
                    listener: next()?,
                    dns: [next()?, next()?],
                    nflog: next()?,
                }),
                NetKind::Loopback => None,
            },
            tun: if with_tun { Some(next()?) } else { None },
            user: if with_user { Some(next()?) } else { None },
        })
    }
}

/// The sockets a proxy network is served on, made inside it.
#[derive(Debug)]
pub struct ProxySockets {
    /// The proxy listener (127.0.0.1:3128 inside).
    pub listener: OwnedFd,
    /// The DNS stub's UDP socket and TCP listener (127.0.0.1:53 inside).
    pub dns: [OwnedFd; 2],
    /// The NFLOG socket bound to the group inside.
    pub nflog: OwnedFd,
}

/// The order of the descriptors in the factory's answer (the sockets for `proxy` only, `tun` and
/// `user` only when present, as its `ok` line says).
const FD_ORDER: &str = "net [listener dns-udp dns-tcp nflog] [tun] [user]";

/// Opens the NFLOG socket of a group inside the current network namespace.
pub type OpenNflog = fn(u16) -> io::Result<OwnedFd>;

/// The process that makes network namespaces for the daemon.
#[derive(Debug)]
pub struct NetworkFactory {
    sock: OwnedFd,
    pid: libc::pid_t,
}

impl NetworkFactory {
    /// Forks the factory. The calling process must have one thread (the daemon calls this
    /// before it starts its runtime); the factory dies with it.
    pub fn start(open_nflog: OpenNflog) -> io::Result<NetworkFactory> {
        let threads = sys::thread_count();
        if threads > 1 {
            return Err(io::Error::other(format!(
                "the network factory must be forked by a single-threaded process ({threads} threads)"
            )));
        }
        let (ours, theirs) = sys::seqpacket_pair()?;
        // A factory that does not answer in this long is taken for dead (see `make`).
        nix::sys::socket::setsockopt(
            &ours,
            nix::sys::socket::sockopt::ReceiveTimeout,
            &nix::sys::time::TimeVal::new(5, 0),
        )?;
        let parent = nix::unistd::getpid().as_raw();
        let (uid, gid) = sys::ids();
        match sys::fork()? {
            Some(pid) => {
                drop(theirs);
                Ok(NetworkFactory { sock: ours, pid })
            }
            None => {
                drop(ours);
                factory(theirs, parent, uid, gid, open_nflog)
            }
        }
    }

    /// Has a network of `kind` made for sandbox `id` (blocking: a few milliseconds). A factory
    /// that is gone, or has not answered within 5 s (then it is killed: a late answer would be
    /// taken for the next request's), is a `BrokenPipe` error, and the process is reaped: it does
    /// not come back.
    pub fn make(&self, id: &SandboxId, group: u16, kind: NetKind) -> io::Result<PreparedNetwork> {
        let gone = |why: &str| {
            // It has closed its socket, so it is on its way out (or stuck: then it goes now).
            let _ = sys::kill(self.pid, libc::SIGKILL);
            let _ = sys::waitpid(self.pid, true);
            io::Error::new(
                io::ErrorKind::BrokenPipe,
                format!("the network factory (pid {}) {why}", self.pid),
            )
        };
        let request = format!("{} {group} {}", id.as_str(), kind.name());
        let mut buf = [0u8; 512];
        let (n, fds) = fdpass::send_with_fds(&self.sock, request.as_bytes(), &[])
            .and_then(|()| fdpass::recv_with_fds(&self.sock, &mut buf))
            .map_err(|e| match e.raw_os_error() {
                Some(libc::EPIPE | libc::ECONNRESET) => gone("stopped"),
                Some(libc::EAGAIN) => gone("did not answer in 5 s and was stopped"),
                _ => e,
            })?;
        if n == 0 {
            return Err(gone("stopped"));
        }
        let answer = String::from_utf8_lossy(&buf[..n]).into_owned();
        if let Some(why) = answer.strip_prefix("err ") {
            return Err(io::Error::other(why.to_owned()));
        }
        let words: Vec<&str> = answer.split(' ').collect();
        if words.first() != Some(&"ok") {
            return Err(io::Error::other(format!("the network factory answered {answer:?}")));
        }
        let (with_tun, with_user) = (words.contains(&"tun"), words.contains(&"user"));
        PreparedNetwork::from_fds(id.clone(), group, kind, with_tun, with_user, fds)
            .map_err(|e| io::Error::other(format!("the network factory answered {answer:?}: {e}")))
    }
}

/// The factory's life: its own user namespace first (rootless), then one network per request.
fn factory(sock: OwnedFd, parent: libc::pid_t, uid: u32, gid: u32, open_nflog: OpenNflog) -> ! {
    let _ = sys::set_name(c"sandgate-netns");
    if sys::set_parent_death_signal(libc::SIGKILL).is_err()
        || nix::unistd::getppid().as_raw() != parent
    {
        sys::exit_now(0);
    }
    // Nothing of the daemon's: its lock files, store and sockets stay the daemon's alone.
    sys::close_all_except(&[2, sock.as_raw_fd()]);
    let user = if uid == 0 {
        None
    } else {
        match own_user_namespace(uid, gid) {
            Ok(u) => Some(u),
            Err(e) => serve_errors(&sock, &format!("cannot make a user namespace: {e}")),
        }
    };
    let mut buf = [0u8; 512];
    loop {
        let n = match fdpass::recv_with_fds(&sock, &mut buf) {
            Ok((0, _)) | Err(_) => sys::exit_now(0),
            Ok((n, _)) => n,
        };
        let request = String::from_utf8_lossy(&buf[..n]).into_owned();
        let answer = parse(&request).and_then(|(id, group, kind)| match kind {
            NetKind::Proxy => make(id, group, open_nflog),
            NetKind::Loopback => make_loopback().map(|net| (vec![net], false)),
        });
        let sent = match answer {
            Ok((made, tun)) => {
                // In FD_ORDER: `make` returns them so, then the user namespace.
                let mut raw: Vec<i32> = made.iter().map(|f| f.as_raw_fd()).collect();
                let mut line = String::from("ok");
                if tun {
                    line.push_str(" tun");
                }
                if let Some(u) = &user {
                    line.push_str(" user");
                    raw.push(u.as_raw_fd());
                }
                fdpass::send_with_fds(sock.as_fd(), line.as_bytes(), &raw)
            }
            Err(e) => fdpass::send_with_fds(sock.as_fd(), format!("err {e}").as_bytes(), &[]),
        };
        if sent.is_err() {
            sys::exit_now(0);
        }
    }
}

/// Answers every request with `why` (the factory cannot make networks at all).
fn serve_errors(sock: &OwnedFd, why: &str) -> ! {
    let mut buf = [0u8; 512];
    loop {
        match fdpass::recv_with_fds(sock, &mut buf) {
            Ok((0, _)) | Err(_) => sys::exit_now(0),
            Ok(_) => {
                if fdpass::send_with_fds(sock, format!("err {why}").as_bytes(), &[]).is_err() {
                    sys::exit_now(0);
                }
            }
        }
    }
}

fn parse(request: &str) -> io::Result<(&str, u16, NetKind)> {
    let bad = || io::Error::other(format!("bad request {request:?}"));
    let mut words = request.split(' ');
    let (Some(id), Some(group), Some(kind), None) =
        (words.next(), words.next(), words.next(), words.next())
    else {
        return Err(bad());
    };
    let group = group.parse().map_err(|_| bad())?;
    let kind = NetKind::from_name(kind).ok_or_else(bad)?;
    // It becomes an NFLOG prefix: only what a sandbox id may be.
    SandboxId::try_from(id.to_owned()).map_err(|_| bad())?;
    Ok((id, group, kind))
}

/// A user namespace for the factory, mapping only the caller's ids to themselves: the
/// capabilities it gives reach only namespaces made inside it.
fn own_user_namespace(uid: u32, gid: u32) -> io::Result<OwnedFd> {
    nix::sched::unshare(CloneFlags::CLONE_NEWUSER)?;
    std::fs::write("/proc/self/setgroups", "deny")?;
    std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1"))?;
    std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1"))?;
    Ok(std::fs::File::open("/proc/self/ns/user")?.into())
}

fn step(what: &'static str) -> impl Fn(io::Error) -> io::Error {
    move |e| io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// A new network namespace with `lo` up (this process moves into it); its descriptor.
fn make_loopback() -> io::Result<OwnedFd> {
    nix::sched::unshare(CloneFlags::CLONE_NEWNET).map_err(|e| step("unshare")(e.into()))?;
    let netns: OwnedFd =
        std::fs::File::open("/proc/thread-self/ns/net").map_err(step("namespace"))?.into();
    net::loopback_up().map_err(step("loopback"))?;
    Ok(netns)
}

/// A new network namespace (this process moves into it), set up as a sandbox's init would.
/// The descriptors in [`FD_ORDER`] order, without `user`, and whether a tun is among them.
fn make(id: &str, group: u16, open_nflog: OpenNflog) -> io::Result<(Vec<OwnedFd>, bool)> {
    let netns = make_loopback()?;
    let tun = net::route_device().map_err(step("route device"))?;
    net::firewall(id, group).map_err(step("firewall"))?;
    let listener = net::proxy_listener().map_err(step("proxy listener"))?;
    let [udp, tcp] = net::dns_sockets().map_err(step("DNS sockets"))?;
    let nflog = open_nflog(group).map_err(step("NFLOG"))?;
    let with_tun = tun.is_some();
    let mut fds = vec![netns, listener, udp, tcp, nflog];
    fds.extend(tun);
    Ok((fds, with_tun))
}

/// Stack of init when it starts inside a prepared network (see [`clone_into_network`]): init
/// runs its whole setup on it. Only the pages it touches are faulted in.
const INIT_STACK: usize = 8 << 20;

/// Starts the sandbox's init inside `network`: a short-lived process sharing the launcher's
/// memory (`CLONE_VM | CLONE_VFORK`, no copy of the address space) joins the network's user
/// namespace (where the factory's capabilities reach it) and network namespace and clones init
/// with `flags` as a child of the launcher (`CLONE_PARENT`), then exits. The launcher itself
/// never joins: a process cannot leave a user namespace it entered, and the launcher may yet
/// start a daemon, which must live in the host's namespaces.
///
/// In init, `init` runs (on the helper's stack, copied with the rest of the memory) and must
/// not return. Returns init's pid in the launcher. Only to be called while the process has a
/// single thread and blocks every signal it handles (see `spawn`).
pub(super) fn clone_into_network(
    flags: libc::c_int,
    network: &PreparedNetwork,
    init: &mut dyn FnMut(),
) -> io::Result<libc::pid_t> {
    check(network)?;
    // Written by the helper (shared memory) before it exits: init's pid, or -errno.
    let mut answer: i64 = -i64::from(libc::ECHILD);
    let helper = super::spawn::vfork_on(INIT_STACK, || {
        let joined = match &network.user {
            Some(user) => nix::sched::setns(user, CloneFlags::CLONE_NEWUSER),
            None => Ok(()),
        }
        .and_then(|()| nix::sched::setns(&network.net, CloneFlags::CLONE_NEWNET));
        if let Err(e) = joined {
            answer = -(e as i64);
            sys::exit_now(1);
        }
        match sys::clone_fork(flags | libc::CLONE_PARENT) {
            Ok(Some(pid)) => {
                answer = i64::from(pid);
                sys::exit_now(0);
            }
            Ok(None) => {
                init();
                sys::exit_now(127);
            }
            Err(e) => {
                answer = -i64::from(e.raw_os_error().unwrap_or(libc::EIO));
                sys::exit_now(1);
            }
        }
    })?;
    let _ = sys::waitpid(helper, true);
    if answer > 0 {
        Ok(answer as libc::pid_t)
    } else {
        Err(io::Error::from_raw_os_error(-answer as i32))
    }
}

/// Refuses a network that is not a fresh one: the launcher's own network namespace (or user
/// namespace) handed back would give the sandbox the host's network. (The daemon's socket is the
/// user's alone; this is the check that costs nothing.)
fn check(network: &PreparedNetwork) -> io::Result<()> {
    let ours = |fd: &OwnedFd, path: &str| -> io::Result<bool> {
        let (theirs, ours) = (nix::sys::stat::fstat(fd.as_raw_fd())?, nix::sys::stat::stat(path)?);
        Ok((theirs.st_dev, theirs.st_ino) == (ours.st_dev, ours.st_ino))
    };
    if ours(&network.net, "/proc/self/ns/net")?
        || network.user.as_ref().map(|u| ours(u, "/proc/self/ns/user")).transpose()? == Some(true)
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the network made ahead is the launcher's own namespace",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn network(net: &str, user: Option<&str>) -> PreparedNetwork {
        let open = |p: &str| OwnedFd::from(std::fs::File::open(p).unwrap());
        PreparedNetwork {
            id: SandboxId::try_from("sg-t".to_owned()).unwrap(),
            group: 7,
            user: user.map(open),
            net: open(net),
            tun: None,
            proxy: None,
        }
    }

    #[test]
    fn the_launchers_own_namespaces_are_refused() {
        assert!(check(&network("/proc/self/ns/net", None)).is_err());
        assert!(check(&network("/proc/self/ns/net", Some("/proc/self/ns/user"))).is_err());
        // Control: another process's namespaces would pass the check when they differ; a
        // namespace file of another type than ours for `net` is not ours either.
        assert!(check(&network("/proc/self/ns/uts", None)).is_ok());
        assert!(check(&network("/proc/self/ns/uts", Some("/proc/self/ns/ipc"))).is_ok());
    }

    #[test]
    fn requests_are_an_id_a_group_and_a_kind() {
        assert_eq!(parse("sg-1-ab 7 proxy").unwrap(), ("sg-1-ab", 7, NetKind::Proxy));
        assert_eq!(parse("sg-1-ab 7 loopback").unwrap(), ("sg-1-ab", 7, NetKind::Loopback));
        for bad in [
            "",
            "sg-1",
            "sg-1 7",
            "sg-1 x proxy",
            "sg-1 7 other",
            "sg-1 7 proxy x",
            " 7 proxy",
            "sg\n1 7 proxy",
            "a 70000 proxy",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} was taken");
        }
    }
}
