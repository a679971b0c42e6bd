//! sandgate's daemon and launcher: everything between the command line and the library crates
//! that has state or talks to another process.
//!
//! - The daemon ([`service::run`]): one process per user hosting the proxy for every sandbox's
//!   listener, the approvals broker (and Telegram bot), the monitor and the store, behind a unix
//!   control socket ([`server`] side, [`client`] side, one [`protocol`] both speak).
//! - The launcher ([`launch`]): resolves a tier's policy, turns it into a
//!   [`SandboxSpec`](sandgate_sandbox::SandboxSpec) (hidden and read-only paths, environment
//!   scrubbing, git metadata), starts the sandbox and hands its proxy listener and NFLOG socket
//!   to the daemon (or serves them itself when there is none).
//! - Control ([`control`]): the daemon-talking half of `status`, `ls`, `stop`, `pending`,
//!   `allow`/`deny`, `rules`, `revoke` and `watch`, as functions returning what the daemon said;
//!   and [`connect`], the ssh `ProxyCommand` relay.
//!
//! - Telemetry ([`telemetry`]): every event as an OpenTelemetry log record and the counters as
//!   metrics, exported to a collector off the proxy's path (`sandgate-telemetry`).
//! - Reports ([`report`]): what each command prints, as a value with a text and a JSON form
//!   ([`control_report`], [`policy_report`], [`firewall_report`], [`install`], [`learn`],
//!   [`traffic_log`], [`hook`], [`doctor`]), so the binary only parses flags and prints them.
//!
//! It does not parse arguments or decide about the terminal (colour, raw mode, prompts): that
//! is the `sandgate` binary.
//! Launch notices (held and refused requests, warnings about what the kernel cannot enforce)
//! are written to stderr here, because they interleave with the sandboxed command's own output
//! while it runs.
//!
//! # Why these choices
//!
//! - One process per user, not one proxy per launch: grants, pending questions and the Telegram
//!   bot are shared by every sandbox, and a question asked by two sandboxes is one question.
//!   A launch without a daemon still works: the launcher serves its own proxy and refuses what
//!   nobody can approve (fail closed).
//! - The sandbox's listener is made inside its network namespace and passed (SCM_RIGHTS) to the
//!   daemon: no host port, no relay process, and a dead daemon leaves the sandbox with no
//!   network rather than an open one.
//! - Networks made ahead (`netpool`): the daemon forks, before its runtime starts threads, a
//!   process (`sandgate-netns`) that makes sandboxes' network namespaces while nobody waits; a
//!   launcher takes one and its sandbox joins it, so that the namespace, route device and
//!   firewall are off the launch's path, and the network belongs to a user namespace the
//!   sandbox has no capability in.
//! - JSON lines over a unix socket (0600, peer uid checked): `socat` and tests can speak it, and
//!   serde gives both sides the same types ([`protocol`]).
//! - Grants are matched through [`sandgate_config::PatternSet`] (the policy's hash matcher),
//!   rebuilt whenever the grants change: a lookup costs a few probes however many grants exist.
//! - `nix` for the kernel calls (sysconf, peer credentials, locks); descriptors passed over the
//!   socket and the peer's pidfd through `sandgate_sandbox::fdpass` (one implementation for the
//!   launcher and the daemon). The only `unsafe` left is in `sigpipe` (nix's `signal` is
//!   `unsafe` even for `SIG_DFL`); the binary has none.

#![deny(unsafe_code)] // allowed in `sigpipe` only, which says why

pub mod adapters;
mod agent_env;
mod attribution;
pub mod caches;
pub mod client;
pub mod connect;
pub mod control;
pub mod control_report;
mod dns;
pub mod doctor;
pub mod event_cap;
pub mod fences;
pub mod firewall_report;
pub mod hook;
pub mod install;
pub mod launch;
#[cfg(any(target_os = "linux", target_os = "macos"))]
mod launch_daemon;
mod launch_env;
mod launch_error;
pub mod learn;
#[cfg(target_os = "macos")]
mod macos_monitor;
pub mod managed;
mod monitor;
mod netpool;
#[cfg(target_os = "linux")]
mod network_sockets;
mod paths;
pub mod policy_report;
pub mod protocol;
#[cfg(target_os = "linux")]
mod readonly_hint;
pub mod report;
mod secrets;
mod server;
pub mod service;
pub mod setup;
mod sigpipe;
pub mod standalone;
pub mod telemetry;
pub mod traffic_log;
#[cfg(target_os = "linux")]
mod tree_socket;

pub use paths::{LAUNCHER_NAME, Paths, running_the_small_launcher, sandgate_exe};
pub use setup::UsageError;
pub use sigpipe::restore_default_sigpipe;
