//! Commands that talk to the daemon: `status`, `ls`, `stop`, `watch`, `pending`, `allow`,
//! `deny`, `rules`, `revoke`, and `daemon` itself: their flags and what they print (the
//! requests are [`sandgate_daemon::control`]'s).

use std::io::{IsTerminal as _, Write as _};
use std::time::SystemTime;

use anyhow::Context as _;
use sandgate_approvals::PendingQuestion;
use sandgate_daemon::Paths;
use sandgate_daemon::control;
use sandgate_daemon::control_report::{
    self, AnswerFlags, WatchStyle, traffic_tail_line, watch_line,
};
use sandgate_daemon::protocol::Event;
use sandgate_sandbox::tty;

use crate::emit;

/// `--json`.
#[derive(Debug, clap::Args)]
pub struct JsonArg {
    /// Print JSON (one document) instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Options of `sandgate ls`.
#[derive(Debug, clap::Args)]
pub struct LsArgs {
    /// Also sandboxes that ended.
    #[arg(long, short)]
    pub all: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Options of `sandgate rules`.
#[derive(Debug, clap::Args)]
pub struct RulesArgs {
    /// Also revoked, expired and used grants.
    #[arg(long, short)]
    pub all: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Options of `sandgate revoke`.
#[derive(Debug, clap::Args)]
pub struct RevokeArgs {
    /// The grant's id, as `sandgate rules` shows it (`#12`, `12`, or `g12` as in JSON).
    pub id: String,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Options of `sandgate allow` and `sandgate deny`.
#[derive(Debug, clap::Args)]
#[command(group = clap::ArgGroup::new("scope").args(["once", "session", "for_", "always"]))]
pub struct AnswerArgs {
    /// The host (`example.com`), a wildcard you mean (`*.example.com`), either with a port
    /// (`example.com:8443`), or a question id from `sandgate pending` (`q3`). The grant opens the
    /// port that was asked (with nothing pending: the port given, else 443).
    pub target: String,
    /// The requests waiting now, and the same sandbox's next requests to the same host and port
    /// within 10 s (a client's second connection).
    #[arg(long)]
    pub once: bool,
    /// Until the sandbox ends (the default).
    #[arg(long)]
    pub session: bool,
    /// For this long (`15m`, `1h`, `2d`), for the project.
    #[arg(long = "for", value_name = "DURATION")]
    pub for_: Option<String>,
    /// Until revoked, for the project (or everywhere with --global).
    #[arg(long)]
    pub always: bool,
    /// With --always: every project, not just the sandbox's.
    #[arg(long)]
    pub global: bool,
    /// Only this sandbox (needed for --session when nothing is pending).
    #[arg(long, value_name = "ID")]
    pub sandbox: Option<String>,
    /// Every port of the host, not only the one asked (e.g. ssh on 22 as well as 443).
    #[arg(long)]
    pub any_port: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Options of `sandgate watch`.
#[derive(Debug, clap::Args)]
pub struct WatchArgs {
    /// One JSON event per line (no keys, no colour).
    #[arg(long)]
    pub json: bool,
    /// Only this sandbox's events.
    #[arg(long, value_name = "ID")]
    pub sandbox: Option<String>,
    /// Also show every proxied connection, allowed and refused, as `sandgate log` prints it
    /// (not only questions and blocked traffic); the `t` key turns this tail on and off.
    #[arg(long, short)]
    pub verbose: bool,
}

/// Options of `sandgate daemon`.
#[derive(Debug, clap::Args)]
pub struct DaemonArgs {
    /// Exit after this long with no sandbox, no connection and nothing pending (e.g. `10m`);
    /// daemons that launchers start use 10m. Default: run until stopped.
    #[arg(long, value_name = "DURATION")]
    pub idle_exit: Option<String>,
    /// Start a new session (detach from the terminal); used when a launcher starts the daemon.
    #[arg(long, hide = true)]
    pub detach: bool,
}

/// `sandgate daemon`.
pub fn daemon(args: DaemonArgs) -> anyhow::Result<u8> {
    let idle_exit = args
        .idle_exit
        .as_deref()
        .map(sandgate_config::parse_duration)
        .transpose()
        .map_err(|e| sandgate_daemon::UsageError(format!("--idle-exit: {e}")))?;
    sandgate_daemon::service::run(idle_exit, args.detach)
}

/// `sandgate allow` (`allow = true`) and `sandgate deny`.
pub fn answer(args: AnswerArgs, allow: bool) -> anyhow::Result<u8> {
    let flags = AnswerFlags {
        once: args.once,
        for_: args.for_,
        always: args.always,
        global: args.global,
        sandbox: args.sandbox,
        any_port: args.any_port,
    };
    emit(control_report::answer(&args.target, flags, allow), args.json)
}

/// `sandgate watch`.
pub fn watch(args: WatchArgs) -> anyhow::Result<u8> {
    let mut w = control::Watch::start(args.sandbox.clone())?;
    let open = w.open();
    let pending = open.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let tty = std::io::stdout().is_terminal() && std::io::stdin().is_terminal() && !args.json;
    let colour = tty && std::env::var_os("NO_COLOR").is_none();
    // The traffic tail (allowed and refused connections as they close): `-v`, or the `t` key.
    let traffic = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(args.verbose));
    let _keys = if tty {
        Some(KeyReader::start(Paths::discover(), open.clone(), traffic.clone())?)
    } else {
        None
    };
    let mut out = std::io::stdout().lock();
    if tty {
        writeln!(
            out,
            "sandgate watch — keys answer the oldest question: [o]nce [s]ession [h]our [a]lways [d]eny; [t]raffic tail on/off, [q]uit\r"
        )?;
    }
    let style = match (args.json, colour) {
        (true, _) => WatchStyle::Json,
        (false, true) => WatchStyle::Colour,
        (false, false) => WatchStyle::Plain,
    };
    for q in &pending {
        let asked = Event::Asked { question: q.clone() };
        write_now(&mut out, &watch_line(&asked, style, SystemTime::now()))?;
    }
    loop {
        let Some(ev) = w.next_event()? else {
            if !args.json {
                writeln!(out, "sandgate: the daemon stopped\r")?;
            }
            return Ok(0);
        };
        if let Event::Request { .. } = &ev
            && !args.json
        {
            if traffic.load(std::sync::atomic::Ordering::Relaxed)
                && let Some(line) = traffic_tail_line(&ev, colour)
            {
                write_now(&mut out, &line)?;
            }
            continue;
        }
        write_now(&mut out, &watch_line(&ev, style, SystemTime::now()))?;
    }
}

fn write_now(out: &mut impl std::io::Write, line: &str) -> anyhow::Result<()> {
    out.write_all(line.as_bytes())?;
    Ok(out.flush()?)
}

/// What a key pressed in `watch` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WatchKey {
    /// `q`, Ctrl-C, Ctrl-\.
    Quit,
    /// `t`: the traffic tail on or off.
    ToggleTraffic,
    /// An answer to the oldest question.
    Answer(sandgate_approvals::Answer),
    /// Anything else: ignored.
    Ignore,
}

impl WatchKey {
    fn of(byte: u8) -> WatchKey {
        // Ctrl-C and Ctrl-\ arrive as bytes (ISIG is off): quit as with q, terminal restored.
        match byte {
            b'q' | 0x03 | 0x1c => WatchKey::Quit,
            b't' => WatchKey::ToggleTraffic,
            _ => match sandgate_approvals::terminal::parse_reply(&(byte as char).to_string()) {
                Ok(answer) => WatchKey::Answer(answer),
                Err(_) => WatchKey::Ignore,
            },
        }
    }
}

/// Reads single key presses in `watch` (terminal in non-canonical mode, restored on drop) and
/// answers the oldest open question.
struct KeyReader {
    saved: tty::Termios,
}

impl KeyReader {
    fn start(
        paths: Paths,
        open: std::sync::Arc<std::sync::Mutex<Vec<PendingQuestion>>>,
        traffic: std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) -> anyhow::Result<KeyReader> {
        let saved = tty::enter(std::io::stdin(), tty::Mode::Keys).context("terminal settings")?;
        std::thread::spawn(move || {
            use std::io::Read as _;
            let mut byte = [0u8; 1];
            while std::io::stdin().read(&mut byte).is_ok_and(|n| n == 1) {
                let answer = match WatchKey::of(byte[0]) {
                    WatchKey::Quit => restore_and_exit(),
                    WatchKey::Ignore => continue,
                    WatchKey::ToggleTraffic => {
                        let was = traffic.fetch_xor(true, std::sync::atomic::Ordering::Relaxed);
                        eprint!(
                            "sandgate: traffic tail {}\r\n",
                            if was { "off" } else { "on (every connection as it closes)" }
                        );
                        continue;
                    }
                    WatchKey::Answer(answer) => answer,
                };
                let oldest = open.lock().unwrap_or_else(|e| e.into_inner()).first().cloned();
                let Some(q) = oldest else {
                    eprint!("sandgate: nothing pending\r\n");
                    continue;
                };
                // Say which question the key answers: the oldest, not necessarily the last shown.
                eprint!(
                    "sandgate: answering {} {}:{} ({}): {answer}\r\n",
                    q.id, q.question.host, q.question.port, q.question.sandbox
                );
                if let Err(e) = control::answer_from_terminal(&paths, &q, answer) {
                    eprint!("sandgate: {e}\r\n");
                }
            }
        });
        Ok(KeyReader { saved })
    }
}

fn restore_and_exit() -> ! {
    // The saved settings are restored by the process's exit through the drop of KeyReader is not
    // reached from this thread; restore a sane canonical mode here.
    if let Ok(t) = tty::settings(std::io::stdin()) {
        let _ = tty::apply(std::io::stdin(), &tty::with_mode(&t, tty::Mode::Lines));
    }
    std::process::exit(0);
}

impl Drop for KeyReader {
    fn drop(&mut self) {
        let _ = tty::apply(std::io::stdin(), &self.saved);
    }
}

#[cfg(test)]
mod tests {
    use sandgate_approvals::{Answer, Scope};

    use super::*;

    #[test]
    fn watch_keys() {
        for (byte, want) in [
            (b'q', WatchKey::Quit),
            (0x03, WatchKey::Quit),
            (0x1c, WatchKey::Quit),
            (b't', WatchKey::ToggleTraffic),
            (b'o', WatchKey::Answer(Answer::Allow(Scope::Once))),
            (b'd', WatchKey::Answer(Answer::Deny(Scope::Session))),
            (b'x', WatchKey::Ignore),
            (b'\n', WatchKey::Ignore),
        ] {
            assert_eq!(WatchKey::of(byte), want, "{byte:#x}");
        }
    }
}
