//! Which process in a sandbox opened a connection: the daemon's
//! [`Attributor`](sandgate_proxy::Attributor).
//!
//! The proxy gives the two addresses of the client's socket as the sandbox's network namespace
//! sees them (its local address, and the proxy listener or, for a transparent connection, the
//! original destination). The lookup:
//!
//! 1. The sandbox's processes: its init is the child of the launcher (whose pid `register`
//!    gave) that is pid 1 of a pid namespace of its own; the rest are init's descendants
//!    (`/proc/PID/task/*/children`), which is every process of the sandbox, since init reaps
//!    the orphans of its namespace.
//! 2. The socket: each process's descriptors that are sockets (`/proc/PID/fd/N` →
//!    `socket:[inode]`) are copied into the daemon with `pidfd_getfd(2)`, and the copy's
//!    `getsockname`/`getpeername` compared with the two addresses; the copy is closed at once.
//!    Processes are searched from the leaves of the tree up (the client is usually a leaf: a
//!    shell's child).
//! 3. The process: its pid in the sandbox (`NSpid` in `/proc/PID/status`, last field), its
//!    executable (`/proc/PID/exe`), its argv (`/proc/PID/cmdline`, shortened by
//!    [`command_line`]).
//!
//! # Why not the namespace's TCP table or sock_diag
//!
//! - `/proc/PID/net/tcp` (and `tcp6`) is one read, but the kernel walks the whole established
//!   hash table to write it, every namespace's buckets: 1.8 ms a read on this project's machines
//!   (262,144 buckets), two reads per connection — more than the proxy spends on a tunnel. It
//!   is kept as the fallback where `pidfd_getfd` is refused (no ptrace access, a kernel older
//!   than 5.6).
//! - `sock_diag` answers one exact lookup in microseconds, but from a netlink socket *in* the
//!   sandbox's namespace: `setns` into it needs `CAP_SYS_ADMIN` in the daemon's own user
//!   namespace, which a rootless daemon does not have, and a socket made by the launcher would
//!   add a descriptor to every launch path (own network, prepared network) for this alone.
//! - `pidfd_getfd` costs a few system calls per socket the sandbox holds (tens of microseconds
//!   for a sandbox with tens of sockets) and needs only what the daemon has over its sandboxes
//!   anyway: ptrace access (same user; the owner of their user namespace when rootless). The
//!   copies are sockets only (checked by the link first), read for their names, and closed.
//!   The lookup runs on the blocking pool and stops after 4,096 sockets: how much it reads is
//!   the sandbox's to choose, and it must not hold up the workers that serve other sandboxes.
//!
//! # What it is worth
//!
//! The pid and the executable come from the kernel; the command line is the process's own
//! (it can write any argv). A socket two processes hold (inherited over a fork, or passed with
//! `SCM_RIGHTS`) is named for the holder found first from the leaves up. A client that exits before the lookup
//! runs (it starts when the connection is accepted) is not named.

// Elsewhere no process is named: the procfs helpers serve only the Linux search.
#![cfg_attr(not(target_os = "linux"), allow(dead_code))]
use std::net::{IpAddr, SocketAddr};
use std::path::Path;

use sandgate_config::{ProcessInfo, command_line};
use sandgate_proxy::{Attributor, BoxFuture, SandboxId};

use crate::adapters::Registry;

/// Finds processes in sandboxes from `/proc`.
pub struct ProcAttributor {
    launchers: Launchers,
    /// Each sandbox's init, once found (it lives as long as its sandbox, so its pid cannot be
    /// reused while the sandbox is served); entries of sandboxes no longer served are dropped.
    inits: std::sync::Mutex<std::collections::HashMap<SandboxId, u32>>,
    /// Each sandbox's process named last: searched first (a build opens its connections from
    /// one process, one after another), before the walk of the whole tree.
    last: std::sync::Mutex<std::collections::HashMap<SandboxId, u32>>,
    /// The names of connected sockets copied before, by inode (see [`Names`]).
    names: Names,
    /// Each sandbox's lookups, taken in batches (see [`Batch`]).
    batches: std::sync::Mutex<
        std::collections::HashMap<SandboxId, std::sync::Arc<std::sync::Mutex<Batch>>>,
    >,
    /// Off when the process started with `SANDGATE_NO_ATTRIBUTION` set (for measuring what
    /// the lookup costs, and for the tests' control).
    enabled: bool,
}

/// The two addresses of every connected socket a lookup has copied, by the socket's inode, so
/// that the next lookup skips it without copying it again: a process with many connections
/// open (a build's 64 downloads) costs one `readlink` per socket it holds instead of four
/// system calls. A socket's inode is not reused while it lives (sockfs numbers them from a
/// counter), and a connected socket keeps its addresses unless its holder re-addresses it
/// (`connect` with `AF_UNSPEC`, then another `connect`): such a socket is then skipped by its
/// old names — its connection goes unnamed, which its holder could have had anyway by exiting
/// first — and a match is always read again from the socket itself, so no connection is ever
/// named for a process that does not hold it. Entries of closed sockets are dropped when the
/// map reaches [`MAX_NAMES`].
type Names =
    std::sync::Arc<std::sync::Mutex<std::collections::HashMap<u64, (SocketAddr, SocketAddr)>>>;

/// Most socket names kept (about 4 MiB).
const MAX_NAMES: usize = 65_536;

/// One sandbox's lookups, in batches. A lookup that finds nothing waiting for it reads every
/// socket of the process named last (one `stat` per descriptor, a copy of each socket not seen
/// before) and keeps where each connection is, so that the lookups of connections made before
/// that read are answered without another: a client opening connections as fast as it can
/// (64 at a time) costs one read of its descriptors per batch, not one per connection. Reads
/// start at most one per [`BATCH_SPACING`] per sandbox; lookups that come meanwhile wait for
/// the next (a question's wait for its process is bounded by the proxy; an event's is not
/// felt). Each answer kept is checked against the socket itself before it is given (the
/// descriptor copied again, its names read): a connection is never named for a process that
/// does not hold it.
#[derive(Default)]
struct Batch {
    /// When the last read of the hint's descriptors started.
    last: Option<std::time::Instant>,
    /// Where each connection seen in that read is: its holder and descriptor.
    at: std::collections::HashMap<(SocketAddr, SocketAddr), (u32, i32)>,
    /// The processes of those answers, read once per batch.
    infos: std::collections::HashMap<u32, ProcessInfo>,
}

/// How far apart one sandbox's batch reads start, so that a flood of connections costs the
/// daemon a bounded share of a core: ~0.2 ms of reading per 10 ms, for a process holding 130
/// sockets. At 2 ms (~10% of a core) a 64-client flood through CONNECT lost 15% of its new
/// connections per second on two cores; the wait it adds to a question (at most this) is far
/// inside the proxy's bound on it.
const BATCH_SPACING: std::time::Duration = std::time::Duration::from_millis(10);

/// Where the launcher of a sandbox is known.
enum Launchers {
    /// The daemon's registry (`register` gave each launcher's pid).
    Registry(Registry),
    /// This process launched the one sandbox it serves (`sandgate learn`, a launch without a
    /// daemon).
    Me,
}

impl ProcAttributor {
    /// An attributor for the sandboxes `sandboxes` holds.
    pub fn new(sandboxes: Registry) -> ProcAttributor {
        ProcAttributor::with(Launchers::Registry(sandboxes))
    }

    /// An attributor for the one sandbox this process launched and serves.
    pub fn launched_here() -> ProcAttributor {
        ProcAttributor::with(Launchers::Me)
    }

    fn with(launchers: Launchers) -> ProcAttributor {
        let enabled = std::env::var_os("SANDGATE_NO_ATTRIBUTION").is_none();
        ProcAttributor {
            launchers,
            inits: Default::default(),
            last: Default::default(),
            names: Default::default(),
            batches: Default::default(),
            enabled,
        }
    }
}

impl Attributor for ProcAttributor {
    fn attribute<'a>(
        &'a self,
        sandbox: &'a SandboxId,
        client: SocketAddr,
        server: SocketAddr,
    ) -> BoxFuture<'a, Option<ProcessInfo>> {
        Box::pin(async move {
            if !self.enabled {
                return None;
            }
            let launcher = match &self.launchers {
                Launchers::Registry(r) => {
                    let map = r.lock().unwrap_or_else(|e| e.into_inner());
                    map.get(sandbox.as_str())?.info.pid
                }
                Launchers::Me => std::process::id(),
            };
            let known = self.inits.lock().unwrap_or_else(|e| e.into_inner()).get(sandbox).copied();
            let hint = self.last.lock().unwrap_or_else(|e| e.into_inner()).get(sandbox).copied();
            // procfs and pidfd calls only, but their number is the sandbox's to choose (its
            // processes and sockets): on the blocking pool, so that a sandbox with a great many
            // cannot hold up the workers that serve every sandbox's connections.
            let names = self.names.clone();
            let batch = self
                .batches
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .entry(sandbox.clone())
                .or_default()
                .clone();
            let (init, found) = tokio::task::spawn_blocking(move || {
                let init = known.or_else(|| sandbox_init(launcher))?;
                Some((init, find_from(init, hint, client, server, &names, &batch)))
            })
            .await
            .ok()
            .flatten()?;
            if let Some((pid, _)) = &found {
                self.last.lock().unwrap_or_else(|e| e.into_inner()).insert(sandbox.clone(), *pid);
            }
            let found = found.map(|(_, info)| info);
            if known.is_none() {
                let mut inits = self.inits.lock().unwrap_or_else(|e| e.into_inner());
                if let Launchers::Registry(r) = &self.launchers {
                    let live = r.lock().unwrap_or_else(|e| e.into_inner());
                    inits.retain(|id, _| live.contains_key(id.as_str()));
                    let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
                    last.retain(|id, _| live.contains_key(id.as_str()));
                    let mut batches = self.batches.lock().unwrap_or_else(|e| e.into_inner());
                    batches.retain(|id, _| live.contains_key(id.as_str()));
                }
                inits.insert(sandbox.clone(), init);
            }
            found
        })
    }
}

/// The process of the sandbox whose init is `init` whose socket is `client` → `server`, with
/// its pid: `hint` (the process named last in this sandbox) first, when it is still a process of
/// the sandbox's pid namespace (its pid may have been reused by a process elsewhere, whose
/// sockets must not name a sandbox's connection); then the whole tree, leaves first, through
/// copies of the sockets, or (no ptrace access or no pidfd_getfd) the namespace's TCP table and
/// the inode.
#[cfg(target_os = "linux")]
fn find_from(
    init: u32,
    hint: Option<u32>,
    client: SocketAddr,
    server: SocketAddr,
    names: &Names,
    batch: &std::sync::Mutex<Batch>,
) -> Option<(u32, ProcessInfo)> {
    let want = (canonical(client), canonical(server));
    {
        // Held while reading: the sandbox's other lookups wait for this read's answers.
        let mut b = batch.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(found) = b.answer(want, init) {
            return Some(found);
        }
        if let Some(pid) = hint
            && same_pid_namespace(pid, init)
        {
            if let Some(wait) = b.last.map(|t| BATCH_SPACING.saturating_sub(t.elapsed())) {
                std::thread::sleep(wait);
            }
            b.last = Some(std::time::Instant::now());
            b.at.clear();
            b.infos.clear();
            for (fd, named) in connections(pid, names) {
                b.at.insert(named, (pid, fd));
            }
            if let Some(found) = b.answer(want, init) {
                return Some(found);
            }
        }
    }
    let pids = descendants(init);
    let pid = match by_pidfd(&pids, want, names) {
        Ok(found) => found,
        Err(_) => by_table(init, &pids, want),
    }?;
    Some((pid, process_info(pid)?))
}

/// See the Linux version: elsewhere no process is named.
#[cfg(not(target_os = "linux"))]
fn find_from(
    _init: u32,
    _hint: Option<u32>,
    _client: SocketAddr,
    _server: SocketAddr,
    _names: &Names,
    _batch: &std::sync::Mutex<Batch>,
) -> Option<(u32, ProcessInfo)> {
    None
}

/// Whether `pid` is in the pid namespace whose init is `init`.
fn same_pid_namespace(pid: u32, init: u32) -> bool {
    let ns = |p: u32| std::fs::read_link(format!("/proc/{p}/ns/pid")).ok();
    matches!((ns(pid), ns(init)), (Some(a), Some(b)) if a == b)
}

/// The child of `launcher` that is pid 1 of its own pid namespace.
fn sandbox_init(launcher: u32) -> Option<u32> {
    children(launcher).into_iter().find(|&c| {
        let status = read_proc(format!("/proc/{c}/status")).unwrap_or_default();
        ns_pids(&status).is_some_and(|p| p.len() >= 2 && p.last() == Some(&1))
    })
}

/// The children of every thread of `pid`.
fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return out };
    for task in tasks.flatten() {
        let text = read_proc(task.path().join("children")).unwrap_or_default();
        out.extend(text.split_ascii_whitespace().filter_map(|p| p.parse::<u32>().ok()));
    }
    out
}

/// Most processes of a sandbox searched (a fork bomb is not worth a full walk).
const MAX_PROCESSES: usize = 10_000;

/// Most sockets of a sandbox copied for one lookup (a sandbox holding more has its connections
/// unnamed beyond them, rather than each lookup costing it without bound).
const MAX_SOCKETS: usize = 4_096;

/// `init` and its descendants, parents before children.
fn descendants(init: u32) -> Vec<u32> {
    let mut all = vec![init];
    let mut i = 0;
    while i < all.len() && all.len() < MAX_PROCESSES {
        let kids = children(all[i]);
        all.extend(kids);
        i += 1;
    }
    all
}

/// The descriptors of `pid` that are sockets, with their inodes: each entry of `/proc/PID/fd`
/// is `stat`ed relative to the directory (the link's target's type and inode, without walking
/// `/proc/PID/fd/` again or formatting the link's text for each descriptor).
#[cfg(target_os = "linux")]
fn sockets(pid: u32) -> Vec<(i32, u64)> {
    use nix::fcntl::{AtFlags, OFlag};
    use nix::sys::stat::{Mode, SFlag, fstatat};

    let Ok(dir) = nix::dir::Dir::open(
        format!("/proc/{pid}/fd").as_str(),
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) else {
        return Vec::new();
    };
    let fd_of_dir = std::os::fd::AsRawFd::as_raw_fd(&dir);
    let mut dir = dir;
    dir.iter()
        .flatten()
        .filter_map(|e| {
            let fd = e.file_name().to_str().ok()?.parse::<i32>().ok()?;
            let st = fstatat(Some(fd_of_dir), e.file_name(), AtFlags::empty()).ok()?;
            let is_socket =
                SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFSOCK;
            is_socket.then_some((fd, st.st_ino))
        })
        .collect()
}

/// See the Linux version: elsewhere no process is searched.
#[cfg(not(target_os = "linux"))]
fn sockets(_pid: u32) -> Vec<(i32, u64)> {
    Vec::new()
}

impl Batch {
    /// The kept answer for `want`, once the socket itself says it still is (taken: each
    /// connection is looked up once), held by a process still in the pid namespace whose init
    /// is `init`. The holder may have exited since the batch read and its pid been given to a
    /// process of another sandbox, whose namespace can hold a socket with the very same names
    /// (every sandbox's clients are 127.0.0.1 or `::1` to the same listener port); the pidfd is
    /// opened before the namespace is read, so a pid reused after that fails the copy.
    #[cfg(target_os = "linux")]
    fn answer(&mut self, want: (SocketAddr, SocketAddr), init: u32) -> Option<(u32, ProcessInfo)> {
        let (pid, fd) = self.at.remove(&want)?;
        let pidfd = sandgate_sandbox::fdpass::pidfd_open(pid).ok()?;
        if !same_pid_namespace(pid, init) || socket_names_of(&pidfd, fd) != Some(want) {
            return None;
        }
        let info = match self.infos.entry(pid) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => e.insert(process_info(pid)?),
        };
        Some((pid, info.clone()))
    }
}

/// The names of descriptor `fd` of `pid` (a copy, read and closed), as the lookup compares them.
#[cfg(target_os = "linux")]
fn socket_names(pid: u32, fd: i32) -> Option<(SocketAddr, SocketAddr)> {
    let pidfd = sandgate_sandbox::fdpass::pidfd_open(pid).ok()?;
    socket_names_of(&pidfd, fd)
}

/// [`socket_names`] of a process already opened as `pidfd`.
#[cfg(target_os = "linux")]
fn socket_names_of(pidfd: &std::os::fd::OwnedFd, fd: i32) -> Option<(SocketAddr, SocketAddr)> {
    use nix::sys::socket::{SockaddrStorage, getpeername, getsockname};
    use std::os::fd::AsRawFd as _;

    let copy = sandgate_sandbox::fdpass::pidfd_getfd(pidfd, fd).ok()?;
    let local = getsockname::<SockaddrStorage>(copy.as_raw_fd()).ok()?;
    let peer = getpeername::<SockaddrStorage>(copy.as_raw_fd()).ok()?;
    Some((canonical(socket_addr(&local)?), canonical(socket_addr(&peer)?)))
}

/// Every connected socket of `pid` with its names: known ones from `names`, the rest copied
/// (and added there). Nothing when the kernel refuses the copies.
#[cfg(target_os = "linux")]
fn connections(pid: u32, names: &Names) -> Vec<(i32, (SocketAddr, SocketAddr))> {
    let mut out = Vec::new();
    for (fd, inode) in sockets(pid).into_iter().take(MAX_SOCKETS) {
        let known = names.lock().unwrap_or_else(|e| e.into_inner()).get(&inode).copied();
        let named = match known {
            Some(named) => named,
            None => {
                let Some(named) = socket_names(pid, fd) else { continue };
                let mut known = names.lock().unwrap_or_else(|e| e.into_inner());
                if known.len() >= MAX_NAMES {
                    known.clear();
                }
                known.insert(inode, named);
                named
            }
        };
        out.push((fd, named));
    }
    out
}

/// Searches the sockets of `pids` (the last first: leaves before their parents) through copies
/// of them, skipping those whose names `names` knows (and adding those it did not). `Err` when
/// the kernel refuses the copies (then nothing is known).
#[cfg(target_os = "linux")]
fn by_pidfd(
    pids: &[u32],
    want: (SocketAddr, SocketAddr),
    names: &Names,
) -> std::io::Result<Option<u32>> {
    use nix::sys::socket::{SockaddrStorage, getpeername, getsockname};
    use std::os::fd::AsRawFd as _;

    let mut seen = std::collections::HashSet::new();
    let mut refused = None;
    let mut copied = false;
    for &pid in pids.iter().rev() {
        // Opened before its descriptors are read: a pid reused meanwhile fails the copies.
        let Ok(pidfd) = sandgate_sandbox::fdpass::pidfd_open(pid) else { continue };
        for (fd, inode) in sockets(pid) {
            if !seen.insert(inode) {
                continue;
            }
            if seen.len() > MAX_SOCKETS {
                return Ok(None);
            }
            // Known by other names: not this connection, no copy needed. Known by these names:
            // copied and read again below, so that a socket re-addressed since (`connect` with
            // `AF_UNSPEC`, then another `connect`) never names a connection it does not carry.
            let known = names.lock().unwrap_or_else(|e| e.into_inner()).get(&inode).copied();
            if known.is_some_and(|named| named != want) {
                continue;
            }
            let copy = match sandgate_sandbox::fdpass::pidfd_getfd(&pidfd, fd) {
                Ok(c) => c,
                Err(e) => {
                    refused.get_or_insert(e);
                    continue;
                }
            };
            copied = true;
            let named = |s: Option<SockaddrStorage>| s.and_then(|s| socket_addr(&s));
            let local = named(getsockname::<SockaddrStorage>(copy.as_raw_fd()).ok());
            let peer = named(getpeername::<SockaddrStorage>(copy.as_raw_fd()).ok());
            if let (Some(l), Some(p)) = (local, peer) {
                let named = (canonical(l), canonical(p));
                let mut known = names.lock().unwrap_or_else(|e| e.into_inner());
                if known.len() >= MAX_NAMES {
                    known.clear();
                }
                known.insert(inode, named);
                if named == want {
                    return Ok(Some(pid));
                }
            }
        }
    }
    match refused {
        Some(e) if !copied => Err(e),
        _ => Ok(None),
    }
}

#[cfg(target_os = "linux")]
fn socket_addr(s: &nix::sys::socket::SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = s.as_sockaddr_in() {
        return Some(SocketAddr::from((v4.ip(), v4.port())));
    }
    s.as_sockaddr_in6().map(|v6| SocketAddr::from((v6.ip(), v6.port())))
}

/// The fallback: the socket's inode from the namespace's TCP tables, then its holder.
fn by_table(init: u32, pids: &[u32], want: (SocketAddr, SocketAddr)) -> Option<u32> {
    let inode = ["tcp", "tcp6"].iter().find_map(|t| {
        let text = std::fs::read_to_string(format!("/proc/{init}/net/{t}")).ok()?;
        inode_in_table(&text, want.0, want.1)
    })?;
    pids.iter().rev().copied().find(|&pid| sockets(pid).iter().any(|&(_, i)| i == inode))
}

fn process_info(pid: u32) -> Option<ProcessInfo> {
    let status = read_proc(format!("/proc/{pid}/status"))?;
    let in_sandbox = *ns_pids(&status)?.last()?;
    let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    let cmdline = read_proc_bytes(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    Some(ProcessInfo { pid: in_sandbox, exe, command: command_line(&cmdline) })
}

/// A small procfs file, read without the size query `fs::read_to_string` makes first (procfs
/// files say size 0): open, read to the end, close.
fn read_proc(path: impl AsRef<Path>) -> Option<String> {
    String::from_utf8(read_proc_bytes(path)?).ok()
}

/// [`read_proc`], as bytes.
fn read_proc_bytes(path: impl AsRef<Path>) -> Option<Vec<u8>> {
    use std::io::Read as _;

    let mut f = std::fs::File::open(path).ok()?;
    let mut buf = vec![0u8; 4096];
    let mut len = 0;
    loop {
        if len == buf.len() {
            buf.resize(len * 2, 0);
        }
        match f.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(_) => return None,
        }
    }
    buf.truncate(len);
    Some(buf)
}

/// The `NSpid` line of a `/proc/PID/status`: the pid in each pid namespace, outermost first.
fn ns_pids(status: &str) -> Option<Vec<u32>> {
    let line = status.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
    let pids: Vec<u32> = line.split_ascii_whitespace().filter_map(|p| p.parse().ok()).collect();
    (!pids.is_empty()).then_some(pids)
}

/// IPv4-mapped IPv6 addresses as the IPv4 address they are (a dual-stack client's socket).
fn canonical(a: SocketAddr) -> SocketAddr {
    SocketAddr::new(sandgate_config::canonical_ip(a.ip()), a.port())
}

/// The inode of the socket `local` → `remote` in a `/proc/net/tcp` or `tcp6` table (0, a socket
/// no process holds any more, is not an answer).
fn inode_in_table(table: &str, local: SocketAddr, remote: SocketAddr) -> Option<u64> {
    let want = (canonical(local), canonical(remote));
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_ascii_whitespace().collect();
        let (l, r) = (table_addr(f.get(1)?)?, table_addr(f.get(2)?)?);
        let inode: u64 = f.get(9)?.parse().ok()?;
        ((canonical(l), canonical(r)) == want && inode != 0).then_some(inode)
    })
}

/// An address of a TCP table: `0100007F:0C38` (IPv4) or 32 hex digits and a port (IPv6), each
/// 32-bit word written as the kernel holds it in memory (this machine's byte order).
fn table_addr(field: &str) -> Option<SocketAddr> {
    let (ip, port) = field.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |h: &str| u32::from_str_radix(h, 16).ok().map(u32::to_ne_bytes);
    let ip = match ip.len() {
        8 => IpAddr::from(word(ip)?),
        32 => {
            let mut bytes = [0u8; 16];
            for i in 0..4 {
                bytes[i * 4..i * 4 + 4].copy_from_slice(&word(ip.get(i * 8..i * 8 + 8)?)?);
            }
            IpAddr::from(bytes)
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Lines as a little-endian machine writes them; the expectations are built the same way so
    // the table test holds on either byte order.
    fn v4_field(a: &str) -> String {
        let a: SocketAddr = a.parse().unwrap();
        let IpAddr::V4(ip) = a.ip() else { unreachable!() };
        format!("{:08X}:{:04X}", u32::from_ne_bytes(ip.octets()), a.port())
    }

    fn v6_field(a: &str) -> String {
        let a: SocketAddr = a.parse().unwrap();
        let IpAddr::V6(ip) = a.ip() else { unreachable!() };
        let o = ip.octets();
        let words: String = (0..4)
            .map(|i| format!("{:08X}", u32::from_ne_bytes(o[i * 4..i * 4 + 4].try_into().unwrap())))
            .collect();
        format!("{words}:{:04X}", a.port())
    }

    fn line(n: usize, local: &str, remote: &str, inode: u64) -> String {
        format!(
            "{n:4}: {local} {remote} 01 00000000:00000000 00:00000000 00000000  1000        0 \
             {inode} 1 0000000000000000 20 4 30 10 -1"
        )
    }

    const HEADER: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when \
                          retrnsmt   uid  timeout inode";

    #[test]
    fn the_socket_is_found_in_the_tcp_tables() {
        let v4 = [
            HEADER.to_owned(),
            line(0, &v4_field("127.0.0.1:3128"), &v4_field("0.0.0.0:0"), 100),
            line(1, &v4_field("127.0.0.1:3128"), &v4_field("127.0.0.1:40000"), 101),
            line(2, &v4_field("127.0.0.1:40000"), &v4_field("127.0.0.1:3128"), 102),
            line(3, &v4_field("10.0.0.2:40001"), &v4_field("198.18.0.7:443"), 103),
            // Closed by its process: inode 0.
            line(4, &v4_field("127.0.0.1:40002"), &v4_field("127.0.0.1:3128"), 0),
        ]
        .join("\n");
        let v6 = [
            HEADER.to_owned(),
            line(
                0,
                &v6_field("[::ffff:127.0.0.1]:40003"),
                &v6_field("[::ffff:127.0.0.1]:3128"),
                200,
            ),
            line(1, &v6_field("[::1]:40004"), &v6_field("[::1]:3128"), 201),
        ]
        .join("\n");
        let rows: &[(&str, &str, &str, Option<u64>)] = &[
            (&v4, "127.0.0.1:40000", "127.0.0.1:3128", Some(102)),
            // The proxy's own end of the same connection is not the client's.
            (&v4, "127.0.0.1:3128", "127.0.0.1:40000", Some(101)),
            (&v4, "10.0.0.2:40001", "198.18.0.7:443", Some(103)),
            (&v4, "10.0.0.2:40001", "198.18.0.7:80", None),
            (&v4, "127.0.0.1:40002", "127.0.0.1:3128", None),
            (&v6, "127.0.0.1:40003", "127.0.0.1:3128", Some(200)),
            (&v6, "[::1]:40004", "[::1]:3128", Some(201)),
            (&v6, "127.0.0.1:40000", "127.0.0.1:3128", None),
            ("", "127.0.0.1:40000", "127.0.0.1:3128", None),
            ("header only\n   0: garbage", "127.0.0.1:40000", "127.0.0.1:3128", None),
        ];
        for (table, local, remote, want) in rows {
            let got = inode_in_table(table, local.parse().unwrap(), remote.parse().unwrap());
            assert_eq!(got, *want, "{local} -> {remote}");
        }
    }

    #[test]
    fn status_lines_are_read() {
        let status = "Name:\tcurl\nTgid:\t4242\nPid:\t4242\nNSpid:\t4242\t7\n";
        assert_eq!(ns_pids(status), Some(vec![4242, 7]));
        assert_eq!(ns_pids("Name:\tx\nNSpid:\t1\n"), Some(vec![1]));
        assert_eq!(ns_pids("Name:\tx\n"), None);
    }

    /// A batch read answers the lookups of connections made before it, and each kept answer is
    /// read again from the socket before it is given: one whose descriptor now holds another
    /// socket names nobody.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_batch_answers_later_lookups_and_checks_each_answer() {
        let me = std::process::id();
        let (names, batch) = (Names::default(), std::sync::Mutex::new(Batch::default()));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let to = listener.local_addr().unwrap();
        let conns: Vec<_> = (0..3).map(|_| std::net::TcpStream::connect(to).unwrap()).collect();
        let want = |s: &std::net::TcpStream| (s.local_addr().unwrap(), s.peer_addr().unwrap());
        let find = |w: (SocketAddr, SocketAddr)| {
            find_from(me, Some(me), w.0, w.1, &names, &batch).map(|f| f.0)
        };
        let (a, b) = (want(&conns[0]), want(&conns[1]));
        if socket_names(me, std::os::fd::AsRawFd::as_raw_fd(&conns[0])).is_none() {
            println!("SKIPPED pidfd path: no copies here");
            return;
        }
        assert_eq!(find(a), Some(me));
        let read = batch.lock().unwrap().last;
        assert!(batch.lock().unwrap().at.contains_key(&b), "the read kept no answer for b");
        assert_eq!(find(b), Some(me));
        assert_eq!(batch.lock().unwrap().last, read, "b was read again, not answered");
        // c's descriptor is given to another socket: its kept answer no longer holds.
        let c = want(&conns[2]);
        let fd = std::os::fd::AsRawFd::as_raw_fd(&conns[2]);
        let other = std::net::TcpStream::connect(to).unwrap();
        nix::unistd::dup2(std::os::fd::AsRawFd::as_raw_fd(&other), fd).unwrap();
        assert_eq!(find(c), None, "named by an answer the socket no longer gives");
    }

    /// The descriptors that are sockets are listed with their inodes (what `fstat` of the
    /// socket says); pipes and files are not.
    #[cfg(target_os = "linux")]
    #[test]
    fn only_socket_descriptors_are_listed() {
        use std::os::fd::AsRawFd as _;
        use std::os::unix::fs::MetadataExt as _;
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let file = std::fs::File::open("/proc/self/status").unwrap();
        let (r, _w) = nix::unistd::pipe().unwrap();
        let listed = sockets(std::process::id());
        let ino = nix::sys::stat::fstat(sock.as_raw_fd()).unwrap().st_ino;
        assert!(listed.contains(&(sock.as_raw_fd(), ino)), "{listed:?}");
        assert!(listed.iter().all(|&(fd, _)| fd != file.as_raw_fd() && fd != r.as_raw_fd()));
        assert!(file.metadata().unwrap().ino() != ino);
    }

    /// This test's own socket, found by its addresses among this process's descriptors: the
    /// pidfd path and the table path agree.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_socket_of_a_process_is_found_by_its_addresses() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let want = (client.local_addr().unwrap(), client.peer_addr().unwrap());
        let me = std::process::id();
        let names = Names::default();
        match by_pidfd(&[me], want, &names) {
            Ok(found) => assert_eq!(found, Some(me)),
            Err(e) => println!("SKIPPED pidfd path: {e}"),
        }
        assert_eq!(by_table(me, &[me], want), Some(me));
        let other = (want.0, SocketAddr::from(([127, 0, 0, 1], 1)));
        assert_eq!(by_pidfd(&[me], other, &names).ok().flatten(), None);
        assert_eq!(by_table(me, &[me], other), None);
        let info = process_info(me).expect("own status");
        assert!(!info.exe.is_empty());
    }

    /// Names read once are reused (the second lookup finds a new socket among known ones), and
    /// a socket re-addressed after its names were kept never names its old connection.
    #[cfg(target_os = "linux")]
    #[test]
    fn kept_names_skip_known_sockets_and_never_name_a_stale_one() {
        let me = std::process::id();
        let names = Names::default();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let to = listener.local_addr().unwrap();
        let first = std::net::TcpStream::connect(to).unwrap();
        let want = |s: &std::net::TcpStream| (s.local_addr().unwrap(), s.peer_addr().unwrap());
        if let Err(e) = by_pidfd(&[me], want(&first), &names) {
            println!("SKIPPED pidfd path: {e}");
            return;
        }
        let kept = names.lock().unwrap().len();
        assert!(kept >= 1, "nothing kept");
        let second = std::net::TcpStream::connect(to).unwrap();
        assert_eq!(by_pidfd(&[me], want(&second), &names).unwrap(), Some(me));
        assert_eq!(by_pidfd(&[me], want(&first), &names).unwrap(), Some(me));

        // A UDP socket connected, named, then connected elsewhere: its old names name nothing.
        let u = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        u.connect("127.0.0.1:9").unwrap();
        let old = (u.local_addr().unwrap(), u.peer_addr().unwrap());
        assert_eq!(by_pidfd(&[me], old, &names).unwrap(), Some(me));
        u.connect("127.0.0.1:7").unwrap();
        assert_eq!(by_pidfd(&[me], old, &names).unwrap(), None, "named by stale names");
    }
}

/// What a lookup costs in CPU (not a test of time: it prints, for docs/performance.md):
/// `cargo test -p sandgate-daemon --release lookup_cpu -- --ignored --nocapture`. This process
/// holds ~160 sockets (a client with 64 connections open and their accepted ends) and opens 16
/// more at a time; each is looked up by copying every socket, by the kept names, and in a batch.
#[cfg(test)]
mod cost {
    use super::*;

    fn cpu_us() -> u128 {
        use nix::sys::resource::{UsageWho, getrusage};
        let u = getrusage(UsageWho::RUSAGE_THREAD).unwrap();
        let t =
            |tv: nix::sys::time::TimeVal| tv.tv_sec() as u128 * 1_000_000 + tv.tv_usec() as u128;
        t(u.user_time()) + t(u.system_time())
    }

    #[test]
    #[ignore = "a measurement: run it in release with --nocapture"]
    fn lookup_cpu_per_connection() {
        let me = std::process::id();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let to = listener.local_addr().unwrap();
        let keep: Vec<_> = (0..64).map(|_| std::net::TcpStream::connect(to).unwrap()).collect();
        let _acc: Vec<_> = (0..64).map(|_| listener.accept().unwrap()).collect();
        for mode in ["copy-all", "inode-names", "batch-of-16"] {
            let names = Names::default();
            let batch = std::sync::Mutex::new(Batch::default());
            let (mut cpu, mut n) = (0u128, 0u128);
            for round in 0..40 {
                let conns: Vec<_> = (0..16)
                    .map(|_| {
                        let s = std::net::TcpStream::connect(to).unwrap();
                        let a = listener.accept().unwrap();
                        (s, a)
                    })
                    .collect();
                let start = cpu_us();
                for (s, _) in &conns {
                    let want = (s.local_addr().unwrap(), s.peer_addr().unwrap());
                    match mode {
                        "copy-all" => {
                            names.lock().unwrap().clear();
                            assert_eq!(by_pidfd(&[me], want, &names).unwrap(), Some(me));
                        }
                        "inode-names" => {
                            assert_eq!(by_pidfd(&[me], want, &names).unwrap(), Some(me))
                        }
                        _ => {
                            let found = find_from(me, Some(me), want.0, want.1, &names, &batch);
                            assert_eq!(found.map(|f| f.0), Some(me));
                        }
                    }
                }
                if round >= 5 {
                    cpu += cpu_us() - start;
                    n += 16;
                }
            }
            println!("{mode}: {} sockets held, {} us CPU per lookup", keep.len() * 2 + 35, cpu / n);
        }
    }
}
