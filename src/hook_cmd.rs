//! `sandgate hook claude`: its flags; the decision is [`sandgate_daemon::hook`]'s.

use std::io::Write as _;

/// Options of `sandgate hook`.
#[derive(Debug, clap::Args)]
pub struct HookArgs {
    #[command(subcommand)]
    agent: HookAgent,
}

#[derive(Debug, clap::Subcommand)]
enum HookAgent {
    /// Claude Code `PermissionRequest` hook: reads the hook JSON on stdin; prints an allow
    /// decision for calls that stay inside the tier, nothing otherwise (the normal prompt).
    Claude {
        /// The tier file-tool paths are checked against.
        #[arg(long, default_value = "build")]
        tier: String,
        /// Deny a refused file-tool path with a message for the model, instead of leaving the
        /// decision to the person.
        #[arg(long)]
        deny: bool,
    },
}

/// `sandgate hook claude`: one decision, printed; always exits 0 (a failing hook would show the
/// agent an error instead of the prompt).
pub fn run(args: HookArgs) -> anyhow::Result<u8> {
    let HookAgent::Claude { tier, deny } = args.agent;
    let r = sandgate_daemon::hook::claude(&tier, deny);
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(r.text.as_bytes());
    let _ = stdout.flush();
    Ok(0)
}
