//! The launcher's error type.

use std::io;
use std::path::PathBuf;

/// What went wrong while building or starting a sandbox.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// A path in the spec that is not absolute or cannot be resolved.
    #[error("{role} path {path:?}: {source}")]
    Path {
        /// What the path was for (`writable`, `cwd`, ...).
        role: &'static str,
        /// The offending path.
        path: PathBuf,
        /// Why it was refused.
        source: io::Error,
    },
    /// The command to run is empty or cannot be found.
    #[error("command {command:?} not found in PATH")]
    CommandNotFound {
        /// The program name as given.
        command: String,
    },
    /// `launch` was called while the process runs several threads (forking would be unsafe).
    #[error(
        "the launcher must start the sandbox before any other thread exists ({threads} running)"
    )]
    Threads {
        /// How many threads were running.
        threads: usize,
    },
    /// The kernel refused to create a user namespace for an unprivileged caller.
    #[error(
        "cannot create a user namespace ({source}): unprivileged user namespaces are disabled here; \
         enable them with `sysctl kernel.unprivileged_userns_clone=1` (Debian), \
         `sysctl user.max_user_namespaces=15000`, or on Ubuntu \
         `sysctl kernel.apparmor_restrict_unprivileged_userns=0` (or an AppArmor profile allowing `userns`)"
    )]
    UserNamespaceDenied {
        /// The kernel's answer.
        source: io::Error,
    },
    /// One setup step inside the new namespaces failed; `step` names it.
    #[error("sandbox setup failed at {step}: {message}")]
    Setup {
        /// The step that failed (e.g. `mount /tmp`).
        step: String,
        /// The error text.
        message: String,
    },
    /// `require_full` was set and the kernel could not enforce every wall.
    #[error(
        "the kernel cannot enforce every restriction and full enforcement was required: {missing}"
    )]
    NotFullyEnforced {
        /// What could not be enforced, `; `-separated.
        missing: String,
    },
    /// A system call of the launcher itself failed.
    #[error("{what}: {source}")]
    Io {
        /// What the launcher was doing.
        what: &'static str,
        /// The kernel's answer.
        source: io::Error,
    },
    /// The platform has no sandbox backend.
    #[error("sandboxing is not supported on this platform")]
    Unsupported,
}

impl SandboxError {
    pub(crate) fn io(what: &'static str) -> impl FnOnce(io::Error) -> SandboxError {
        move |source| SandboxError::Io { what, source }
    }
}
