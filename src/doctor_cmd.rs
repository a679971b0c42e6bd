//! `sandgate doctor`: its flags; the checks are [`sandgate_daemon::doctor`]'s. The binary adds
//! what only it knows: the completions it would write.

use std::path::PathBuf;

use sandgate_daemon::{doctor, install};

use crate::emit;

/// Options of `sandgate doctor`.
#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// Print one JSON object (`ok`, and `checks`: name, status, detail, fix).
    #[arg(long)]
    pub json: bool,
}

/// `sandgate doctor`: exit 0 when a launch here would work, 1 when one would fail.
pub fn run(args: DoctorArgs) -> anyhow::Result<u8> {
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty()).map(PathBuf::from);
    let xdg = |var: &str, fallback: &str| {
        std::env::var_os(var)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|h| h.join(fallback)))
    };
    let (data, config) = (xdg("XDG_DATA_HOME", ".local/share"), xdg("XDG_CONFIG_HOME", ".config"));
    let files = |shell: &str| {
        let (data, config) = (data.as_ref()?, config.as_ref()?);
        let (_, path) =
            install::completion_paths(data, config).into_iter().find(|(s, _)| *s == shell)?;
        Some((path, crate::docs_cmd::completion(shell)?))
    };
    let facts = doctor::probe(&files)?;
    emit(Ok(doctor::report(&doctor::checks(&facts))), args.json)
}
