//! Refusals and the responses that explain them, written for an AI agent to read and act on.

use std::fmt::Write as _;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use sandgate_config::{NetworkPolicy, Rule, RuleSource};

use crate::guard::Forbidden;
use crate::traits::Outcome;

/// How many allowed destinations a 403 body lists.
const LISTED_ALLOWED: usize = 12;

/// Why a request does not go through. Each becomes one response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The request or its target is malformed (400).
    Malformed {
        /// What was sent (shortened, escaped).
        input: String,
        /// What is wrong with it.
        why: String,
    },
    /// A plain request in origin form (`GET /path`): the client is not using the proxy as one.
    OriginForm,
    /// `GET https://...` sent to the proxy: HTTPS must go through CONNECT.
    HttpsWithoutConnect {
        /// The target.
        target: String,
    },
    /// The sandbox has a token and the request did not carry it (407).
    Unauthenticated,
    /// A deny rule (or the absence of network) refuses it (403).
    Deny {
        /// `host:port`.
        target: String,
        /// The rule.
        rule: Arc<Rule>,
    },
    /// A person refused it (403).
    Denied {
        /// `host:port`.
        target: String,
    },
    /// Nobody answered within the ask timeout (403).
    AskTimedOut {
        /// `host:port`.
        target: String,
        /// How long the proxy waited.
        after: Duration,
    },
    /// The sandbox has too many questions open already; this one was not asked (403).
    TooManyQuestions {
        /// `host:port`.
        target: String,
        /// How many are open.
        open: usize,
    },
    /// The sandbox asked its budget of questions in the current window; this one was not asked
    /// (403).
    OverBudget {
        /// `host:port`.
        target: String,
        /// Questions per window.
        limit: u32,
        /// The window.
        window: Duration,
    },
    /// An unattended run (`--no-ask`, `[daemon] ask = "deny"`): nobody is asked, so a
    /// destination no rule allows is refused at once (403) and recorded as what would have been
    /// asked.
    Unattended {
        /// `host:port`.
        target: String,
    },
    /// No approver is running, so unknown destinations cannot be approved (403).
    NoApprover {
        /// `host:port`.
        target: String,
    },
    /// The name resolves only to addresses the sandbox may not reach (403).
    ForbiddenAddress {
        /// `host:port`.
        target: String,
        /// The first refused address.
        ip: IpAddr,
        /// Why.
        why: Forbidden,
    },
    /// An address of the DNS stub's block (198.18.0.0/15) that the stub never gave this sandbox
    /// for a name: it stands for no destination here (403). Another sandbox's name may stand
    /// behind it; this sandbox learns nothing of it.
    NotGiven {
        /// `ip:port`.
        target: String,
    },
    /// The name does not resolve (502).
    Unresolvable {
        /// `host:port`.
        target: String,
        /// The resolver's error.
        error: String,
    },
    /// No checked address accepted a connection, or the upstream failed mid-request (502).
    Unreachable {
        /// `host:port`.
        target: String,
        /// The last error.
        error: String,
    },
    /// An intercepted request matches none of its host's `[[http_rules]]` (403).
    PathNotAllowed {
        /// `host:port`.
        target: String,
        /// The request's method.
        method: String,
        /// The request's path (without the query string).
        path: String,
        /// Where the rules are written (`file:line`).
        rules_at: String,
        /// The rules, as written.
        allowed: Vec<String>,
    },
    /// The upstream's TLS certificate (or handshake) failed verification (502).
    UpstreamCertificate {
        /// `host:port`.
        target: String,
        /// Why, in rustls' words.
        why: String,
    },
    /// A secret to inject could not be read (502). The message never holds the value.
    SecretUnavailable {
        /// `host:port`.
        target: String,
        /// What went wrong (names the secret and its `file:line`).
        why: String,
    },
}

impl Refusal {
    /// The rule text of [`Refusal::Unresolvable`] (events, `X-Sandgate-Decision`), by which the
    /// launcher tells it apart.
    pub const UNRESOLVABLE: &'static str = "name does not resolve";

    /// The rule text of [`Refusal::Unattended`], by which `sandgate log --summary` lists what
    /// would have been asked.
    pub const UNATTENDED: &'static str = "not asked: unattended run";

    /// The rule text of [`Refusal::NotGiven`].
    pub const NOT_GIVEN: &'static str =
        "an address of the DNS stub's block never given to this sandbox";

    /// The HTTP status code.
    pub fn status(&self) -> u16 {
        match self {
            Refusal::Malformed { .. }
            | Refusal::OriginForm
            | Refusal::HttpsWithoutConnect { .. } => 400,
            Refusal::Unauthenticated => 407,
            Refusal::Deny { .. }
            | Refusal::Denied { .. }
            | Refusal::AskTimedOut { .. }
            | Refusal::TooManyQuestions { .. }
            | Refusal::OverBudget { .. }
            | Refusal::Unattended { .. }
            | Refusal::NoApprover { .. }
            | Refusal::ForbiddenAddress { .. }
            | Refusal::NotGiven { .. }
            | Refusal::PathNotAllowed { .. } => 403,
            Refusal::Unresolvable { .. }
            | Refusal::Unreachable { .. }
            | Refusal::UpstreamCertificate { .. }
            | Refusal::SecretUnavailable { .. } => 502,
        }
    }

    /// The event's outcome: deny for policy refusals, reject for bad requests, allow for an
    /// allowed request whose upstream failed.
    pub fn outcome(&self) -> Outcome {
        match self.status() {
            403 => Outcome::Deny,
            502 => Outcome::Allow,
            _ => Outcome::Reject,
        }
    }

    /// The deciding rule, as text (also the `rule=` of `X-Sandgate-Decision`).
    pub fn rule_text(&self) -> String {
        match self {
            Refusal::Malformed { .. } => "malformed request".into(),
            Refusal::OriginForm => "not a proxy request".into(),
            Refusal::HttpsWithoutConnect { .. } => "https without CONNECT".into(),
            Refusal::Unauthenticated => "proxy token required".into(),
            Refusal::Deny { rule, .. } => deny_rule_text(rule),
            Refusal::Denied { .. } => "denied by a person".into(),
            Refusal::AskTimedOut { .. } => "approval timed out".into(),
            Refusal::TooManyQuestions { .. } => "too many questions open".into(),
            Refusal::OverBudget { .. } => "question budget spent".into(),
            Refusal::NoApprover { .. } => "no approver running".into(),
            Refusal::Unattended { .. } => Refusal::UNATTENDED.into(),
            Refusal::ForbiddenAddress { ip, why, .. } => {
                format!("{}{ip} is {why}", crate::guard::RULE_PREFIX)
            }
            Refusal::NotGiven { .. } => Refusal::NOT_GIVEN.into(),
            Refusal::Unresolvable { .. } => Refusal::UNRESOLVABLE.into(),
            Refusal::Unreachable { .. } => "upstream unreachable".into(),
            Refusal::PathNotAllowed { rules_at, .. } => format!("http_rules ({rules_at})"),
            Refusal::UpstreamCertificate { .. } => "upstream certificate not trusted".into(),
            Refusal::SecretUnavailable { .. } => "secret unavailable".into(),
        }
    }

    /// The HTTP reason phrase: for every refusal it says that sandgate refused and, in a few words,
    /// why — many HTTPS clients print only the status line of a failed CONNECT (curl: `CONNECT
    /// tunnel failed, response 403`), never the body.
    pub fn reason_phrase(&self) -> String {
        let why: String = match self {
            Refusal::Malformed { .. } => {
                return "Bad request to sandgate: malformed request".into();
            }
            Refusal::OriginForm => return "Bad request to sandgate: not a proxy request".into(),
            Refusal::HttpsWithoutConnect { .. } => {
                return "Bad request to sandgate: https needs CONNECT".into();
            }
            Refusal::Unauthenticated => {
                return "Proxy Authentication Required by sandgate: proxy token missing".into();
            }
            Refusal::Unresolvable { .. } => {
                return "Bad Gateway (allowed by sandgate): name does not resolve".into();
            }
            Refusal::Unreachable { .. } => {
                return "Bad Gateway (allowed by sandgate): upstream unreachable".into();
            }
            Refusal::UpstreamCertificate { .. } => {
                return "Bad Gateway (allowed by sandgate): upstream certificate not trusted"
                    .into();
            }
            Refusal::SecretUnavailable { .. } => {
                return "Bad Gateway (allowed by sandgate): secret could not be read".into();
            }
            Refusal::PathNotAllowed { .. } => "method or path not in http_rules".into(),
            Refusal::Deny { rule, .. } => match &rule.source {
                RuleSource::Grant(_) => "denied by a person".into(),
                RuleSource::NoNetwork(_) => "this tier has no network".into(),
                RuleSource::Managed { .. } | RuleSource::ManagedCeiling(_) => {
                    "blocked by your organisation's policy".into()
                }
                RuleSource::Tier(_)
                | RuleSource::Preset(_)
                | RuleSource::File { .. }
                | RuleSource::CommandLine
                | RuleSource::CurrentDirectory
                | RuleSource::Builtin
                | RuleSource::Env(_) => "deny rule".into(),
            },
            Refusal::Denied { .. } => "denied by a person".into(),
            Refusal::AskTimedOut { .. } => "not in allowlist (approval timed out)".into(),
            Refusal::TooManyQuestions { .. } => "not in allowlist (too many questions open)".into(),
            Refusal::OverBudget { .. } => "not in allowlist (question budget spent)".into(),
            Refusal::NoApprover { .. } => "not in allowlist (no approver running)".into(),
            Refusal::Unattended { .. } => "not in allowlist (unattended run, nobody asked)".into(),
            Refusal::ForbiddenAddress { why, .. } => format!("resolves to {why}"),
            Refusal::NotGiven { .. } => "address never given to this sandbox".into(),
        };
        header_safe(&format!("Blocked by sandgate: {why}"))
    }

    /// The destination, when one was understood.
    pub fn target(&self) -> Option<&str> {
        match self {
            Refusal::Malformed { .. } | Refusal::OriginForm | Refusal::Unauthenticated => None,
            Refusal::HttpsWithoutConnect { target }
            | Refusal::Deny { target, .. }
            | Refusal::Denied { target }
            | Refusal::AskTimedOut { target, .. }
            | Refusal::TooManyQuestions { target, .. }
            | Refusal::OverBudget { target, .. }
            | Refusal::Unattended { target }
            | Refusal::NoApprover { target }
            | Refusal::ForbiddenAddress { target, .. }
            | Refusal::NotGiven { target }
            | Refusal::Unresolvable { target, .. }
            | Refusal::Unreachable { target, .. }
            | Refusal::PathNotAllowed { target, .. }
            | Refusal::UpstreamCertificate { target, .. }
            | Refusal::SecretUnavailable { target, .. } => Some(target),
        }
    }
}

fn deny_rule_text(rule: &Rule) -> String {
    match &rule.pattern {
        Some(p) => format!("deny {p} ({})", rule.source),
        None => rule.source.to_string(),
    }
}

/// A rendered refusal: status line reason, headers and body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rendered {
    /// Status code.
    pub status: u16,
    /// Reason phrase ([`Refusal::reason_phrase`]).
    pub reason: String,
    /// Extra headers (name, value); values are safe to put on the wire.
    pub headers: Vec<(&'static str, String)>,
    /// Plain-text body.
    pub body: String,
}

impl Rendered {
    /// The whole response as HTTP/1.1 bytes, with `Connection: close`.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = format!("HTTP/1.1 {} {}\r\n", self.status, self.reason);
        for (k, v) in &self.headers {
            let _ = write!(out, "{k}: {v}\r\n");
        }
        let _ = write!(
            out,
            "Content-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
            self.body.len(),
            self.body
        );
        out.into_bytes()
    }
}

/// Renders a refusal for a sandbox under `policy` (no grants to list: see
/// [`render_refusal_with_grants`]).
pub fn render_refusal(refusal: &Refusal, policy: &NetworkPolicy) -> Rendered {
    render_refusal_with_grants(refusal, policy, &[])
}

/// Renders a refusal for a sandbox under `policy` whose live allow grants are `granted`
/// (patterns, as [`GrantSource::listed`](crate::GrantSource::listed) gives them): the body's
/// "Allowed destinations" names both, the grants marked as such.
pub fn render_refusal_with_grants(
    refusal: &Refusal,
    policy: &NetworkPolicy,
    granted: &[String],
) -> Rendered {
    let allowed_list =
        |body: &mut String, policy: &NetworkPolicy| allowed_list(body, policy, granted);
    let status = refusal.status();
    let reason = refusal.reason_phrase();
    let mut headers = vec![(
        "X-Sandgate-Decision",
        format!("{}; rule={}", refusal.outcome(), header_safe(&refusal.rule_text())),
    )];
    if status == 407 {
        headers.push(("Proxy-Authenticate", "Basic realm=\"sandgate\"".into()));
    }
    let mut body = String::new();
    let t = refusal.target().unwrap_or("");
    let host = t.rsplit_once(':').map_or(t, |(h, _)| h);
    let how_to_ask = |body: &mut String| {
        let _ = writeln!(
            body,
            "To get access, ask the person you are working for to run `sandgate allow {t}` in a \
             terminal outside the sandbox, or to approve it in chat. A retry puts the question to \
             them again and waits as long; it does not pass by itself."
        );
    };
    match refusal {
        Refusal::Malformed { input, why } => {
            let _ = writeln!(body, "sandgate proxy: bad request {input}: {why}.");
            body.push_str("Send `CONNECT host:port` for HTTPS or an absolute `http://` URL.\n");
        }
        Refusal::OriginForm => body.push_str(
            "sandgate proxy: this is an HTTP proxy, not a web server. Set HTTP_PROXY and \
             HTTPS_PROXY (e.g. http://127.0.0.1:3128) so requests are sent through it.\n",
        ),
        Refusal::HttpsWithoutConnect { target } => {
            let _ = writeln!(
                body,
                "sandgate proxy: {target} is https; HTTPS goes through a CONNECT tunnel. Set \
                 HTTPS_PROXY to this proxy and use the https:// URL as usual."
            );
        }
        Refusal::Unauthenticated => body.push_str(
            "sandgate proxy: this proxy needs the sandbox's token in Proxy-Authorization. Use \
             the HTTP_PROXY/HTTPS_PROXY values set inside the sandbox unchanged.\n",
        ),
        Refusal::Deny { rule, .. } => {
            let _ = writeln!(
                body,
                "sandgate blocked the connection to {t}.\nRule: {}.",
                deny_rule_text(rule)
            );
            allowed_list(&mut body, policy);
            match &rule.source {
                // A person's deny answer (now, or earlier and kept as a grant).
                RuleSource::Grant(_) => body.push_str(
                    "A person denied it, and their answer covers this request. Do not retry; \
                     ask the person if you need it and explain why.\n",
                ),
                // The administrator's managed layer: nobody at this machine can change it.
                RuleSource::Managed { .. } | RuleSource::ManagedCeiling(_) => body.push_str(
                    "It is blocked by your organisation's policy (set by an administrator in \
                     sandgate's managed configuration): no person here, configuration file or \
                     flag can allow it. Do not retry and do not ask to approve it; work without \
                     it, or tell the person you work for that it needs the administrator.\n",
                ),
                RuleSource::Tier(_)
                | RuleSource::Preset(_)
                | RuleSource::File { .. }
                | RuleSource::CommandLine
                | RuleSource::NoNetwork(_)
                | RuleSource::CurrentDirectory
                | RuleSource::Builtin
                | RuleSource::Env(_) => body.push_str(
                    "A deny rule wins over every allow rule and grant; only the person running \
                     the sandbox can change it (in sandgate's configuration, outside the \
                     sandbox).\n",
                ),
            }
        }
        Refusal::Denied { .. } => {
            let _ = writeln!(body, "sandgate blocked the connection to {t}: a person denied it.");
            allowed_list(&mut body, policy);
            body.push_str("Do not retry; ask the person if you need it and explain why.\n");
        }
        Refusal::AskTimedOut { after, .. } => {
            let _ = writeln!(
                body,
                "sandgate blocked the connection to {t}: it is not on the allowlist and nobody \
                 approved it within {}s (the request timed out).",
                after.as_secs()
            );
            allowed_list(&mut body, policy);
            how_to_ask(&mut body);
        }
        Refusal::TooManyQuestions { open, .. } => {
            let _ = writeln!(
                body,
                "sandgate blocked the connection to {t}: it is not on the allowlist, and this \
                 sandbox already has {open} questions waiting for a person, so no new one was \
                 asked."
            );
            allowed_list(&mut body, policy);
            body.push_str(
                "Wait for the open questions to be answered, then retry once; do not try many \
                 different hosts.\n",
            );
        }
        Refusal::OverBudget { limit, window, .. } => {
            let _ = writeln!(
                body,
                "sandgate blocked the connection to {t}: it is not on the allowlist, and this \
                 sandbox (or all sandboxes of this user together) already asked {limit} \
                 questions in the last {}s, the budget, so this one was denied without asking \
                 anyone.",
                window.as_secs()
            );
            allowed_list(&mut body, policy);
            body.push_str(
                "Do not try other hosts. Tell the person which destinations you need and why; \
                 they can allow them with `sandgate allow HOST`.\n",
            );
        }
        Refusal::Unattended { .. } => {
            let _ = writeln!(
                body,
                "sandgate blocked the connection to {t}: it is not on the allowlist, and this run \
                 is unattended (nobody is there to approve it), so it was refused at once."
            );
            allowed_list(&mut body, policy);
            body.push_str(
                "Do not retry: the answer will be the same. Work with the allowed destinations; \
                 the refusal is recorded, and the person who reviews this run sees it in \
                 `sandgate log --summary` and can add it to the allowlist for the next run.\n",
            );
        }
        Refusal::NoApprover { .. } => {
            let _ = writeln!(
                body,
                "sandgate blocked the connection to {t}: it is not on the allowlist, and no \
                 approver is running to ask a person (the proxy runs without the sandgate daemon)."
            );
            allowed_list(&mut body, policy);
            // Without the daemon nobody can answer `sandgate allow`: name what works today.
            let _ = writeln!(
                body,
                "To get access, ask the person you are working for to start the sandbox again with \
                 `--allow {host}`, or to add it to `[network] allow` in sandgate's configuration \
                 (outside the sandbox). Retrying before that will be refused the same way."
            );
        }
        Refusal::ForbiddenAddress { ip, why, .. } => {
            let port = t.rsplit_once(':').map_or("", |(_, p)| p);
            let ip_target = match ip {
                IpAddr::V4(_) => format!("{ip}:{port}"),
                IpAddr::V6(_) => format!("[{ip}]:{port}"),
            };
            let _ = writeln!(
                body,
                "sandgate blocked the connection to {t}: the name resolves to {ip}, which is {why}. \
                 Sandboxes may reach such addresses only when the address itself is allowed."
            );
            allowed_list(&mut body, policy);
            let _ = writeln!(
                body,
                "Allowing {host} (a rule, a grant or a person's answer) does not change this; \
                 retrying will be refused the same way. If {ip} is meant, ask the person you are \
                 working for to allow the address itself: `sandgate allow {ip_target}` in a \
                 terminal outside the sandbox, or {ip} in `[network] allow`."
            );
        }
        Refusal::NotGiven { .. } => {
            let _ = writeln!(
                body,
                "sandgate blocked the connection to {t}: the address is one of those the \
                 sandbox's DNS stub gives out for names (198.18.0.0/15), and it was never given \
                 to this sandbox, so it stands for no destination. Connect to a host by its name \
                 (looked up in this sandbox) instead; retrying the address will be refused the \
                 same way."
            );
        }
        Refusal::Unresolvable { error, .. } => {
            let _ = writeln!(
                body,
                "sandgate allowed {t}, but the name does not resolve: {error}. Check the spelling."
            );
        }
        Refusal::Unreachable { error, .. } => {
            let _ = writeln!(
                body,
                "sandgate allowed {t}, but the server could not be reached: {error}. The server \
                 may be down; this is not a policy decision."
            );
        }
        Refusal::PathNotAllowed { method, path, rules_at, allowed, .. } => {
            let _ = writeln!(
                body,
                "sandgate blocked {method} {path} on {t}: the host is allowed, but only for the \
                 requests its http_rules list ({rules_at}), and this one matches none."
            );
            let _ = writeln!(body, "Allowed requests on {host}: {}.", allowed.join(", "));
            body.push_str(
                "Use one of the allowed requests. If you need this one, ask the person you are \
                 working for to add it to the http_rules of this host in sandgate's \
                 configuration (outside the sandbox).\n",
            );
        }
        Refusal::UpstreamCertificate { why, .. } => {
            let _ = writeln!(
                body,
                "sandgate allowed {t}, but the server's TLS certificate is not trusted: {why}. \
                 sandgate checks the certificates of the hosts it intercepts against the \
                 system's roots and [tls] extra_roots; this is not a policy decision and \
                 retrying will not help."
            );
        }
        Refusal::SecretUnavailable { why, .. } => {
            let _ = writeln!(
                body,
                "sandgate allowed {t}, but the secret it adds to requests to this host could not \
                 be read: {why}. The request was not sent. Tell the person you are working for \
                 (`sandgate secrets test NAME` shows the problem)."
            );
        }
    }
    Rendered { status, reason, headers, body }
}

/// "Allowed destinations: …": the policy's allow patterns, then the live grants (marked), the
/// first [`LISTED_ALLOWED`] of them and how many there are.
fn allowed_list(body: &mut String, policy: &NetworkPolicy, granted: &[String]) {
    let rules: Vec<String> = policy
        .allow_rules()
        .iter()
        .filter_map(|r| r.pattern.as_ref())
        .map(|p| p.to_string())
        .collect();
    let grants = granted.iter().filter(|g| !rules.contains(g)).map(|g| format!("{g} (granted)"));
    let all: Vec<String> = rules.iter().cloned().chain(grants).collect();
    let names = &all[..all.len().min(LISTED_ALLOWED)];
    if names.is_empty() {
        body.push_str("Allowed destinations: none.\n");
    } else if all.len() > names.len() {
        let _ = writeln!(
            body,
            "Allowed destinations (first {} of {}): {}.",
            names.len(),
            all.len(),
            names.join(", ")
        );
    } else {
        let _ = writeln!(body, "Allowed destinations: {}.", names.join(", "));
    }
}

/// Replaces anything that may not appear in a header value with `?`.
fn header_safe(s: &str) -> String {
    s.chars().map(|c| if c == ' ' || c.is_ascii_graphic() { c } else { '?' }).collect()
}

/// Shortens and escapes untrusted input for a message.
pub(crate) fn quote(input: &[u8]) -> String {
    let shown = &input[..input.len().min(80)];
    let mut s = format!("{:?}", String::from_utf8_lossy(shown));
    if input.len() > shown.len() {
        s.push_str("...");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandgate_config::{DomainPattern, NetMode, PatternUse};

    fn policy() -> NetworkPolicy {
        let rule = |p: &str, u| Rule {
            pattern: Some(DomainPattern::parse(p, u).unwrap()),
            source: RuleSource::CommandLine,
        };
        NetworkPolicy::new(
            "net",
            NetMode::Proxy,
            vec![rule("crates.io", PatternUse::Allow), rule("*.github.com", PatternUse::Allow)],
            vec![rule("evil.example", PatternUse::Deny)],
        )
    }

    #[test]
    fn deny_body_names_target_rule_allowlist_and_remedy() {
        let p = policy();
        let rule = p.deny_rules()[0].clone();
        let r = render_refusal(&Refusal::Deny { target: "evil.example:443".into(), rule }, &p);
        assert_eq!(r.status, 403);
        assert_eq!(
            r.headers[0],
            ("X-Sandgate-Decision", "deny; rule=deny evil.example (command line)".into())
        );
        assert_eq!(
            r.body,
            "sandgate blocked the connection to evil.example:443.\n\
             Rule: deny evil.example (command line).\n\
             Allowed destinations: crates.io, *.github.com.\n\
             A deny rule wins over every allow rule and grant; only the person running the \
             sandbox can change it (in sandgate's configuration, outside the sandbox).\n"
        );
        let bytes = String::from_utf8(r.to_bytes()).unwrap();
        assert!(bytes.starts_with(
            "HTTP/1.1 403 Blocked by sandgate: deny rule\r\nX-Sandgate-Decision: deny; rule="
        ));
        assert!(bytes.ends_with(&r.body));
    }

    #[test]
    fn a_persons_deny_grant_says_a_person_denied_it() {
        let p = policy();
        let rule = Arc::new(Rule {
            pattern: Some(DomainPattern::parse("pypi.org", PatternUse::Deny).unwrap()),
            source: RuleSource::Grant("denied for this session in the CLI by alice".into()),
        });
        let r = render_refusal(&Refusal::Deny { target: "pypi.org:443".into(), rule }, &p);
        assert_eq!(r.status, 403);
        assert_eq!(
            r.body,
            "sandgate blocked the connection to pypi.org:443.\n\
             Rule: deny pypi.org (grant denied for this session in the CLI by alice).\n\
             Allowed destinations: crates.io, *.github.com.\n\
             A person denied it, and their answer covers this request. Do not retry; ask the \
             person if you need it and explain why.\n"
        );
    }

    #[test]
    fn timeout_body_says_how_to_ask() {
        let r = render_refusal(
            &Refusal::AskTimedOut { target: "pypi.org:443".into(), after: Duration::from_secs(60) },
            &policy(),
        );
        assert_eq!(r.headers[0].1, "deny; rule=approval timed out");
        assert!(r.body.contains("within 60s (the request timed out)"), "{}", r.body);
        assert!(r.body.contains("`sandgate allow pypi.org:443`"), "{}", r.body);
        // A retry asks again (issue 17): the body must not promise it is refused.
        assert!(!r.body.contains("refused the same way"), "{}", r.body);
        assert!(r.body.contains("A retry puts the question to them again"), "{}", r.body);
    }

    #[test]
    fn over_budget_body_says_nobody_was_asked() {
        let r = render_refusal(
            &Refusal::OverBudget {
                target: "x.example:443".into(),
                limit: 20,
                window: Duration::from_secs(60),
            },
            &policy(),
        );
        assert_eq!(r.status, 403);
        assert_eq!(r.headers[0].1, "deny; rule=question budget spent");
        assert!(r.body.contains("already asked 20 questions in the last 60s"), "{}", r.body);
        assert!(r.body.contains("Do not try other hosts"), "{}", r.body);
    }

    #[test]
    fn every_refusal_names_sandgate_in_its_reason_phrase() {
        let p = policy();
        let t = || "pypi.org:443".to_string();
        let grant = Arc::new(Rule { pattern: None, source: RuleSource::Grant("g".into()) });
        let rows = [
            (
                Refusal::Deny { target: t(), rule: p.deny_rules()[0].clone() },
                "Blocked by sandgate: deny rule",
            ),
            (Refusal::Deny { target: t(), rule: grant }, "Blocked by sandgate: denied by a person"),
            (Refusal::Denied { target: t() }, "Blocked by sandgate: denied by a person"),
            (
                Refusal::AskTimedOut { target: t(), after: Duration::from_secs(60) },
                "Blocked by sandgate: not in allowlist (approval timed out)",
            ),
            (
                Refusal::TooManyQuestions { target: t(), open: 16 },
                "Blocked by sandgate: not in allowlist (too many questions open)",
            ),
            (
                Refusal::NoApprover { target: t() },
                "Blocked by sandgate: not in allowlist (no approver running)",
            ),
            (
                Refusal::Unattended { target: t() },
                "Blocked by sandgate: not in allowlist (unattended run, nobody asked)",
            ),
            (
                Refusal::Deny {
                    target: t(),
                    rule: Arc::new(Rule {
                        pattern: None,
                        source: RuleSource::ManagedCeiling("/etc/sandgate/managed.toml".into()),
                    }),
                },
                "Blocked by sandgate: blocked by your organisation's policy",
            ),
            (
                Refusal::ForbiddenAddress {
                    target: t(),
                    ip: [127, 0, 0, 1].into(),
                    why: Forbidden::Loopback,
                },
                "Blocked by sandgate: resolves to a loopback address",
            ),
            (
                Refusal::NotGiven { target: "198.18.0.9:443".into() },
                "Blocked by sandgate: address never given to this sandbox",
            ),
            (
                Refusal::Unauthenticated,
                "Proxy Authentication Required by sandgate: proxy token missing",
            ),
            (Refusal::OriginForm, "Bad request to sandgate: not a proxy request"),
            (
                Refusal::Unreachable { target: t(), error: "x".into() },
                "Bad Gateway (allowed by sandgate): upstream unreachable",
            ),
        ];
        for (r, want) in rows {
            let rendered = render_refusal(&r, &p);
            assert_eq!(rendered.reason, want, "{r:?}");
            let line = format!("HTTP/1.1 {} {want}\r\n", r.status());
            assert!(String::from_utf8(rendered.to_bytes()).unwrap().starts_with(&line));
        }
    }

    /// The managed layer's refusal tells the model that nobody here can allow it (so it does not
    /// ask a person who cannot), and an unattended run's that nobody was asked.
    #[test]
    fn managed_and_unattended_bodies_say_who_can_change_it() {
        let p = policy();
        let managed = Arc::new(Rule {
            pattern: Some(DomainPattern::parse("pypi.org", PatternUse::Deny).unwrap()),
            source: RuleSource::Managed { path: "/etc/sandgate/managed.toml".into(), line: 2 },
        });
        let r = render_refusal(&Refusal::Deny { target: "pypi.org:443".into(), rule: managed }, &p);
        assert!(r.body.contains("blocked by your organisation's policy"), "{}", r.body);
        assert!(r.body.contains("/etc/sandgate/managed.toml:2"), "{}", r.body);
        assert!(!r.body.contains("sandgate allow"), "nobody here can allow it: {}", r.body);
        let r = render_refusal(&Refusal::Unattended { target: "pypi.org:443".into() }, &p);
        assert!(r.body.contains("unattended") && r.body.contains("log --summary"), "{}", r.body);
        let decision = r.headers.iter().find(|(k, _)| *k == "X-Sandgate-Decision").unwrap();
        assert!(decision.1.contains(Refusal::UNATTENDED), "{decision:?}");
    }

    /// Issue 32, part 3: a grant is an allowed destination too (the list named only the
    /// policy's patterns, so a model was told `none` while its grants were in force).
    #[test]
    fn the_allowed_destinations_include_grants() {
        let r = Refusal::Denied { target: "x.example:443".into() };
        let granted = vec!["pypi.org:443".to_owned(), "crates.io".to_owned()];
        let body = render_refusal_with_grants(&r, &policy(), &granted).body;
        assert!(
            body.contains(
                "Allowed destinations: crates.io, *.github.com, pypi.org:443 (granted).\n"
            ),
            "{body}"
        );
        let none = NetworkPolicy::new("net", NetMode::Proxy, vec![], vec![]);
        let body = render_refusal_with_grants(&r, &none, &granted[..1]).body;
        assert!(body.contains("Allowed destinations: pypi.org:443 (granted).\n"), "{body}");
        assert!(render_refusal(&r, &none).body.contains("Allowed destinations: none.\n"));
        let many: Vec<String> = (0..20).map(|i| format!("h{i}.example")).collect();
        let body = render_refusal_with_grants(&r, &policy(), &many).body;
        assert!(body.contains("Allowed destinations (first 12 of 22): crates.io,"), "{body}");
    }

    /// Issue 32, part 3: a refusal by the address guard says that allowing the name does not
    /// help and how to allow the address itself; its rule is the guard's.
    #[test]
    fn a_guard_refusal_says_how_to_allow_the_address_itself() {
        let rows = [
            ("rebind.test:8080", IpAddr::from([127, 0, 0, 1]), "`sandgate allow 127.0.0.1:8080`"),
            ("v6.test:443", "fd00::1".parse().unwrap(), "`sandgate allow [fd00::1]:443`"),
        ];
        for (target, ip, allow) in rows {
            let why = crate::guard::classify(ip).unwrap();
            let r = Refusal::ForbiddenAddress { target: target.into(), ip, why };
            let rendered = render_refusal(&r, &policy());
            let body = &rendered.body;
            let host = target.rsplit_once(':').unwrap().0;
            assert!(body.contains(&format!("Allowing {host} (a rule, a grant")), "{body}");
            assert!(body.contains(allow), "{body}");
            assert!(body.contains(&format!("or {ip} in `[network] allow`")), "{body}");
            let rule = r.rule_text();
            assert_eq!(crate::guard::refusal_in_rule(&rule), Some((ip, why.to_string().as_str())));
            assert_eq!(rendered.headers[0].1, format!("deny; rule={rule}"));
        }
    }

    #[test]
    fn statuses() {
        assert_eq!(Refusal::OriginForm.status(), 400);
        assert_eq!(Refusal::Unauthenticated.status(), 407);
        let unreachable = Refusal::Unreachable { target: "a:1".into(), error: "refused".into() };
        assert_eq!(unreachable.status(), 502);
        let r = render_refusal(&Refusal::Unauthenticated, &policy());
        assert!(r.headers.iter().any(|(k, _)| *k == "Proxy-Authenticate"));
        assert_eq!(header_safe("a\r\nb\u{e9}"), "a??b?");
        assert_eq!(quote(b"a\0b"), "\"a\\0b\"");
    }
}
