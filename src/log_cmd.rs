//! `sandgate log`: its flags; the log itself is [`sandgate_daemon::traffic_log`].

use sandgate_daemon::traffic_log::LogQuery;
use sandgate_store::TrafficDecision;

/// Options of `sandgate log`.
#[derive(Debug, clap::Args)]
pub struct LogArgs {
    /// Keep printing new lines as connections close (needs a running daemon).
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// Only this sandbox (an id from `sandgate ls --all`).
    #[arg(long, value_name = "ID")]
    pub sandbox: Option<String>,
    /// Only what happened in the last DURATION (`90s`, `10m`, `2h`, `7d`).
    #[arg(long, value_name = "DURATION")]
    pub since: Option<String>,
    /// Only hosts matching PATTERN (`example.com`, `*.example.com`, an address or a block).
    #[arg(long, value_name = "PATTERN")]
    pub host: Option<String>,
    /// Only this decision: allow, deny (also malformed requests), or blocked (direct
    /// connections the firewall refused).
    #[arg(long, value_enum)]
    pub decision: Option<DecisionArg>,
    /// One line per host: connections, bytes, last seen, the rule.
    #[arg(long, conflicts_with = "follow")]
    pub summary: bool,
    /// JSON lines (one document per line) for a log pipeline.
    #[arg(long)]
    pub json: bool,
    /// At most this many lines (the newest), before --follow goes live.
    #[arg(long, default_value_t = 1000)]
    pub limit: u32,
}

/// `--decision` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DecisionArg {
    /// Let through by a rule or a grant.
    Allow,
    /// Refused by the proxy (rule, answer, time-out, malformed).
    Deny,
    /// A direct connection the firewall refused.
    Blocked,
}

impl DecisionArg {
    fn traffic(self) -> TrafficDecision {
        match self {
            DecisionArg::Allow => TrafficDecision::Allow,
            DecisionArg::Deny => TrafficDecision::Deny,
            DecisionArg::Blocked => TrafficDecision::Blocked,
        }
    }
}

/// `sandgate log`.
pub fn log(args: LogArgs) -> anyhow::Result<u8> {
    let query = LogQuery {
        follow: args.follow,
        sandbox: args.sandbox,
        since: args.since,
        host: args.host,
        decision: args.decision.map(DecisionArg::traffic),
        summary: args.summary,
        json: args.json,
        limit: args.limit,
    };
    sandgate_daemon::traffic_log::log(query, &mut std::io::stdout().lock())
}
