//! nftables backend (Linux): rule text for a sandbox's own network namespace and for host-wide
//! guest-user scopes, applied with `nft -f -` as one transaction.
//!
//! Every ruleset starts with `add table` + `delete table` before the full table definition, so
//! applying replaces whatever was there atomically and applying twice is idempotent.

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};

use crate::FirewallError;
use crate::guest::{Firewall, GuestPolicy, GuestScope, Installed, Plan};
use crate::runner::{CommandRunner, SystemRunner};
use crate::subid::{self, IdRange};

/// Name of the table inside a sandbox's network namespace.
pub const NAMESPACE_TABLE: &str = "sandgate";

/// Prefix of host-wide guest-user table names (`sandgate_u1001`, `sandgate_u1001_p4242`).
pub const GUEST_TABLE_PREFIX: &str = "sandgate_";

/// Longest NFLOG prefix the kernel keeps (`NF_LOG_PREFIXLEN` - 1).
pub const MAX_PREFIX_LEN: usize = 127;

/// What the namespace ruleset needs to know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceRules {
    /// NFLOG prefix of blocked packets: the sandbox id. Characters outside
    /// `[A-Za-z0-9._:/@+=-]` become `_` and it is cut at [`MAX_PREFIX_LEN`] bytes (see
    /// [`log_prefix`]).
    pub prefix: String,
    /// NFLOG group the monitor socket is bound to.
    pub nflog_group: u16,
    /// Port of the proxy listener on 127.0.0.1 and ::1 inside, where TCP to any other address is
    /// redirected (transparent capture).
    pub proxy_port: u16,
}

/// The nft text for inside a sandbox's own network namespace.
///
/// The text form of the firewall the launcher installs in each sandbox's network namespace (as
/// one nf_tables netlink batch of its own: `sandgate_sandbox::namespace_firewall`; a kernel test
/// checks that both give the kernel the same table). Used by tests and to read.
///
/// Table `inet sandgate`. Chain `capture` (nat, output, priority -100): TCP to any address
/// outside 127.0.0.0/8 and `::1` is redirected to the proxy listener (dual-stack, so on
/// 127.0.0.1 or `::1`:`proxy_port`), where the
/// proxy reads the original destination back and decides the connection by name (transparent
/// capture). Chain `output` (filter, policy drop): loopback is accepted (the proxy listener and
/// DNS stub live on 127.0.0.1 inside the namespace), and so are redirected connections (this
/// chain still sees their first route's device); IPv6 neighbour discovery and MLD are dropped
/// quietly (they are not connection attempts and would only flood the log); UDP to port 443
/// (QUIC) is refused at once and quietly, so clients fall back to TCP; everything else is logged
/// to NFLOG group `nflog_group` with prefix `prefix` and rejected at once — TCP with a reset, the
/// rest with ICMP admin-prohibited — so a direct attempt fails immediately and is reported.
pub fn namespace_ruleset(rules: &NamespaceRules) -> String {
    let t = NAMESPACE_TABLE;
    let prefix = log_prefix(&rules.prefix);
    let group = rules.nflog_group;
    let proxy_port = rules.proxy_port;
    // One rule per type (not an anonymous set): the launcher's own netlink batch builds these
    // rules the same way, and a kernel test compares the two listings.
    let quiet: String =
        QUIET_ICMPV6.iter().map(|ty| format!("\t\ticmpv6 type {ty} drop\n")).collect();
    format!(
        "add table inet {t}
delete table inet {t}
table inet {t} {{
\tchain capture {{
\t\ttype nat hook output priority -100; policy accept;
\t\tip daddr != 127.0.0.0/8 meta l4proto tcp redirect to :{proxy_port}
\t\tip6 daddr != ::1 meta l4proto tcp redirect to :{proxy_port}
\t}}
\tchain output {{
\t\ttype filter hook output priority 0; policy drop;
\t\toif \"lo\" accept
\t\tip daddr 127.0.0.1 tcp dport {proxy_port} accept
\t\tip6 daddr ::1 tcp dport {proxy_port} accept
{quiet}\t\tudp dport 443 reject with icmpx port-unreachable
\t\tlog prefix \"{prefix}\" group {group}
\t\tmeta l4proto tcp reject with tcp reset
\t\treject with icmpx admin-prohibited
\t}}
}}
"
    )
}

/// ICMPv6 the kernel sends on its own (neighbour discovery, MLD): dropped without a log line.
const QUIET_ICMPV6: [&str; 5] = [
    "nd-router-solicit",
    "nd-neighbor-solicit",
    "nd-neighbor-advert",
    "mld-listener-report",
    "mld2-listener-report",
];

/// Makes `raw` safe inside an nft double-quoted string and within the kernel's prefix length.
///
/// nft strings have no escapes, so anything but `[A-Za-z0-9._:/@+=-]` becomes `_`.
pub fn log_prefix(raw: &str) -> String {
    raw.chars()
        .map(|c| if c.is_ascii_alphanumeric() || "._:/@+=-".contains(c) { c } else { '_' })
        .take(MAX_PREFIX_LEN)
        .collect()
}

/// Applies nft text with `nft -f -` (one atomic transaction).
pub fn apply(text: &str) -> Result<(), FirewallError> {
    apply_with(&SystemRunner, text)
}

/// Applies nft text with `nft -f -` through `runner`.
pub fn apply_with(runner: &dyn CommandRunner, text: &str) -> Result<(), FirewallError> {
    runner.run("nft", &["-f", "-"], Some(text)).map(drop)
}

/// The table name of a guest-user scope: `sandgate_u1001` or `sandgate_u1001_p4242`.
pub fn guest_table(scope: &GuestScope) -> String {
    format!("{GUEST_TABLE_PREFIX}{}", scope.label('_'))
}

/// The scope a table name belongs to, if it is a guest-user table made by [`guest_table`].
pub fn scope_of_table(name: &str) -> Option<GuestScope> {
    GuestScope::parse_label(name.strip_prefix(GUEST_TABLE_PREFIX)?, '_')
}

/// The nft text of a host-wide guest-user scope.
///
/// The user's whole identity is fenced: packets from sockets whose uid (`meta skuid`) is the
/// user's or in its subordinate uid ranges (set `uids`), or whose gid (`meta skgid`) is in its
/// subordinate gid ranges (set `gids`), jump to chain `guest`. There only packets of flows the
/// user opened to a proxy pass — the conntrack direction is *original* and the address and port
/// are in set `allow4`/`allow6`; replies on flows someone else opened (an inbound connection to
/// a listener of the user, a datagram answered) are not accepted. Everything else — IPv4 and
/// IPv6, TCP, UDP, ICMP — is logged to NFLOG group `policy.nflog_group` with prefix
/// [`GuestScope::log_prefix`] and rejected. Other users' traffic is not touched (the base chain's
/// policy is accept). The table's comment records [`identity_comment`], so a later change of the
/// subordinate ranges can be noticed ([`recorded_identity`]).
pub fn guest_ruleset(scope: &GuestScope, policy: &GuestPolicy) -> String {
    let t = guest_table(scope);
    let uid = scope.uid;
    let prefix = log_prefix(&scope.log_prefix());
    let group = policy.nflog_group;
    let identity = identity_comment(&policy.subids.fingerprint(uid));
    let mut s = format!(
        "add table inet {t}\ndelete table inet {t}\ntable inet {t} {{\n\tcomment \"{identity}\"\n"
    );
    let mut uids = vec![IdRange { first: uid, last: uid }];
    uids.extend(policy.subids.uids.iter().copied());
    for (set, ty, ranges) in
        [("uids", "uid", subid::merge(uids)), ("gids", "gid", policy.subids.gids.clone())]
    {
        let _ = writeln!(s, "\tset {set} {{\n\t\ttype {ty}\n\t\tflags interval");
        if !ranges.is_empty() {
            let elems: Vec<String> = ranges.iter().map(ToString::to_string).collect();
            let _ = writeln!(s, "\t\telements = {{ {} }}", elems.join(", "));
        }
        s.push_str("\t}\n");
    }
    for (set, ty, v6) in [("allow4", "ipv4_addr", false), ("allow6", "ipv6_addr", true)] {
        let _ = writeln!(s, "\tset {set} {{\n\t\ttype {ty} . inet_service");
        let elems: Vec<String> =
            policy.proxies.iter().filter(|a| a.is_ipv6() == v6).map(element).collect();
        if !elems.is_empty() {
            let _ = writeln!(s, "\t\telements = {{ {} }}", elems.join(", "));
        }
        s.push_str("\t}\n");
    }
    // Packets the kernel sends with no owning socket (`meta skuid` does not resolve) cannot be
    // told apart by user; the ones that carry a listener's or a group join's data are dropped
    // host-wide unless the policy keeps them. Owned packets of other users are accepted first.
    // Nothing narrower exists: on 6.18 the `socket` expression in the output hook finds no socket
    // for a cookie SYN-ACK (tested: 97 of 97 unmatched), and input rules have no socket owner.
    let mut unowned = String::new();
    if !policy.allow_syncookies || !policy.allow_multicast_reports {
        unowned.push_str("\t\tmeta skuid >= 0 accept\n");
    }
    if !policy.allow_syncookies {
        unowned.push_str("\t\ttcp flags & (syn | ack) == syn | ack drop\n");
    }
    if !policy.allow_multicast_reports {
        unowned.push_str("\t\tip protocol igmp drop\n");
        unowned.push_str(
            "\t\ticmpv6 type { mld-listener-report, mld-listener-done, mld2-listener-report } drop\n",
        );
    }
    let _ = write!(
        s,
        "\tchain output {{
\t\ttype filter hook output priority 0; policy accept;
\t\tmeta skuid @uids jump guest
\t\tmeta skgid @gids jump guest
{unowned}\t}}
\tchain guest {{
\t\tct direction original ip daddr . tcp dport @allow4 accept
\t\tct direction original ip6 daddr . tcp dport @allow6 accept
\t\tlog prefix \"{prefix}\" group {group}
\t\tmeta l4proto tcp reject with tcp reset
\t\treject with icmpx admin-prohibited
\t}}
}}
"
    );
    s
}

/// Start of the table comment that records the fenced identity.
const IDENTITY_COMMENT: &str = "sandgate identity ";

/// The table comment recording an identity fingerprint ([`SubIds::fingerprint`](crate::SubIds::fingerprint)).
pub fn identity_comment(fingerprint: &str) -> String {
    format!("{IDENTITY_COMMENT}{fingerprint}")
}

/// The identity fingerprint recorded in a table as `nft list table` prints it; `None` for tables
/// made before it was recorded (they fence the uid only).
pub fn recorded_identity(listing: &str) -> Option<String> {
    listing.lines().find_map(|l| {
        let rest = l.trim().strip_prefix("comment \"")?.strip_prefix(IDENTITY_COMMENT)?;
        Some(rest.strip_suffix('"')?.to_owned())
    })
}

/// `ADDR . PORT` as an nft set element.
fn element(addr: &SocketAddr) -> String {
    match addr.ip() {
        IpAddr::V4(ip) => format!("{ip} . {}", addr.port()),
        IpAddr::V6(ip) => format!("{ip} . {}", addr.port()),
    }
}

/// nft text that adds (`add`) or deletes (`delete`) one proxy endpoint of an applied scope.
pub fn element_command(verb: ElementVerb, scope: &GuestScope, addr: SocketAddr) -> String {
    let set = if addr.is_ipv6() { "allow6" } else { "allow4" };
    let verb = match verb {
        ElementVerb::Add => "add",
        ElementVerb::Delete => "delete",
    };
    format!("{verb} element inet {} {set} {{ {} }}\n", guest_table(scope), element(&addr))
}

/// Whether [`element_command`] adds or deletes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElementVerb {
    /// `add element`.
    Add,
    /// `delete element`.
    Delete,
}

/// Table names of family `inet` in `nft list tables` output.
pub fn parse_tables(output: &str) -> Vec<String> {
    output
        .lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            match (words.next(), words.next(), words.next(), words.next()) {
                (Some("table"), Some("inet"), Some(name), None) => Some(name.to_owned()),
                _ => None,
            }
        })
        .collect()
}

/// The nftables [`Firewall`] backend for host-wide guest-user scopes.
#[derive(Debug, Default)]
pub struct GuestTables<R = SystemRunner> {
    runner: R,
}

impl GuestTables<SystemRunner> {
    /// A backend that runs the real `nft`.
    pub fn system() -> Self {
        GuestTables { runner: SystemRunner }
    }
}

impl<R: CommandRunner> GuestTables<R> {
    /// A backend that runs commands through `runner`.
    pub fn new(runner: R) -> Self {
        GuestTables { runner }
    }

    /// The runner (tests inspect a recording runner through this).
    pub fn runner(&self) -> &R {
        &self.runner
    }

    fn installed_tables(&self) -> Result<Vec<(GuestScope, String)>, FirewallError> {
        let out = self.runner.run("nft", &["list", "tables", "inet"], None)?;
        Ok(parse_tables(&out.stdout)
            .into_iter()
            .filter_map(|name| scope_of_table(&name).map(|s| (s, name)))
            .collect())
    }
}

impl<R: CommandRunner> Firewall for GuestTables<R> {
    fn plan(&self, scope: &GuestScope, policy: &GuestPolicy) -> Result<Plan, FirewallError> {
        Ok(Plan { scope: *scope, name: guest_table(scope), text: guest_ruleset(scope, policy) })
    }

    fn apply(&self, plan: &Plan) -> Result<(), FirewallError> {
        apply_with(&self.runner, &plan.text)
    }

    fn allow(&self, scope: &GuestScope, addr: SocketAddr) -> Result<(), FirewallError> {
        apply_with(&self.runner, &element_command(ElementVerb::Add, scope, addr))
    }

    fn disallow(&self, scope: &GuestScope, addr: SocketAddr) -> Result<(), FirewallError> {
        apply_with(&self.runner, &element_command(ElementVerb::Delete, scope, addr))
    }

    fn remove_plan(&self, scope: &GuestScope) -> String {
        // `add` first so a table deleted by someone else in between is not an error.
        let name = guest_table(scope);
        format!("add table inet {name}\ndelete table inet {name}\n")
    }

    fn remove(&self, scope: &GuestScope) -> Result<bool, FirewallError> {
        let name = guest_table(scope);
        if !self.installed_tables()?.iter().any(|(_, n)| *n == name) {
            return Ok(false);
        }
        apply_with(&self.runner, &self.remove_plan(scope))?;
        Ok(true)
    }

    fn list(&self) -> Result<Vec<Installed>, FirewallError> {
        let mut found = Vec::new();
        for (scope, name) in self.installed_tables()? {
            match self.runner.run("nft", &["list", "table", "inet", &name], None) {
                Ok(out) => found.push(Installed { scope, name, rules: out.stdout }),
                // Removed by someone else between the two commands: not installed any more.
                Err(FirewallError::Command { ref stderr, .. })
                    if stderr.contains("No such file or directory") => {}
                Err(e) => return Err(e),
            }
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_is_sanitised_and_bounded() {
        for (raw, want) in [
            ("sbx-01H.abc", "sbx-01H.abc"),
            ("a\"b", "a_b"),
            ("x y\nz\\", "x_y_z_"),
            ("€", "_"),
            ("$var;{}", "_var___"),
        ] {
            assert_eq!(log_prefix(raw), want);
        }
        assert_eq!(log_prefix(&"a".repeat(500)).len(), MAX_PREFIX_LEN);
        assert_eq!(log_prefix(&"é".repeat(500)).len(), MAX_PREFIX_LEN);
    }

    #[test]
    fn table_names_round_trip() {
        for scope in [GuestScope::user(1001), GuestScope::owned_by(5, 77)] {
            assert_eq!(scope_of_table(&guest_table(&scope)), Some(scope));
        }
        for foreign in ["sandgate", "sandgate_", "filter", "sandgate_x", "sandgate_u1_q2"] {
            assert_eq!(scope_of_table(foreign), None, "{foreign}");
        }
    }

    #[test]
    fn recorded_identity_round_trips_through_a_listing() {
        let policy = GuestPolicy {
            proxies: vec![],
            nflog_group: 1,
            subids: Default::default(),
            allow_syncookies: false,
            allow_multicast_reports: false,
        };
        let text = guest_ruleset(&GuestScope::user(5), &policy);
        let fp = policy.subids.fingerprint(5);
        assert_eq!(recorded_identity(&text).as_deref(), Some(fp.as_str()));
        // As `nft list table` prints it.
        let listing =
            format!("table inet sandgate_u5 {{\n\tcomment \"sandgate identity {fp}\"\n}}");
        assert_eq!(recorded_identity(&listing), Some(fp));
        assert_eq!(recorded_identity("table inet sandgate_u5 {\n\tcomment \"other\"\n}"), None);
        assert_eq!(recorded_identity("table inet sandgate_u5 {\n}"), None);
    }

    #[test]
    fn parses_list_tables() {
        let out = "table inet filter\ntable ip nat\ntable inet sandgate_u5\n\ntable inet  x  y\n";
        assert_eq!(parse_tables(out), ["filter", "sandgate_u5"]);
    }

    #[test]
    fn element_commands() {
        let s = GuestScope::user(9);
        assert_eq!(
            element_command(ElementVerb::Add, &s, "127.0.0.1:3128".parse().unwrap()),
            "add element inet sandgate_u9 allow4 { 127.0.0.1 . 3128 }\n"
        );
        assert_eq!(
            element_command(ElementVerb::Delete, &s, "[::1]:8080".parse().unwrap()),
            "delete element inet sandgate_u9 allow6 { ::1 . 8080 }\n"
        );
    }
}
