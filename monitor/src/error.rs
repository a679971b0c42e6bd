//! Errors of the monitor.

use std::io;

/// Why bytes from the kernel could not be decoded. Decoding never panics; each malformed record
/// becomes one of these and is counted, never fatal to the monitor.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// A structure ends past the bytes available.
    #[error("truncated {what} at byte {offset}: need {need} bytes, have {have}")]
    Truncated {
        /// Which structure.
        what: &'static str,
        /// Offset of the structure in the input.
        offset: usize,
        /// Bytes it needs.
        need: usize,
        /// Bytes there are.
        have: usize,
    },
    /// A length field is impossible (smaller than its own header).
    #[error("invalid {what} length {len} at byte {offset}")]
    BadLength {
        /// Which structure.
        what: &'static str,
        /// Offset of the structure in the input.
        offset: usize,
        /// The length it claims.
        len: usize,
    },
    /// The record carries no packet bytes (copy mode without payload).
    #[error("record has no packet payload")]
    NoPayload,
    /// The packet is neither IPv4 nor IPv6.
    #[error("not an IP packet (version nibble {version})")]
    NotIp {
        /// The IP version nibble found.
        version: u8,
    },
    /// The pflog header names an address family this decoder does not know.
    #[error("unknown pflog address family {af}")]
    UnknownFamily {
        /// The `af` byte.
        af: u8,
    },
}

/// Why a monitor source failed.
#[derive(Debug, thiserror::Error)]
pub enum MonitorError {
    /// A socket or capture call failed.
    #[error("{op}: {source}")]
    Io {
        /// The operation that failed (e.g. "recv NFLOG").
        op: &'static str,
        /// Underlying error.
        source: io::Error,
    },
    /// The kernel refused a configuration request (e.g. group already bound: EBUSY).
    #[error("NFLOG config {what} for group {group} refused: {source}")]
    Config {
        /// Which request.
        what: &'static str,
        /// The NFLOG group.
        group: u16,
        /// The errno the kernel answered.
        source: io::Error,
    },
}
