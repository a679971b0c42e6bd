//! What a sandbox must not see by default: the home directory's dot-entries outside an allowlist
//! of non-secret tool directories, well-known secret files elsewhere, secret-looking environment
//! variables, and the parts of sandgate's own configuration that hold secrets.
//!
//! The lists are data (`config/data/*.txt`, one entry a line with a comment saying why); this
//! module parses them and decides. Walking the home directory and mounting is the launcher's job.

use std::borrow::Cow;
use std::ffi::OsStr;
use std::ops::Range;

/// The built-in allowlist of the home directory (see the file for its syntax).
pub const HOME_READABLE: &str = include_str!("../data/home_readable.txt");
/// The built-in list of secret files outside the home directory.
pub const SYSTEM_SECRETS: &str = include_str!("../data/system_secrets.txt");
/// The built-in patterns of secret-looking environment variable names.
pub const SECRET_ENV: &str = include_str!("../data/secret_env.txt");

/// The entries of a data file: each line without its comment, trimmed, empty lines skipped.
/// (Every launch reads the built-in lists: `#` is found with `memchr` and the trim is ASCII's;
/// a character-by-character split and trim were a fifth of the home allowlist's making.)
pub fn data_entries(text: &str) -> impl Iterator<Item = &str> {
    text.lines().map(|l| l.find('#').map_or(l, |i| &l[..i]).trim_ascii()).filter(|l| !l.is_empty())
}

/// Whether `name` matches `pattern`, where `*` stands for any run of characters (also none).
pub fn wildcard(pattern: &[u8], name: &[u8]) -> bool {
    Glob::new(pattern).matches(name)
}

/// A pattern where `*` stands for any run of characters, split at its stars while matching:
/// every launch builds the home allowlist (~110 patterns) and the secret-variable filter, and
/// building them was more work than all the matching they do. A built-in pattern borrows the
/// list's text (no allocation); one from the configuration owns a copy. Where its first and last
/// stars are is found once, when it is made: matching is then a prefix and a suffix compare for
/// most patterns (every launch matches each environment variable against the secret patterns,
/// and each home entry against the allowlist).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Glob {
    pattern: Cow<'static, [u8]>,
    /// Positions of the first and the last `*`; `None`: a literal.
    stars: Option<(usize, usize)>,
}

impl Glob {
    fn new(pattern: &[u8]) -> Glob {
        Glob::of(Cow::Owned(pattern.to_vec()))
    }

    fn of(pattern: Cow<'static, [u8]>) -> Glob {
        let first = pattern.iter().position(|&b| b == b'*');
        let last = pattern.iter().rposition(|&b| b == b'*');
        Glob { pattern, stars: first.zip(last) }
    }

    /// `pattern` upper-cased, borrowed when it is already (the built-in lists are).
    fn upper(pattern: Cow<'static, [u8]>) -> Glob {
        if pattern.iter().any(u8::is_ascii_lowercase) {
            Glob::of(Cow::Owned(pattern.to_ascii_uppercase()))
        } else {
            Glob::of(pattern)
        }
    }

    /// The pattern itself when it has no `*`.
    fn literal(&self) -> Option<&[u8]> {
        self.stars.is_none().then_some(&self.pattern)
    }

    fn matches(&self, name: &[u8]) -> bool {
        let p = &*self.pattern;
        let Some((first_star, last_star)) = self.stars else {
            return p == name;
        };
        let (first, last) = (&p[..first_star], &p[last_star + 1..]);
        if name.len() < first.len() + last.len()
            || !name.starts_with(first)
            || !name.ends_with(last)
        {
            return false;
        }
        // The parts between the stars, leftmost first (enough for patterns of stars only).
        let mut rest = &name[first.len()..name.len() - last.len()];
        if first_star < last_star {
            for mid in p[first_star + 1..last_star].split(|&b| b == b'*').filter(|m| !m.is_empty())
            {
                // First byte first: most windows differ there (a call to compare each
                // window made the secret-variable filter the launcher's biggest loop).
                match rest.windows(mid.len()).position(|w| w[0] == mid[0] && w == mid) {
                    Some(i) => rest = &rest[i + mid.len()..],
                    None => return false,
                }
            }
        }
        true
    }
}

/// What the home directory allowlist says of one entry (a path relative to the home directory).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HomeVerdict {
    /// Readable, with everything below it but the exceptions ([`HomeAllowlist::exceptions`]).
    Read,
    /// A directory the list looks into: its entries are decided one by one.
    Descend,
    /// Hidden.
    Hide,
}

/// The allowlist of the home directory: built-in entries plus `[filesystem] readable_home`.
///
/// Precedence: an entry named (or matched by a `*` pattern) is readable; an entry above a named
/// one is looked into; everything else is hidden. `!` exceptions are hidden inside readable
/// entries. Only the home directory's dot-entries are decided; its other entries stay readable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HomeAllowlist {
    /// The components of every readable pattern, one after the other (one allocation for the
    /// whole list, not one per pattern).
    globs: Vec<Glob>,
    /// Each readable pattern: its components' range in `globs` (never empty).
    read: Vec<Range<usize>>,
    /// Indexes into `read` of the patterns with a literal first component, sorted by it (found
    /// by binary search; a map cost two allocations and a hash per pattern at every launch);
    /// the rest (a `*` in the first component) are tried for every entry.
    by_first: Vec<usize>,
    starred: Vec<usize>,
    hide: Vec<Vec<String>>,
}

fn components(path: &str) -> Vec<String> {
    path.split('/').filter(|c| !c.is_empty()).map(str::to_owned).collect()
}

/// The components of `path` appended to `globs` as patterns; their range (empty for no
/// component).
fn push_globs<'a>(
    globs: &mut Vec<Glob>,
    path: &'a str,
    make: impl Fn(&'a str) -> Cow<'static, [u8]>,
) -> Range<usize> {
    let start = globs.len();
    globs.extend(path.split('/').filter(|c| !c.is_empty()).map(|c| Glob::of(make(c))));
    start..globs.len()
}

fn matches_prefix(pattern: &[Glob], rel: &[&OsStr]) -> bool {
    if pattern.len() < rel.len() {
        return false;
    }
    for (p, r) in pattern.iter().zip(rel) {
        if !p.matches(r.as_encoded_bytes()) {
            return false;
        }
    }
    true
}

impl HomeAllowlist {
    /// The built-in list with `extra` entries (each relative to the home directory, `~/` allowed).
    pub fn new(extra: &[String]) -> HomeAllowlist {
        let mut list = HomeAllowlist {
            globs: Vec::with_capacity(160),
            read: Vec::with_capacity(128),
            by_first: Vec::with_capacity(128),
            starred: Vec::new(),
            hide: Vec::new(),
        };
        for e in data_entries(HOME_READABLE) {
            match e.strip_prefix('!') {
                Some(h) => list.hide.push(components(h)),
                None => {
                    let r = push_globs(&mut list.globs, e, |c| Cow::Borrowed(c.as_bytes()));
                    list.read.push(r);
                }
            }
        }
        for e in extra {
            let e = e.strip_prefix("~/").unwrap_or(e);
            let r = push_globs(&mut list.globs, e, |c| Cow::Owned(c.as_bytes().to_vec()));
            list.read.push(r);
        }
        list.read.retain(|r| !r.is_empty());
        for (i, r) in list.read.iter().enumerate() {
            match list.globs[r.start].literal() {
                Some(_) => list.by_first.push(i),
                None => list.starred.push(i),
            }
        }
        let first_of = |i: usize| &*list.globs[list.read[i].start].pattern;
        let mut by_first = std::mem::take(&mut list.by_first);
        by_first.sort_unstable_by(|&a, &b| first_of(a).cmp(first_of(b)).then(a.cmp(&b)));
        list.by_first = by_first;
        list
    }

    /// The verdict for the entry at `rel` (components relative to the home directory).
    pub fn verdict(&self, rel: &[&OsStr]) -> HomeVerdict {
        let Some(first) = rel.first() else { return HomeVerdict::Descend };
        let key = first.as_encoded_bytes();
        let first_of = |i: &usize| &*self.globs[self.read[*i].start].pattern;
        let from = self.by_first.partition_point(|i| first_of(i) < key);
        let literal = &self.by_first[from..];
        let literal = &literal[..literal.partition_point(|i| first_of(i) == key)];
        let candidates =
            literal.iter().chain(&self.starred).map(|&i| &self.globs[self.read[i].clone()]);
        let mut verdict = HomeVerdict::Hide;
        for p in candidates.filter(|p| matches_prefix(p, rel)) {
            if p.len() == rel.len() {
                return HomeVerdict::Read;
            }
            verdict = HomeVerdict::Descend;
        }
        verdict
    }

    /// The exceptions: patterns (components relative to the home directory) hidden even inside
    /// readable entries.
    pub fn exceptions(&self) -> &[Vec<String>] {
        &self.hide
    }
}

/// Checks a `[filesystem] readable_home` entry: a relative path inside the home directory.
pub(crate) fn check_home_entry(entry: &str) -> Result<String, &'static str> {
    let e = entry.strip_prefix("~/").unwrap_or(entry);
    if e.is_empty() || e.starts_with('/') || e.starts_with('!') {
        return Err("must be a path relative to the home directory, e.g. \".sdkman\"");
    }
    if e.split('/').any(|c| c == ".." || c == ".") {
        return Err("must not contain `.` or `..` components");
    }
    Ok(e.trim_end_matches('/').to_owned())
}

/// Which environment variables are secret-looking, and which of them `[env] pass` keeps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnvFilter {
    secret: Vec<Glob>,
    pass: Vec<Glob>,
}

impl EnvFilter {
    /// The built-in patterns, with `pass` (names or patterns) kept.
    pub fn new(pass: &[String]) -> EnvFilter {
        EnvFilter {
            secret: data_entries(SECRET_ENV)
                .map(|p| Glob::upper(Cow::Borrowed(p.as_bytes())))
                .collect(),
            pass: pass.iter().map(|p| Glob::upper(Cow::Owned(p.as_bytes().to_vec()))).collect(),
        }
    }

    /// Whether the variable `name` is removed (secret-looking and not passed). Case-insensitive.
    pub fn removes(&self, name: &OsStr) -> bool {
        let name = name.as_encoded_bytes();
        // Upper-cased on the stack for the usual short name (no allocation per variable).
        let mut short = [0u8; 64];
        let long;
        let upper: &[u8] = match short.get_mut(..name.len()) {
            Some(buf) => {
                buf.copy_from_slice(name);
                buf.make_ascii_uppercase();
                buf
            }
            None => {
                long = name.to_ascii_uppercase();
                &long
            }
        };
        let hit = |globs: &[Glob]| globs.iter().any(|g| g.matches(upper));
        hit(&self.secret) && !hit(&self.pass)
    }
}

/// The part of a configuration file a sandbox may see (for launches nested inside it): the
/// `[network]`, `[filesystem]`, `[env]` and `[tiers]` tables, without comments; `[daemon]` and
/// `[telegram]` (the bot token) and anything else are left out.
pub fn sanitized_config(text: &str) -> Result<String, String> {
    const KEPT: [&str; 4] = ["network", "filesystem", "env", "tiers"];
    let mut table: toml::Table = toml::from_str(text).map_err(|e| e.message().to_owned())?;
    table.retain(|k, _| KEPT.contains(&k));
    toml::to_string(&table).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `data_entries` trims ASCII whitespace only: the lists must be ASCII (a non-breaking space
    /// would stay in an entry).
    #[test]
    fn the_data_files_are_ascii() {
        for (name, text) in [
            ("home_readable", HOME_READABLE),
            ("system_secrets", SYSTEM_SECRETS),
            ("secret_env", SECRET_ENV),
        ] {
            assert!(text.is_ascii(), "{name}.txt holds a non-ASCII character");
        }
        let parsed: Vec<&str> = data_entries(" a  # x\n\n#only\nb#\n\tc\t\n").collect();
        assert_eq!(parsed, ["a", "b", "c"]);
    }

    #[test]
    fn every_data_entry_says_why() {
        for (name, text) in
            [("home", HOME_READABLE), ("system", SYSTEM_SECRETS), ("env", SECRET_ENV)]
        {
            for line in text.lines().filter(|l| !l.trim().is_empty() && !l.starts_with('#')) {
                let (entry, why) = line.split_once('#').unwrap_or((line, ""));
                assert!(!entry.trim().is_empty(), "{name}: {line:?}");
                assert!(why.trim().len() > 3, "{name}: no comment on {line:?}");
            }
        }
        for p in data_entries(SYSTEM_SECRETS) {
            assert!(p.starts_with('/'), "{p}");
        }
    }

    #[test]
    fn wildcards() {
        for (pat, name, want) in [
            ("*_TOKEN", "GH_TOKEN", true),
            ("*_TOKEN", "_TOKEN", true),
            ("*_TOKEN", "TOKEN", false),
            ("*_TOKEN", "GH_TOKENS", false),
            ("*PASSWORD*", "PASSWORD", true),
            ("*PASSWORD*", "DB_PASSWORD_FILE", true),
            ("GH_*", "GH_", true),
            ("GH_*", "XGH_", false),
            ("ssh_host_*_key", "ssh_host_ed25519_key", true),
            ("ssh_host_*_key", "ssh_host_ed25519_key.pub", false),
            (".zcompdump*", ".zcompdump-host-5.9", true),
            ("a*b*c", "aXbYbc", true),
            ("a*b*c", "aXbY", false),
            ("a*b*c", "abc", true),
            ("a*b*b*c", "abbc", true),
            ("a*b*b*c", "abc", false),
            ("a**c", "ac", true),
            ("*", "", true),
            ("**", "x", true),
            ("", "", true),
            ("", "x", false),
            ("abc", "abc", true),
            ("abc", "abcd", false),
            ("ab*ba", "aba", false),
        ] {
            assert_eq!(wildcard(pat.as_bytes(), name.as_bytes()), want, "{pat} {name}");
        }
    }

    fn verdict(list: &HomeAllowlist, rel: &str) -> HomeVerdict {
        let parts: Vec<&OsStr> = rel.split('/').map(OsStr::new).collect();
        list.verdict(&parts)
    }

    #[test]
    fn home_entries_are_hidden_unless_listed() {
        use HomeVerdict::*;
        let list = HomeAllowlist::new(&["~/.sdkman2".into(), ".config/mytool".into()]);
        for (rel, want) in [
            (".cargo", Read),
            (".rustup", Read),
            (".bashrc", Read),
            (".zcompdump-x-5.9", Read),
            (".config", Descend),
            (".local", Descend),
            (".local/share", Descend),
            (".local/share/uv", Descend),
            (".local/share/uv/python", Read),
            (".local/share/keyrings", Hide),
            (".local/state", Hide),
            (".config/nvim", Read),
            (".config/gh", Hide),
            (".config/hub", Hide),
            (".config/gcloud", Hide),
            (".config/containers", Hide),
            (".config/sandgate", Hide),
            (".config/mytool", Read),
            (".sdkman2", Read),
            (".ssh", Hide),
            (".aws", Hide),
            (".claude", Hide),
            (".codex", Hide),
            (".vault-token", Hide),
            (".pgpass", Hide),
            (".my.cnf", Hide),
            (".npmrc", Hide),
            (".netrc", Hide),
            (".docker", Hide),
            (".bash_history", Hide),
            (".git-credentials", Hide),
            (".cargo2", Hide),
        ] {
            assert_eq!(verdict(&list, rel), want, "{rel}");
        }
        // Every entry of the list reads as itself (found through the sorted index or, with a
        // star in its first component, the starred list).
        for e in data_entries(HOME_READABLE).filter(|e| !e.starts_with('!')) {
            let spelled = e.trim_end_matches('/').replace('*', "x");
            assert_eq!(verdict(&list, &spelled), Read, "{e}");
        }
        let exc: Vec<String> = list.exceptions().iter().map(|e| e.join("/")).collect();
        assert!(exc.contains(&".cargo/credentials.toml".to_owned()), "{exc:?}");
        assert!(exc.contains(&".cargo/credentials".to_owned()), "{exc:?}");
    }

    #[test]
    fn readable_home_entries_are_checked() {
        assert_eq!(check_home_entry("~/.sdkman/"), Ok(".sdkman".into()));
        assert_eq!(check_home_entry(".config/x"), Ok(".config/x".into()));
        for bad in ["", "/etc", "~/../x", ".config/../.ssh", "!.x", "./.ssh"] {
            assert!(check_home_entry(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn secret_looking_variables_are_removed_unless_passed() {
        let filter = EnvFilter::new(&["gh_token".into(), "MY_*".into()]);
        for (name, removed) in [
            ("GH_TOKEN", false),
            ("GITHUB_TOKEN", true),
            ("github_token", true),
            ("AWS_SECRET_ACCESS_KEY", true),
            ("AWS_ACCESS_KEY_ID", true),
            ("AWS_SESSION_TOKEN", true),
            ("ANTHROPIC_API_KEY", true),
            ("anthropic_api_key", true),
            ("OPENAI_APIKEY", true),
            ("PGPASSWORD", true),
            ("MYSQL_PWD", true),
            ("SSH_AUTH_SOCK", true),
            ("GPG_AGENT_INFO", true),
            ("GOOGLE_APPLICATION_CREDENTIALS", true),
            ("SANDGATE_TELEGRAM_TOKEN", true),
            ("DATABASE_URL", true),
            ("GH_HOST", true),
            ("MY_SECRET", false),
            ("PATH", false),
            ("HOME", false),
            ("PWD", false),
            ("OLDPWD", false),
            ("TERM", false),
            ("LANG", false),
            ("SHELL", false),
            ("USER", false),
            ("RUSTUP_TOOLCHAIN", false),
            ("CARGO_HOME", false),
            ("HTTP_PROXY", false),
            ("GIT_CONFIG_COUNT", false),
            ("SSH_CONNECTION", false),
        ] {
            assert_eq!(filter.removes(OsStr::new(name)), removed, "{name}");
        }
        // Names longer than the stack buffer the filter upper-cases into, and at its edge.
        for len in [63, 64, 65, 200] {
            let secret = format!("{}_token", "x".repeat(len - 6));
            let plain = "y".repeat(len);
            assert_eq!(secret.len(), len);
            assert!(filter.removes(OsStr::new(&secret)), "{len}: {secret}");
            assert!(!filter.removes(OsStr::new(&plain)), "{len}: {plain}");
        }
    }

    #[test]
    fn the_sanitized_config_keeps_policy_and_drops_secrets() {
        let text = "# token in a comment: 999:SECRET\n[network]\nallow = [\"a.com\"]\n\
                    [filesystem]\nreadable_home = [\".x\"]\n[env]\npass = [\"GH_TOKEN\"]\n\
                    [tiers.t]\nbase = \"run\"\n[daemon]\nask_timeout = \"5s\"\n\
                    [telegram]\ntoken = \"123:SECRET\"\nchats = [1]\n";
        let out = sanitized_config(text).unwrap();
        assert!(!out.contains("SECRET"), "{out}");
        assert!(!out.contains("telegram") && !out.contains("daemon"), "{out}");
        let f = crate::file::parse(std::path::Path::new("/c.toml"), &out, None).unwrap();
        assert_eq!(f.allow.len(), 1);
        assert_eq!(f.env_pass, vec!["GH_TOKEN".to_owned()]);
        assert_eq!(f.readable_home, vec![".x".to_owned()]);
        assert_eq!(f.tiers.len(), 1);
    }
}
