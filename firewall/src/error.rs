//! Errors of the firewall manager.

use std::io;

/// Why a firewall operation failed. Each variant keeps the input that caused it.
#[derive(Debug, thiserror::Error)]
pub enum FirewallError {
    /// The command could not be started at all (not installed, not on `PATH`).
    #[error("cannot run `{program}`")]
    Spawn {
        /// Program that was started.
        program: String,
        /// Underlying error.
        source: io::Error,
    },
    /// The program is not installed: found neither in the system directories nor on `PATH`.
    #[error(
        "cannot run `{program}`: not found in {} or PATH{}",
        crate::runner::SYSTEM_DIRS.join(", "),
        package.map(|p| format!("; install the `{p}` package (Debian/Ubuntu: apt install {p})")).unwrap_or_default()
    )]
    Missing {
        /// Program that was looked for.
        program: String,
        /// The Debian package that provides it, when known.
        package: Option<&'static str>,
    },
    /// The command ran and failed; `stderr` says why (e.g. "Operation not permitted" when not root).
    #[error("`{command}` failed (exit {code:?}): {stderr}")]
    Command {
        /// Command line, for the message.
        command: String,
        /// Exit code, if the command exited normally.
        code: Option<i32>,
        /// What the command printed on stderr, trimmed.
        stderr: String,
    },
    /// The caller asked for something the backend cannot express.
    #[error("invalid firewall request: {what}")]
    Invalid {
        /// What was wrong, naming the offending value.
        what: String,
    },
    /// Output of `nft`/`pfctl` that this crate could not understand.
    #[error("cannot parse output of `{command}`: {what}")]
    Parse {
        /// Command whose output was parsed.
        command: String,
        /// What was unexpected.
        what: String,
    },
    /// pf would let the guest user's traffic past the fence (pf backend): the anchor is not
    /// evaluated, or something before it passes the traffic (see `pf::fence`).
    #[error(
        "pf fails open: the guest user is NOT fenced in: {why}. Restore the stock /etc/pf.conf \
         (`pfctl -f /etc/pf.conf`) or take out what passes the traffic first, then apply again; \
         `sandgate firewall remove` undoes this apply. Main ruleset (`anchor \"com.apple/*\"` \
         evaluates the fence):\n{rules}"
    )]
    AnchorNotEvaluated {
        /// Why the anchor does not count.
        why: String,
        /// `pfctl -s rules` output.
        rules: String,
    },
    /// The token store failed (pf backend).
    #[error("pf token store: {0}")]
    TokenStore(String),
}

impl FirewallError {
    /// Whether the failure looks like missing privileges (not root, no `CAP_NET_ADMIN`).
    pub fn is_permission_denied(&self) -> bool {
        match self {
            FirewallError::Command { stderr, .. } => {
                let s = stderr.to_ascii_lowercase();
                s.contains("operation not permitted")
                    || s.contains("permission denied")
                    || s.contains("must be root")
            }
            FirewallError::Spawn { source, .. } => source.kind() == io::ErrorKind::PermissionDenied,
            FirewallError::Missing { .. }
            | FirewallError::Invalid { .. }
            | FirewallError::Parse { .. }
            | FirewallError::AnchorNotEvaluated { .. }
            | FirewallError::TokenStore(_) => false,
        }
    }
}
