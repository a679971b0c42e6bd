//! `sandgate proxy`: the allowlist proxy alone, in the foreground.

use anyhow::bail;

/// Options of `sandgate proxy`.
#[derive(Debug, clap::Args)]
pub struct ProxyArgs {}

/// Runs the proxy until SIGINT/SIGTERM.
pub fn run(_args: ProxyArgs) -> anyhow::Result<u8> {
    bail!("`sandgate proxy` is not yet available in this build")
}
