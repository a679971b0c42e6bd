//! The sandbox's proxy: handed to the daemon, or served in this process (`--learn`,
//! `SANDGATE_NO_DAEMON=1`, no daemon), with the blocked-traffic lines of `--report-blocked`.

use anyhow::Context as _;
use sandgate_sandbox::SandboxSpec;

use super::*;

/// The [`ServeHere`] of the `sandgate` binary: the allowlist proxy on a small runtime of its
/// own in this process.
#[cfg(any(target_os = "linux", target_os = "macos"))]
pub fn serve_here(
    listener: std::os::fd::OwnedFd,
    dns: Option<[std::os::fd::OwnedFd; 2]>,
    id: &str,
    net: sandgate_config::NetworkPolicy,
    approver: Option<std::sync::Arc<dyn sandgate_proxy::Approver>>,
) -> anyhow::Result<Box<dyn ServedHere>> {
    Ok(Box::new(InProcessProxy::start(listener, dns, id, net, approver)?))
}

/// No sandboxes here.
#[cfg(not(any(target_os = "linux", target_os = "macos")))]
pub fn serve_here(
    _listener: std::os::fd::OwnedFd,
    _dns: Option<[std::os::fd::OwnedFd; 2]>,
    _id: &str,
    _net: sandgate_config::NetworkPolicy,
    _approver: Option<std::sync::Arc<dyn sandgate_proxy::Approver>>,
) -> anyhow::Result<Box<dyn ServedHere>> {
    bail!("sandboxing is not implemented on this platform")
}

#[cfg(any(target_os = "linux", target_os = "macos"))]
pub(super) enum Served {
    None,
    Daemon(crate::launch_daemon::DaemonLink),
    InProcess(Box<dyn ServedHere>, Option<BlockedReporter>),
}

#[cfg(any(target_os = "linux", target_os = "macos"))]
impl Served {
    /// The command ended with `code` (the sandbox may still be going away): tell the daemon,
    /// without waiting for its answer.
    #[cfg(target_os = "linux")]
    pub(super) fn unregister(&mut self, code: u8, report_blocked: bool) {
        if let Served::Daemon(link) = self {
            link.unregister(i32::from(code), report_blocked);
        }
    }

    /// The command ended with `code`: tell the daemon (unless `unregister` did) and wait for its
    /// answer (with the last blocked-traffic lines with `report_blocked`), or stop serving the
    /// proxy here.
    pub(super) fn finish(self, code: u8, report_blocked: bool) {
        match self {
            Served::Daemon(link) => link.finish(i32::from(code), report_blocked),
            Served::InProcess(proxy, reporter) => {
                if let Some(r) = reporter {
                    r.finish();
                }
                proxy.stop();
            }
            Served::None => {}
        }
    }
}

/// Whether this launch serves its proxy itself (`--learn`, or `SANDGATE_NO_DAEMON=1`).
#[cfg(any(target_os = "linux", target_os = "macos"))]
pub(super) fn no_daemon(args: &LaunchOptions) -> bool {
    args.approver.is_some()
        || std::env::var_os("SANDGATE_NO_DAEMON").is_some_and(|v| !v.is_empty() && v != "0")
}

#[cfg(any(target_os = "linux", target_os = "macos"))]
pub(super) fn serve(
    spec: &SandboxSpec,
    args: &LaunchOptions,
    net: sandgate_config::NetworkPolicy,
    listener: std::os::fd::OwnedFd,
    nflog: Option<std::os::fd::OwnedFd>,
    dns: Option<[std::os::fd::OwnedFd; 2]>,
    greeting: Option<anyhow::Result<crate::launch_daemon::Greeting>>,
) -> Result<Served, LaunchError> {
    use std::io::IsTerminal as _;
    if !no_daemon(args) {
        let info = crate::protocol::SandboxInfo {
            id: spec.id.to_string(),
            tier: spec.tier_name.clone(),
            command: spec.command.iter().map(|a| a.to_string_lossy().into_owned()).collect(),
            cwd: spec.cwd.clone(),
            pid: std::process::id(),
            allow: args.allow.clone(),
            deny: args.deny.clone(),
            net_proxy: args.net == Some(sandgate_config::NetMode::Proxy),
            no_ask: args.no_ask,
        };
        // Keep copies: if the daemon cannot take them, this process serves them.
        let copies = (listener.try_clone()?, nflog.as_ref().map(|n| n.try_clone()).transpose()?);
        let out = crate::launch_daemon::Output {
            report_blocked: args.report_blocked,
            tty_notices: std::io::stdin().is_terminal() && std::io::stderr().is_terminal(),
            stderr_notices: !args.quiet,
        };
        let dns_copies = match &dns {
            Some([u, t]) => Some([u.try_clone()?, t.try_clone()?]),
            None => None,
        };
        match crate::launch_daemon::DaemonLink::start(
            greeting, info, copies.0, copies.1, dns_copies, out,
        ) {
            Ok(link) => return Ok(Served::Daemon(link)),
            // The small launcher: the daemon answered before the launch (or it would have been
            // handed to `sandgate`), and went away or refused it since.
            Err(reason) if args.serve_here.is_none() => {
                return Err(LaunchError::DaemonRefused { reason, tier: spec.tier_name.clone() });
            }
            Err(e) => eprintln!(
                "sandgate: warning: no daemon ({e:#}); serving the proxy in this process: \
                 destinations outside the allowlist are refused instead of asked"
            ),
        }
    }
    // (A launch without a daemon is handed to `sandgate` before it starts: see `HandOver`.)
    let Some(serve_here) = args.serve_here else {
        return Err(LaunchError::NoProxyHere);
    };
    let proxy = serve_here(listener, dns, spec.id.as_str(), net, args.approver.clone())?;
    let reporter = match (args.report_blocked, nflog) {
        (true, Some(fd)) => Some(BlockedReporter::start(fd)),
        _ => None,
    };
    Ok(Served::InProcess(proxy, reporter))
}

/// The allowlist proxy on the sandbox's listener, on a small runtime of its own. Nobody can be
/// asked yet, so destinations the policy does not allow are refused with a body that says so.
#[cfg(any(target_os = "linux", target_os = "macos"))]
struct InProcessProxy {
    proxy: sandgate_proxy::Proxy,
    thread: std::thread::JoinHandle<()>,
}

#[cfg(any(target_os = "linux", target_os = "macos"))]
impl ServedHere for InProcessProxy {
    fn stop(self: Box<Self>) {
        self.proxy.shutdown();
        let _ = self.thread.join();
    }
}

#[cfg(any(target_os = "linux", target_os = "macos"))]
impl InProcessProxy {
    fn start(
        fd: std::os::fd::OwnedFd,
        dns: Option<[std::os::fd::OwnedFd; 2]>,
        id: &str,
        net: sandgate_config::NetworkPolicy,
        approver: Option<std::sync::Arc<dyn sandgate_proxy::Approver>>,
    ) -> anyhow::Result<InProcessProxy> {
        use sandgate_proxy::{Listener, Proxy, SandboxContext, SandboxId};
        let _ = sandgate_proxy::raise_nofile_limit();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .context("cannot start the proxy's runtime")?;
        let (listener, dns) = {
            let _enter = runtime.enter();
            let [udp, tcp] = dns.map_or([None, None], |[u, t]| [Some(u), Some(t)]);
            (
                Listener::from_fd(fd).context("cannot serve the sandbox's proxy listener")?,
                crate::dns::sockets(udp, tcp).context("cannot serve the DNS stub")?,
            )
        };
        // The corporate upstream proxy applies here as in the daemon (the fallback is no way
        // around it); read again, as this path is taken only without a daemon.
        let config = std::env::current_dir()
            .map_err(anyhow::Error::from)
            .and_then(|cwd| Ok(sandgate_config::ConfigPaths::discover(&cwd)?))
            .and_then(|paths| Ok(sandgate_config::Config::load(paths)?))
            .context("cannot read the configuration for the upstream proxy")?;
        let mut builder = Proxy::builder()
            .config(sandgate_proxy::ProxyConfig {
                upstream: crate::setup::upstream(&config)?,
                ..sandgate_proxy::ProxyConfig::default()
            })
            .resolver(crate::dns::resolver()?)
            .attributor(std::sync::Arc::new(crate::attribution::ProcAttributor::launched_here()));
        if let Some(a) = approver {
            builder = builder.approver(a);
        }
        if net.intercept().in_use()
            && let Some(i) = crate::setup::interceptor()
        {
            builder = builder.interceptor(i);
        }
        let proxy = builder.build();
        let ctx = SandboxContext {
            id: SandboxId::new(id.to_owned()),
            policy: std::sync::Arc::new(net),
            token: None,
        };
        let serving = proxy.clone();
        let thread = std::thread::Builder::new()
            .name("sandgate-proxy".into())
            .spawn(move || {
                runtime.block_on(async move {
                    if let Some((udp, tcp)) = dns {
                        let (dns_proxy, dns_ctx) = (serving.clone(), ctx.clone());
                        tokio::spawn(async move {
                            dns_proxy.serve_dns(Some(udp), Some(tcp), dns_ctx).await
                        });
                    }
                    if let Err(e) = serving.serve(listener, ctx).await {
                        eprintln!("sandgate: proxy stopped: {e}");
                    }
                });
            })
            .context("cannot start the proxy thread")?;
        Ok(InProcessProxy { proxy, thread })
    }
}

/// No NFLOG outside Linux (pf's log is read by the host-wide monitor).
#[cfg(target_os = "macos")]
pub(super) struct BlockedReporter;

#[cfg(target_os = "macos")]
impl BlockedReporter {
    fn start(fd: std::os::fd::OwnedFd) -> BlockedReporter {
        drop(fd);
        BlockedReporter
    }

    fn finish(self) {}
}

/// Prints each blocked packet of the sandbox's NFLOG socket as
/// `sandgate: blocked PROTO DST:PORT` on stderr (`--report-blocked`).
#[cfg(target_os = "linux")]
pub(super) struct BlockedReporter {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

#[cfg(target_os = "linux")]
impl BlockedReporter {
    fn start(fd: std::os::fd::OwnedFd) -> BlockedReporter {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut sock = sandgate_monitor::nflog::NflogSocket::from_fd(fd);
            loop {
                let stopping = flag.load(Ordering::Acquire);
                let packets = match sock.recv(std::time::Duration::from_millis(50)) {
                    Ok(p) => p,
                    Err(e) => {
                        eprintln!("sandgate: NFLOG: {e}");
                        return;
                    }
                };
                for p in &packets {
                    let proto = format!("{:?}", p.protocol).to_lowercase();
                    let dst = match (p.dst, p.dst_port) {
                        (std::net::IpAddr::V6(a), Some(port)) => format!("[{a}]:{port}"),
                        (a, Some(port)) => format!("{a}:{port}"),
                        (a, None) => a.to_string(),
                    };
                    sandgate_sandbox::notice::notice(&format!("sandgate: blocked {proto} {dst}"));
                }
                if stopping && packets.is_empty() {
                    return;
                }
            }
        });
        BlockedReporter { stop, thread }
    }

    /// Prints what is still queued, then stops.
    fn finish(self) {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
        let _ = self.thread.join();
    }
}
