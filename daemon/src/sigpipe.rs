//! `SIGPIPE` back to its default disposition, for the listing commands.
//!
//! Keeps an `unsafe` block because changing a signal's disposition is `unsafe` in nix for every
//! handler (a handler function could be anything), even for `SIG_DFL`, which runs no code of
//! ours.

#![allow(unsafe_code)]

use nix::sys::signal::{SigHandler, Signal, signal};

/// Makes a write to a closed pipe end the process quietly (`sandgate ls | head`), as other
/// command-line tools do; Rust starts with `SIGPIPE` ignored. Call it before any thread exists.
pub fn restore_default_sigpipe() {
    // SAFETY: SIG_DFL installs no handler of ours; called before any thread is started.
    let _ = unsafe { signal(Signal::SIGPIPE, SigHandler::SigDfl) };
}
