//! sandgate's blocked-traffic monitor: turns the kernel's reports of blocked packets into
//! [`BlockedPacket`]s, attributes them to a sandbox, and folds floods into a bounded number of
//! [`Alert`]s for [`AlertSink`]s.
//!
//! Sources: NFLOG over netlink on Linux ([`nflog`]; the socket is opened inside a sandbox's network
//! namespace by the launcher, or on the host for guest-user scopes) and `pflog0` on macOS
//! ([`pflog`]), plus Seatbelt's own denials read from `log stream` ([`seatbelt_log`]). The
//! decoders are pure functions over bytes, tested with fixtures and fuzzed; only
//! the socket / capture glue touches the kernel. This crate does not install rules (that is
//! `sandgate-firewall`) and does not store events (sinks do).
//!
//! # Why these choices
//!
//! - Own NFLOG decoder, not the `nflog` crate: that binds the C `libnetfilter_log` (GPL-2.0, a
//!   run-time library). NFLOG's netlink framing is small; decoding it in pure Rust keeps it
//!   testable on every OS, fuzzable (`monitor/fuzz`), and lets the launcher open the socket inside
//!   a sandbox's network namespace and hand over just the file descriptor.
//! - `pnet_packet` for the IP/TCP/UDP/ICMP headers inside a record: well-worn bounds-checked
//!   views, no allocation.

// `unsafe` only in `nflog::socket::reactor` (tokio registration); nowhere else.
#![deny(unsafe_code)]

mod aggregate;
mod attribution;
mod error;
pub mod nflog;
mod packet;
pub mod pflog;
pub mod seatbelt_log;
mod sink;

pub use aggregate::{Aggregator, AggregatorConfig, Alert, AlertKey};
pub use attribution::Attribution;
pub use error::{DecodeError, MonitorError};
#[doc(hidden)]
pub use packet::fixtures;
pub use packet::{BlockedPacket, IpHeaders, Protocol, decode_ip};
pub use sink::{AlertSink, VecSink};
