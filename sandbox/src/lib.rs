//! sandgate's launcher: starts one command inside a sandbox tier.
//!
//! On Linux it builds user, mount, pid, net, ipc and uts namespaces, a read-only view of the host
//! with a private `/tmp`, covered credentials and writable paths bound back, a network namespace
//! whose only way out is the proxy listener it hands back to the caller, and then locks the
//! process down with Landlock, seccomp, no_new_privs and an empty capability set. On macOS it
//! generates a Seatbelt profile ([`seatbelt::profile`], a pure function tested everywhere) and runs
//! the command under `sandbox-exec`.
//!
//! The network can also be made ahead, by a [`NetworkFactory`] a daemon forks, and handed to the
//! launch through [`NamespaceHooks::prepared_network`]: the sandbox then joins it instead of
//! making one (and its processes hold no capability over it at any time).
//!
//! Started inside one of its own Linux sandboxes ([`inside_sandbox`], which trusts the kernel's
//! view and not the environment), it builds no namespace: [`prepare_nested`] and [`Nested::exec`]
//! stack the inner tier's Landlock and socket rules on the outer walls and run the command in
//! place.
//!
//! In `build`, what a writable path holds that runs code later outside is found by one scan of
//! the writable trees ([`tree::scan`]): repositories the way git recognises them (for
//! [`gitwall`]) and the files host tools execute or obey ([`TopLevel::below`]), kept read-only;
//! new ones are taken away while the command runs (Linux: the warden).
//!
//! Two helpers serve the rest of the workspace too: [`fdpass`] (descriptors over a unix socket,
//! `SCM_RIGHTS`: init to launcher, launcher to daemon) and [`tty`] (terminal modes: the relay's
//! raw mode, `watch`'s single keys).
//!
//! It does not decide policy (the caller fills a [`SandboxSpec`]), write firewall rules (the
//! caller passes rule text and a [`NamespaceHooks`] that applies it), or serve the proxy (the
//! caller serves it on [`Launched::listener`], and the DNS stub on [`Launched::dns`]).
//!
//! # Why these choices
//!
//! - Own namespace setup, not `bubblewrap` (kept as a benchmark reference): the launcher hands the
//!   proxy listener, DNS sockets and NFLOG socket made *inside* the new network namespace back to
//!   its caller, applies the firewall before the command starts, and stacks nested tiers; around
//!   a separate `bwrap` process each of these needs a second protocol.
//! - Namespace firewall rules as one nf_tables netlink batch, not an `nft` process: no `nft` or
//!   `PATH` lookup at each launch (the `nftables` package is not needed at run time).
//! - `landlock` (the reference binding, with best-effort ABI levels). The launch's seccomp filter
//!   is one hand-built BPF program searched by call number (`linux::filter`: seccompiler emits one
//!   linear program per action, which cost every launch ~0.2 ms at attach time); `seccompiler`
//!   (pure Rust, no C `libseccomp`) still builds the nested launch's small filter and is the
//!   reference the hand-built one is tested against.

#![deny(unsafe_code)]

pub mod canon;
mod entry;
mod error;
#[cfg(unix)]
pub mod fdpass;
mod forward;
pub mod gitwall;
pub mod notice;
#[cfg(unix)]
pub mod private_tmp;
pub mod readonly;
pub mod seatbelt;
mod spec;
mod timing;
mod top_level;
pub mod tree;
#[cfg(test)]
mod tree_bounds_tests;
#[cfg(unix)]
pub mod tty;

#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "macos")]
mod macos;
#[cfg(target_os = "linux")]
mod sys;

pub use error::{SandboxError, SetupStep};
pub use spec::{
    CacheLayer, DNS_PORT, Enforcement, MacosOptions, NO_PROXY, NetKind, NetSetup, PROXY_PORT,
    PROXY_VARS, ProvidedDir, SOCKS_PROXY_VAR, SandboxId, SandboxSpec, git_ssh_command, proxy_env,
    with_proxy_env,
};
#[cfg(target_os = "linux")]
pub use sys::lowest_priority;
pub use timing::{begin as timing_begin, mark as timing_mark};
pub use top_level::{QUARANTINED_PREFIX, TopLevel};

#[cfg(target_os = "linux")]
pub use linux::{
    Assessment, KernelSupport, Launched, NamespaceHooks, NamespaceProbe, Nested, NetlinkBatch,
    NetworkFactory, OpenNflog, OuterSandbox, PreparedNetwork, ProxySockets, QUIET_ICMPV6, assess,
    checks_unix_socket_paths, configure_veth, create_veth, inside_sandbox, kernel_support,
    landlock_gaps, launch, namespace_firewall, prepare_nested, probe_namespaces,
    resolved_unix_sockets,
};
#[cfg(target_os = "macos")]
pub use macos::{Launched, inside_seatbelt, launch, launch_with_proxy_port, pid_in_seatbelt};
