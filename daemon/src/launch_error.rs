//! The launcher's errors.
//!
//! Like [`sandgate_sandbox::SandboxError`], none prints its `source` in its own message: the
//! binary shows the whole chain (`{:#}`), and every cause appears once. A [`LaunchError::Usage`]
//! is the caller's mistake (printed without "error:"); every error ends the launcher with the
//! same status (`EXIT_USAGE`), and a command that does not start ends it with 126 or 127
//! instead of an error.

use std::io;
use std::path::PathBuf;

use sandgate_sandbox::SandboxError;

use crate::UsageError;

/// What stopped a launch before its command ran (or while the sandbox's proxy was set up).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LaunchError {
    /// A mistake of the caller: a bad flag, an invalid configuration, a working directory that
    /// may not be writable.
    #[error(transparent)]
    Usage(#[from] UsageError),
    /// The launch needs what the small launcher does not have (a proxy served in this process):
    /// the launcher runs `sandgate` with the same arguments instead. Returned before anything
    /// is started.
    #[error("this launch is for the sandgate binary")]
    HandOver,
    /// The sandbox could not be built, started or waited for.
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    /// A symbolic link in a writable path on the way to git metadata that must stay read-only.
    #[error(
        "{} is a symbolic link inside a writable path on the way to git metadata that must \
         stay read-only (hooks, config, a submodule's .git): a link cannot be kept in place \
         from inside, so the command could replace it with its own. Replace the link with \
         the directory or file it points to, or use a tier without writable paths here",
        link.display()
    )]
    GitLink {
        /// The link.
        link: PathBuf,
    },
    /// The git metadata around the writable paths cannot be read well enough to protect it.
    #[error(
        "the git metadata around the writable paths cannot be protected: {why}. Unset the \
         variable, or fix the repository (`git status` shows what git makes of it), or use a \
         tier without writable paths here"
    )]
    GitUnprotected {
        /// What git's own files or variables said.
        why: String,
    },
    /// No sandbox id could be made.
    #[error("no sandbox id")]
    NoSandboxId,
    /// A system call of the launcher itself failed, at `what`.
    #[error("{what}")]
    Io {
        /// What the launcher was doing.
        what: &'static str,
        /// The kernel's answer.
        source: io::Error,
    },
    /// A system call failed where the launcher adds nothing to the kernel's answer.
    #[error(transparent)]
    System(#[from] io::Error),
    /// The small launcher's sandbox: the daemon greeted it and then did not take its proxy.
    #[error(
        "the daemon did not take the sandbox's proxy ({reason:#}), and {launcher} cannot serve \
         it itself: run the command again, or with `sandgate {tier}`",
        launcher = crate::LAUNCHER_NAME
    )]
    DaemonRefused {
        /// The daemon's answer (shown inside the message: it is the reason, not a cause).
        reason: anyhow::Error,
        /// The tier, for the command to run instead.
        tier: String,
    },
    /// A proxy to serve and nothing to serve it with (the small launcher, without a daemon).
    #[error("{} cannot serve the sandbox's proxy itself", crate::LAUNCHER_NAME)]
    NoProxyHere,
    /// The platform has no sandbox backend.
    #[error("sandboxing is not implemented on this platform")]
    Unsupported,
    /// What the host's side of a launch could not do, as the module that tried reports it: the
    /// runtime directory, the interception CA, the proxy served in this process.
    #[error(transparent)]
    Host(anyhow::Error),
}

impl LaunchError {
    /// A [`LaunchError::Io`] at `what`.
    pub(crate) fn io(what: &'static str) -> impl FnOnce(io::Error) -> LaunchError {
        move |source| LaunchError::Io { what, source }
    }

    /// The caller's mistake this error is, if it is one.
    pub fn usage(&self) -> Option<&UsageError> {
        match self {
            LaunchError::Usage(u) => Some(u),
            _ => None,
        }
    }
}

/// An error of another part of sandgate: a [`UsageError`] stays one (the configuration's
/// mistakes come this way), anything else is the host's.
impl From<anyhow::Error> for LaunchError {
    fn from(e: anyhow::Error) -> LaunchError {
        match e.downcast::<UsageError>() {
            Ok(usage) => LaunchError::Usage(usage),
            Err(e) => LaunchError::Host(e),
        }
    }
}
