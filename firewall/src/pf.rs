//! pf backend (macOS): one anchor per guest-user scope under `com.apple/`, which the stock
//! `/etc/pf.conf` evaluates (`anchor "com.apple/*"`) without being edited.
//!
//! Sequencing (tested on every OS with a [`RecordingRunner`](crate::RecordingRunner)):
//! - apply: `pfctl -E` once per scope (pf is reference counted; the token goes to the
//!   [`TokenStore`]), `ifconfig pflog0` (created with `ifconfig pflog0 create` when missing: XNU
//!   makes none by default, and a `log (to pflog0)` rule then logs nowhere), then
//!   `pfctl -a ANCHOR -f -` with the rules (an atomic replace of the anchor), then what pf
//!   evaluates before the fence is read back and checked ([`GuestAnchors::verify`],
//!   [`fence::verify`]): a tool that loaded its own pf.conf, a `pass out quick` before the
//!   anchor, an anchor whose name sorts before the fence's, `set skip`, `nat pass` leave the
//!   guest user unfenced, so apply fails loudly instead. The daemon (as root) runs the same check
//!   every [`fence::RECHECK_INTERVAL`] and says when a fence is gone;
//! - remove: `pfctl -a ANCHOR -F all` (and the anchor of an earlier release's name), then
//!   `pfctl -X TOKEN` and the token is forgotten;
//! - gc: anchors and stored tokens whose owner is gone are removed / released.
//!
//! pf can match `user` only for TCP and UDP, so ICMP of the guest user is not filtered by the
//! anchor (the nftables backend does filter it).

pub mod boot;
pub mod fence;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Mutex;

use crate::FirewallError;
use crate::guest::{Firewall, GuestPolicy, GuestScope, Installed, OwnerCheck, Plan};
use crate::runner::{CommandRunner, SystemRunner};

/// Parent anchor evaluated by the stock macOS pf.conf.
pub const PARENT_ANCHOR: &str = "com.apple";

/// First component of sandgate anchor names under [`PARENT_ANCHOR`]. pf evaluates the children
/// of `com.apple/*` in the order of their names: `0.` sorts before Apple's own (`100.`, `200.`,
/// `250.ApplicationFirewall`, ...), so the fence decides first (what could still sort before it
/// is checked by [`fence::verify`]).
pub const ANCHOR_PREFIX: &str = "0.sandgate.";

/// The prefix of earlier releases (`com.apple/sandgate.u501`): still recognised, so that
/// `remove` and `gc` clean such anchors up.
pub const LEGACY_ANCHOR_PREFIX: &str = "sandgate.";

/// Path of `pfctl`.
pub const PFCTL: &str = "/sbin/pfctl";

/// Path of `ifconfig`.
pub const IFCONFIG: &str = "/sbin/ifconfig";

/// The interface the anchor logs to.
pub const PFLOG_IF: &str = "pflog0";

/// The anchor of a scope: `com.apple/0.sandgate.u501` or `com.apple/0.sandgate.u501.p4242`.
///
/// pflog records the anchor's last component in a 16-byte field, so `0.sandgate.u501` is seen
/// whole and longer names are cut; the monitor attributes by uid as well.
pub fn anchor(scope: &GuestScope) -> String {
    format!("{PARENT_ANCHOR}/{ANCHOR_PREFIX}{}", scope.label('.'))
}

/// The scope of an anchor path made by [`anchor`] (or by an earlier release's name).
pub fn scope_of_anchor(path: &str) -> Option<GuestScope> {
    let child = path.strip_prefix(PARENT_ANCHOR)?.strip_prefix('/')?;
    let rest =
        child.strip_prefix(ANCHOR_PREFIX).or_else(|| child.strip_prefix(LEGACY_ANCHOR_PREFIX))?;
    GuestScope::parse_label(rest, '.')
}

/// The anchor's rules for a guest-user scope.
///
/// Proxies on loopback pass `on lo0`; everything else of the user's TCP and UDP (IPv4 and IPv6) is
/// blocked with `return` (RST / ICMP unreachable, so connects fail at once) and logged to `pflog0`
/// with the socket's uid (`log (user)`; XNU never fills the pid field, so the monitor attributes
/// by uid and anchor name).
pub fn guest_anchor_rules(scope: &GuestScope, policy: &GuestPolicy) -> String {
    let uid = scope.uid;
    let mut s = format!("# sandgate guest-user firewall: {scope}, anchor {}\n", anchor(scope));
    for proxy in &policy.proxies {
        let (af, on) = match (proxy.is_ipv6(), proxy.ip().is_loopback()) {
            (false, true) => ("inet", " on lo0"),
            (false, false) => ("inet", ""),
            (true, true) => ("inet6", " on lo0"),
            (true, false) => ("inet6", ""),
        };
        s.push_str(&format!(
            "pass out quick{on} {af} proto tcp from any to {} port {} user {uid}\n",
            proxy.ip(),
            proxy.port()
        ));
    }
    s.push_str(&format!(
        "block return out log (user, to pflog0) quick inet proto {{ tcp udp }} all user {uid}\n\
         block return out log (user, to pflog0) quick inet6 proto {{ tcp udp }} all user {uid}\n"
    ));
    s
}

/// Where the `pfctl -E` tokens of applied scopes are kept between runs (the store crate
/// implements this on SQLite; [`MemoryTokenStore`] is for tests and one-shot use).
pub trait TokenStore: Send + Sync {
    /// The token held for `scope`, if any.
    fn load(&self, scope: &GuestScope) -> Result<Option<String>, FirewallError>;
    /// Keeps `token` for `scope`, replacing an older one.
    fn save(&self, scope: &GuestScope, token: &str) -> Result<(), FirewallError>;
    /// Forgets the token of `scope`.
    fn forget(&self, scope: &GuestScope) -> Result<(), FirewallError>;
    /// Every scope with a token.
    fn scopes(&self) -> Result<Vec<GuestScope>, FirewallError>;
}

/// A [`TokenStore`] in memory.
#[derive(Debug, Default)]
pub struct MemoryTokenStore {
    tokens: Mutex<BTreeMap<GuestScope, String>>,
}

impl MemoryTokenStore {
    fn map(&self) -> std::sync::MutexGuard<'_, BTreeMap<GuestScope, String>> {
        self.tokens.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl TokenStore for MemoryTokenStore {
    fn load(&self, scope: &GuestScope) -> Result<Option<String>, FirewallError> {
        Ok(self.map().get(scope).cloned())
    }
    fn save(&self, scope: &GuestScope, token: &str) -> Result<(), FirewallError> {
        self.map().insert(*scope, token.to_owned());
        Ok(())
    }
    fn forget(&self, scope: &GuestScope) -> Result<(), FirewallError> {
        self.map().remove(scope);
        Ok(())
    }
    fn scopes(&self) -> Result<Vec<GuestScope>, FirewallError> {
        Ok(self.map().keys().copied().collect())
    }
}

/// A [`TokenStore`] keeping one file per scope in a directory (e.g. `/var/run/sandgate/pf-tokens`,
/// which macOS clears at boot, exactly when pf forgets its tokens).
#[derive(Debug, Clone)]
pub struct FileTokenStore {
    dir: std::path::PathBuf,
}

impl FileTokenStore {
    /// A store in `dir` (created on first save).
    pub fn new(dir: impl Into<std::path::PathBuf>) -> Self {
        FileTokenStore { dir: dir.into() }
    }

    fn path(&self, scope: &GuestScope) -> std::path::PathBuf {
        self.dir.join(scope.label('.'))
    }
}

fn store_err(what: &str, path: &std::path::Path, e: std::io::Error) -> FirewallError {
    FirewallError::TokenStore(format!("{what} {}: {e}", path.display()))
}

impl TokenStore for FileTokenStore {
    fn load(&self, scope: &GuestScope) -> Result<Option<String>, FirewallError> {
        let path = self.path(scope);
        match std::fs::read_to_string(&path) {
            Ok(t) => Ok(Some(t.trim().to_owned()).filter(|t| !t.is_empty())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(store_err("read", &path, e)),
        }
    }
    fn save(&self, scope: &GuestScope, token: &str) -> Result<(), FirewallError> {
        std::fs::create_dir_all(&self.dir).map_err(|e| store_err("create", &self.dir, e))?;
        let path = self.path(scope);
        std::fs::write(&path, token).map_err(|e| store_err("write", &path, e))
    }
    fn forget(&self, scope: &GuestScope) -> Result<(), FirewallError> {
        let path = self.path(scope);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(store_err("remove", &path, e)),
        }
    }
    fn scopes(&self) -> Result<Vec<GuestScope>, FirewallError> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(store_err("list", &self.dir, e)),
        };
        let mut scopes: Vec<GuestScope> = entries
            .filter_map(|e| e.ok())
            .filter_map(|e| GuestScope::parse_label(e.file_name().to_str()?, '.'))
            .collect();
        scopes.sort();
        Ok(scopes)
    }
}

/// The token in `pfctl -E` output (`Token : 12345678901234567890`, on stderr or stdout).
pub fn parse_enable_token(output: &str) -> Option<String> {
    output.lines().find_map(|l| {
        let (key, value) = l.split_once(':')?;
        let value = value.trim();
        (key.trim() == "Token" && !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()))
            .then(|| value.to_owned())
    })
}

/// Checks `pfctl -s rules` output of the main ruleset for the guest `uid`: `anchor
/// "com.apple/*"` must be there, for outgoing traffic on every interface, and no `pass ...
/// quick` rule that may match the guest's traffic may come before it ([`fence::check_main`]).
pub fn check_main_ruleset(rules: &str, uid: u32) -> Result<(), FirewallError> {
    let findings = fence::check_main(&fence::Snapshot::parse(rules).rules, uid);
    if findings.is_empty() { Ok(()) } else { Err(fence_open(&findings, rules)) }
}

fn fence_open(findings: &[fence::Finding], rules: &str) -> FirewallError {
    let why: Vec<String> = findings.iter().map(ToString::to_string).collect();
    FirewallError::AnchorNotEvaluated { why: why.join("; "), rules: rules.trim().to_owned() }
}

/// Refuses to fence in `uid` when it is one of `own` (the daemon's uid, the caller's): the proxy
/// itself runs as that user, and its own connections upstream would be blocked with the rest.
pub fn refuse_own_uid(uid: u32, own: &[u32]) -> Result<(), FirewallError> {
    if own.contains(&uid) {
        return Err(FirewallError::Invalid {
            what: format!(
                "uid {uid} runs the sandgate daemon (or this command): its rules would block the \
                 proxy's own connections; fence in a separate guest user"
            ),
        });
    }
    Ok(())
}

/// Anchor paths in `pfctl -a com.apple -s Anchors` output.
pub fn parse_anchors(output: &str) -> Vec<String> {
    output.lines().map(str::trim).filter(|l| !l.is_empty()).map(str::to_owned).collect()
}

/// The pf [`Firewall`] backend.
#[derive(Debug)]
pub struct GuestAnchors<T, R = SystemRunner> {
    runner: R,
    tokens: T,
}

impl<T: TokenStore> GuestAnchors<T, SystemRunner> {
    /// A backend that runs the real `pfctl`.
    pub fn system(tokens: T) -> Self {
        GuestAnchors { runner: SystemRunner, tokens }
    }
}

impl<T: TokenStore, R: CommandRunner> GuestAnchors<T, R> {
    /// A backend that runs commands through `runner` and keeps tokens in `tokens`.
    pub fn new(runner: R, tokens: T) -> Self {
        GuestAnchors { runner, tokens }
    }

    /// The runner (tests inspect a recording runner through this).
    pub fn runner(&self) -> &R {
        &self.runner
    }

    /// The token store.
    pub fn tokens(&self) -> &T {
        &self.tokens
    }

    fn pfctl(&self, args: &[&str], stdin: Option<&str>) -> Result<String, FirewallError> {
        let out = self.runner.run(PFCTL, args, stdin)?;
        Ok(format!("{}{}", out.stdout, out.stderr))
    }

    fn installed_anchors(&self) -> Result<Vec<(GuestScope, String)>, FirewallError> {
        let out = self.runner.run(PFCTL, &["-a", PARENT_ANCHOR, "-s", "Anchors"], None)?;
        Ok(parse_anchors(&out.stdout)
            .into_iter()
            .filter_map(|a| scope_of_anchor(&a).map(|s| (s, a)))
            .collect())
    }

    /// Creates `pflog0` when it does not exist (the anchor's `log (to pflog0)` needs it, and the
    /// daemon's monitor reads it).
    fn ensure_pflog(&self) -> Result<(), FirewallError> {
        if self.runner.run(IFCONFIG, &[PFLOG_IF], None).is_ok() {
            return Ok(());
        }
        self.runner.run(IFCONFIG, &[PFLOG_IF, "create"], None).map(drop)
    }

    /// Releases the scope's pf enable token, if one is held.
    fn release(&self, scope: &GuestScope) -> Result<bool, FirewallError> {
        let Some(token) = self.tokens.load(scope)? else { return Ok(false) };
        match self.pfctl(&["-X", &token], None) {
            Ok(_) => {}
            // A token pf no longer knows (reboot) is as good as released.
            Err(FirewallError::Command { ref stderr, .. }) if is_unknown_token(stderr) => {}
            Err(e) => return Err(e),
        }
        self.tokens.forget(scope)?;
        Ok(true)
    }
}

impl<T: TokenStore, R: CommandRunner> GuestAnchors<T, R> {
    /// Whether the fence of `scope` holds now: what pf evaluates before it, read with `pfctl`
    /// (`-s rules`, `-s nat`, `-s info`, `-s Interfaces -v`, the anchors under `com.apple` up to
    /// the fence's) and checked by [`fence::verify`].
    pub fn verify(&self, scope: &GuestScope) -> Result<fence::FenceVerdict, FirewallError> {
        self.verify_with_rules(scope).map(|(v, _)| v)
    }

    /// [`GuestAnchors::verify`], and the main ruleset it read.
    fn verify_with_rules(
        &self,
        scope: &GuestScope,
    ) -> Result<(fence::FenceVerdict, String), FirewallError> {
        let show = |what: &str| self.runner.run(PFCTL, &["-s", what], None).map(|o| o.stdout);
        let main = show("rules")?;
        let nat = show("nat")?;
        let info = show("info")?;
        let interfaces = self.runner.run(PFCTL, &["-s", "Interfaces", "-v"], None)?.stdout;
        let ours = anchor(scope);
        let ours_child = ours.rsplit('/').next().unwrap_or(&ours).to_owned();
        let listed = self.runner.run(PFCTL, &["-a", PARENT_ANCHOR, "-s", "Anchors"], None)?;
        let mut children = Vec::new();
        for path in parse_anchors(&listed.stdout) {
            let Some(child) = path.strip_prefix(PARENT_ANCHOR).and_then(|c| c.strip_prefix('/'))
            else {
                continue;
            };
            // Anchors after the fence's name are evaluated after it: they cannot undo it.
            if child > ours_child.as_str() {
                continue;
            }
            let rules = self.runner.run(PFCTL, &["-a", &path, "-s", "rules"], None)?.stdout;
            children.push((child.to_owned(), rules));
        }
        let mut snap = fence::Snapshot::parse(&main).with_children(&children);
        snap.enabled = fence::Snapshot::parse(&info).enabled;
        snap.skipped = fence::Snapshot::parse(&interfaces).skipped;
        snap.nat = fence::Snapshot::parse(&format!("TRANSLATION RULES:\n{nat}")).nat;
        Ok((fence::verify(&snap, &ours_child, scope.uid), main))
    }

    /// The scopes of the fences installed on this host (anchors under `com.apple/`).
    pub fn installed_scopes(&self) -> Result<Vec<GuestScope>, FirewallError> {
        Ok(self.installed_anchors()?.into_iter().map(|(s, _)| s).collect())
    }
}

fn is_unknown_token(stderr: &str) -> bool {
    let s = stderr.to_ascii_lowercase();
    s.contains("invalid token") || s.contains("no such") || s.contains("not found")
}

impl<T: TokenStore, R: CommandRunner> Firewall for GuestAnchors<T, R> {
    fn plan(&self, scope: &GuestScope, policy: &GuestPolicy) -> Result<Plan, FirewallError> {
        Ok(Plan { scope: *scope, name: anchor(scope), text: guest_anchor_rules(scope, policy) })
    }

    fn apply(&self, plan: &Plan) -> Result<(), FirewallError> {
        if self.tokens.load(&plan.scope)?.is_none() {
            let out = self.pfctl(&["-E"], None)?;
            let token = parse_enable_token(&out).ok_or_else(|| FirewallError::Parse {
                command: format!("{PFCTL} -E"),
                what: format!("no `Token : N` line in {out:?}"),
            })?;
            self.tokens.save(&plan.scope, &token)?;
        }
        self.ensure_pflog()?;
        self.pfctl(&["-a", &plan.name, "-f", "-"], Some(&plan.text))?;
        let (verdict, main) = self.verify_with_rules(&plan.scope)?;
        match verdict {
            fence::FenceVerdict::Hold => Ok(()),
            fence::FenceVerdict::Leak(findings) => Err(fence_open(&findings, &main)),
        }
    }

    fn allow(&self, scope: &GuestScope, addr: SocketAddr) -> Result<(), FirewallError> {
        Err(FirewallError::Invalid {
            what: format!(
                "pf anchors have no sets here: re-plan {scope} with proxy {addr} and apply \
                 (an anchor reload is atomic)"
            ),
        })
    }

    fn disallow(&self, scope: &GuestScope, addr: SocketAddr) -> Result<(), FirewallError> {
        self.allow(scope, addr)
    }

    fn remove_plan(&self, scope: &GuestScope) -> String {
        format!("{PFCTL} -a {} -F all\n{PFCTL} -X <token of {scope}>\n", anchor(scope))
    }

    fn remove(&self, scope: &GuestScope) -> Result<bool, FirewallError> {
        // Its anchor under either name (an earlier release's, then this one's).
        let mut present = false;
        for (_, name) in self.installed_anchors()?.iter().filter(|(s, _)| s == scope) {
            self.pfctl(&["-a", name, "-F", "all"], None)?;
            present = true;
        }
        let released = self.release(scope)?;
        Ok(present || released)
    }

    fn list(&self) -> Result<Vec<Installed>, FirewallError> {
        let mut found = Vec::new();
        for (scope, name) in self.installed_anchors()? {
            let out = self.runner.run(PFCTL, &["-a", &name, "-s", "rules"], None)?;
            found.push(Installed { scope, name, rules: out.stdout });
        }
        Ok(found)
    }

    fn findings(&self, scope: &GuestScope) -> Result<Vec<String>, FirewallError> {
        Ok(self.verify(scope)?.findings().iter().map(ToString::to_string).collect())
    }

    fn gc(&self, owners: &dyn OwnerCheck) -> Result<Vec<GuestScope>, FirewallError> {
        let mut removed = Vec::new();
        for (scope, _) in self.installed_anchors()? {
            if scope.is_stale(owners) && self.remove(&scope)? {
                removed.push(scope);
            }
        }
        // Tokens whose anchor is already gone (flushed by hand, lost at reboot).
        for scope in self.tokens.scopes()? {
            if scope.is_stale(owners) && !removed.contains(&scope) && self.release(&scope)? {
                removed.push(scope);
            }
        }
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anchors_round_trip() {
        for (scope, path) in [
            (GuestScope::user(501), "com.apple/0.sandgate.u501"),
            (GuestScope::owned_by(501, 42), "com.apple/0.sandgate.u501.p42"),
        ] {
            assert_eq!(anchor(&scope), path);
            assert_eq!(scope_of_anchor(path), Some(scope));
        }
        // an earlier release's name, for remove and gc
        assert_eq!(scope_of_anchor("com.apple/sandgate.u501"), Some(GuestScope::user(501)));
        // the fence sorts before Apple's anchors (pf evaluates them by name)
        assert!(anchor(&GuestScope::user(501)).as_str() < "com.apple/100.InternetSharing");
        for foreign in ["com.apple/250.ApplicationFirewall", "sandgate.u1", "com.apple/sandgate.x"]
        {
            assert_eq!(scope_of_anchor(foreign), None);
        }
    }

    #[test]
    fn file_token_store_round_trips() {
        let dir = std::env::temp_dir().join(format!("sg-pf-tokens-{}", std::process::id()));
        let store = FileTokenStore::new(&dir);
        assert_eq!(store.load(&GuestScope::user(1)).unwrap(), None);
        store.save(&GuestScope::user(1), "11").unwrap();
        store.save(&GuestScope::owned_by(2, 3), "23").unwrap();
        assert_eq!(store.load(&GuestScope::user(1)).unwrap().as_deref(), Some("11"));
        assert_eq!(store.scopes().unwrap(), [GuestScope::user(1), GuestScope::owned_by(2, 3)]);
        store.forget(&GuestScope::user(1)).unwrap();
        store.forget(&GuestScope::user(1)).unwrap();
        assert_eq!(store.scopes().unwrap(), [GuestScope::owned_by(2, 3)]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Only a missing token (or directory) is "none"; a store that cannot be read fails, so that
    /// a token is never taken for absent and pf enabled once more than it is released.
    #[test]
    fn a_token_store_that_cannot_be_read_fails_loudly() {
        let missing = std::env::temp_dir().join(format!("sg-pf-none-{}", std::process::id()));
        assert_eq!(FileTokenStore::new(&missing).scopes().unwrap(), []);
        // A file where the directory should be: every call fails with "not a directory".
        let file = std::env::temp_dir().join(format!("sg-pf-file-{}", std::process::id()));
        std::fs::write(&file, "").unwrap();
        let store = FileTokenStore::new(&file);
        let scope = GuestScope::user(1);
        assert!(store.load(&scope).is_err());
        assert!(store.forget(&scope).is_err());
        assert!(store.scopes().is_err());
        let _ = std::fs::remove_file(&file);
    }

    #[test]
    fn the_main_ruleset_check_names_the_rule() {
        let err = check_main_ruleset("pass out quick all\nanchor \"com.apple/*\" all\n", 501)
            .unwrap_err()
            .to_string();
        assert!(err.contains("`pass out quick all`") && err.contains("NOT fenced in"), "{err}");
        assert!(check_main_ruleset("anchor \"com.apple/*\" all\n", 501).is_ok());
    }

    #[test]
    fn the_daemons_own_uid_is_refused() {
        assert!(refuse_own_uid(501, &[501, 0]).is_err());
        assert!(refuse_own_uid(502, &[501, 0]).is_ok());
    }

    #[test]
    fn enable_token() {
        for (out, want) in [
            ("No ALTQ support in kernel\npf enabled\nToken : 1234567890\n", Some("1234567890")),
            ("Token:42", Some("42")),
            ("Token : \n", None),
            ("Token : abc\n", None),
            ("pf already enabled\n", None),
        ] {
            assert_eq!(parse_enable_token(out).as_deref(), want, "{out:?}");
        }
    }
}
