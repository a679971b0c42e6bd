//! `sandgate firewall`: host-wide guest-user firewall rules (root).

use anyhow::bail;

/// Options of `sandgate firewall`.
#[derive(Debug, clap::Args)]
pub struct FirewallArgs {}

/// Applies, removes, shows or garbage-collects firewall rules.
pub fn run(_args: FirewallArgs) -> anyhow::Result<u8> {
    bail!("`sandgate firewall` is not yet available in this build")
}
