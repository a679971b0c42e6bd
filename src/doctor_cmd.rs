//! `sandgate doctor`: its flags; the checks are [`sandgate_daemon::doctor`]'s. The binary adds
//! what only it knows: the completions it would write.

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
    let homes = install::doc_homes();
    let files = |shell: &str| {
        let (data, config) = homes.as_ref()?;
        let (_, path) =
            install::completion_paths(data, config).into_iter().find(|(s, _)| *s == shell)?;
        Some((path, crate::docs_cmd::completion(shell)?))
    };
    let facts = doctor::probe(&files)?;
    emit(Ok(doctor::report(&doctor::checks(&facts))), args.json)
}
