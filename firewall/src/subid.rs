//! The whole identity of a guest user: its uid plus the subordinate uid and gid ranges that
//! `newuidmap`/`newgidmap` (setuid root) let it map into a user namespace of its own.
//!
//! A process of the user that runs `unshare --user --map-auto --setuid 0` owns sockets whose
//! kernel uid is in its `/etc/subuid` range, not its uid, so a fence that matches only the uid
//! misses it. The ranges are read the way shadow's `newuidmap` reads them: an entry applies when
//! its owner field is the user's name *or* its numeric uid. [`SubIds::fingerprint`] lets an
//! applied fence be compared with the files later (ranges added after the fence was applied
//! escape it until it is applied again).

use std::fmt;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;
use sha2::{Digest, Sha256};

/// Where shadow keeps the subordinate uid ranges.
pub const SUBUID_FILE: &str = "/etc/subuid";
/// Where shadow keeps the subordinate gid ranges.
pub const SUBGID_FILE: &str = "/etc/subgid";
/// The name service switch file; a `subid:` line there can move the ranges out of the files.
pub const NSSWITCH_FILE: &str = "/etc/nsswitch.conf";

/// An inclusive range of ids, `first..=last`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct IdRange {
    /// First id of the range.
    pub first: u32,
    /// Last id of the range (inclusive).
    pub last: u32,
}

impl IdRange {
    /// The range `start .. start + count` of a subid entry; `None` when `count` is 0 or the range
    /// would pass `u32::MAX`.
    pub fn from_start_count(start: u32, count: u32) -> Option<IdRange> {
        let last = start.checked_add(count.checked_sub(1)?)?;
        Some(IdRange { first: start, last })
    }

    /// Whether `id` is in the range.
    pub fn contains(&self, id: u32) -> bool {
        (self.first..=self.last).contains(&id)
    }
}

impl fmt::Display for IdRange {
    /// nft set-element syntax: `7` or `100000-165535`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.first == self.last {
            write!(f, "{}", self.first)
        } else {
            write!(f, "{}-{}", self.first, self.last)
        }
    }
}

/// The subordinate ranges of one user, sorted and merged.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SubIds {
    /// Ranges from `/etc/subuid`.
    pub uids: Vec<IdRange>,
    /// Ranges from `/etc/subgid`.
    pub gids: Vec<IdRange>,
}

impl SubIds {
    /// The ranges of `uid` (login name `name`, if it has one) on this system.
    ///
    /// Missing files mean no ranges. Fails when an entry of the user cannot be parsed, when a
    /// range contains id 0 (a fence on it would fence root, and such a range already gives the
    /// user root), or when `/etc/nsswitch.conf` sends `subid` lookups somewhere other than the
    /// files (those ranges cannot be read here, and a fence without them would have a hole).
    pub fn read_system(uid: u32, name: Option<&str>) -> Result<SubIds, SubIdError> {
        let nss = read_optional(Path::new(NSSWITCH_FILE))?;
        if let Some(source) = external_subid_source(&nss) {
            return Err(SubIdError::ExternalSource { sources: source });
        }
        let uids = parse(SUBUID_FILE, &read_optional(Path::new(SUBUID_FILE))?, uid, name)?;
        let gids = parse(SUBGID_FILE, &read_optional(Path::new(SUBGID_FILE))?, uid, name)?;
        Ok(SubIds { uids, gids })
    }

    /// Whether the user has no subordinate ids at all.
    pub fn is_empty(&self) -> bool {
        self.uids.is_empty() && self.gids.is_empty()
    }

    /// A short stable digest of `uid` and the ranges, recorded with an applied fence so that a
    /// later change of `/etc/subuid`/`/etc/subgid` is noticed.
    pub fn fingerprint(&self, uid: u32) -> String {
        let mut canonical = format!("uid={uid};subuid=");
        let join = |s: &mut String, r: &[IdRange]| {
            for (i, x) in r.iter().enumerate() {
                let _ = write!(s, "{}{x}", if i == 0 { "" } else { "," });
            }
        };
        join(&mut canonical, &self.uids);
        canonical.push_str(";subgid=");
        join(&mut canonical, &self.gids);
        let digest = Sha256::digest(canonical.as_bytes());
        digest.iter().take(8).fold(String::new(), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
    }
}

impl fmt::Display for SubIds {
    /// `subuids 100000-165535, subgids 100000-165535` or `no subordinate ids`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("no subordinate ids");
        }
        let list = |r: &[IdRange]| {
            if r.is_empty() {
                "none".to_owned()
            } else {
                r.iter().map(ToString::to_string).collect::<Vec<_>>().join(" ")
            }
        };
        write!(f, "subuids {}, subgids {}", list(&self.uids), list(&self.gids))
    }
}

/// Entries of `/etc/passwd`- or `/etc/group`-format text (the id is the third field both times),
/// other than id `own`, whose id falls in `ranges`: users or groups that a fence on those ranges
/// fences too (a misconfigured `/etc/subuid`/`/etc/subgid`), as `(name, id)`.
pub fn accounts_in_ranges(passwd: &str, ranges: &[IdRange], own: u32) -> Vec<(String, u32)> {
    passwd
        .lines()
        .filter_map(|l| {
            let mut f = l.split(':');
            let name = f.next()?;
            let other: u32 = f.nth(1)?.parse().ok()?;
            (other != own && ranges.iter().any(|r| r.contains(other)))
                .then(|| (name.to_owned(), other))
        })
        .collect()
}

/// Why the subordinate ids of a user could not be known.
#[derive(Debug, thiserror::Error)]
pub enum SubIdError {
    /// A file exists but cannot be read.
    #[error("cannot read {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Underlying error.
        source: std::io::Error,
    },
    /// An entry of the user is malformed: `newuidmap` may read it differently than we do.
    #[error("{file} line {line}: cannot parse `{text}` (expected OWNER:START:COUNT)")]
    Malformed {
        /// The file.
        file: String,
        /// 1-based line number.
        line: usize,
        /// The line.
        text: String,
    },
    /// A range of the user contains id 0 (root).
    #[error(
        "{file} line {line}: the range of this user contains id 0 (root); a fence on it would \
         fence root, and the range already lets the user become root — fix the file"
    )]
    ContainsRoot {
        /// The file.
        file: String,
        /// 1-based line number.
        line: usize,
    },
    /// `subid:` in nsswitch.conf names a source other than the files.
    #[error(
        "/etc/nsswitch.conf takes subordinate ids from `{sources}`, which sandgate cannot read; \
         a fence without those ranges would let the user's user namespaces out"
    )]
    ExternalSource {
        /// The `subid:` sources as written.
        sources: String,
    },
}

fn read_optional(path: &Path) -> Result<String, SubIdError> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(s),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(source) => Err(SubIdError::Read { path: path.to_owned(), source }),
    }
}

/// The `subid:` sources of nsswitch.conf text when they are not just `files`.
pub fn external_subid_source(nsswitch: &str) -> Option<String> {
    nsswitch.lines().find_map(|l| {
        let l = l.split('#').next().unwrap_or("").trim();
        let rest = l.strip_prefix("subid:")?.trim();
        (!rest.is_empty() && rest != "files").then(|| rest.to_owned())
    })
}

/// The ranges of the user in subid-file `text` (named `file` in errors), sorted and merged.
///
/// An entry belongs to the user when its owner is `name` or the decimal `uid` (as shadow's
/// `newuidmap` decides). Lines of other owners are not examined beyond their owner field, blank
/// lines and `#` comments are skipped; an entry of the user that does not parse is an error
/// (fail closed).
pub fn parse(
    file: &str,
    text: &str,
    uid: u32,
    name: Option<&str>,
) -> Result<Vec<IdRange>, SubIdError> {
    let uid_text = uid.to_string();
    let mut ranges = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let owner = line.split(':').next().unwrap_or("");
        if owner != uid_text && Some(owner) != name {
            continue;
        }
        let malformed =
            || SubIdError::Malformed { file: file.to_owned(), line: i + 1, text: raw.to_owned() };
        let fields: Vec<&str> = line.split(':').collect();
        let [_, start, count] = fields[..] else { return Err(malformed()) };
        let number = |s: &str| -> Option<u32> {
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            s.parse().ok()
        };
        let (Some(start), Some(count)) = (number(start), number(count)) else {
            return Err(malformed());
        };
        if count == 0 {
            continue;
        }
        let range = IdRange::from_start_count(start, count).ok_or_else(malformed)?;
        if range.contains(0) {
            return Err(SubIdError::ContainsRoot { file: file.to_owned(), line: i + 1 });
        }
        ranges.push(range);
    }
    Ok(merge(ranges))
}

/// Sorts ranges and merges overlapping or adjacent ones (nft refuses overlapping elements).
pub fn merge(mut ranges: Vec<IdRange>) -> Vec<IdRange> {
    ranges.sort();
    let mut out: Vec<IdRange> = Vec::with_capacity(ranges.len());
    for r in ranges {
        match out.last_mut() {
            Some(prev) if r.first <= prev.last.saturating_add(1) => {
                prev.last = prev.last.max(r.last);
            }
            _ => out.push(r),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(first: u32, last: u32) -> IdRange {
        IdRange { first, last }
    }

    #[test]
    fn entries_by_name_and_by_uid_are_both_the_users() {
        let text = "\
alice:100000:65536
# a comment line
bob:165536:65536

1001:300000:10
1001x:400000:10
alicex:500000:10
1001:300010:5
";
        assert_eq!(
            parse("f", text, 1001, Some("alice")).unwrap(),
            [r(100000, 165535), r(300000, 300014)]
        );
        assert_eq!(parse("f", text, 1002, Some("bob")).unwrap(), [r(165536, 231071)]);
        // A user without a passwd name still has its numeric entries.
        assert_eq!(parse("f", text, 1001, None).unwrap(), [r(300000, 300014)]);
        assert_eq!(parse("f", text, 7, Some("nobody")).unwrap(), []);
        assert_eq!(parse("f", "", 7, Some("x")).unwrap(), []);
    }

    #[test]
    fn malformed_entries_of_the_user_fail_closed() {
        for line in [
            "alice:100000",
            "alice:100000:65536:9",
            "alice:-1:5",
            "alice:x:5",
            "alice:1:",
            "alice:4294967295:2",
            "alice: 100000:5",
        ] {
            let e = parse("/etc/subuid", line, 1001, Some("alice")).unwrap_err();
            assert!(matches!(e, SubIdError::Malformed { line: 1, .. }), "{line}: {e}");
        }
        // Other owners' garbage is none of our business.
        assert_eq!(parse("f", "bob:junk\nalice:10:1", 1001, Some("alice")).unwrap(), [r(10, 10)]);
        // Zero-length ranges give nothing.
        assert_eq!(parse("f", "alice:10:0", 1001, Some("alice")).unwrap(), []);
    }

    #[test]
    fn a_range_with_root_is_refused() {
        let e = parse("/etc/subuid", "x\nalice:0:65536", 1001, Some("alice")).unwrap_err();
        assert!(matches!(e, SubIdError::ContainsRoot { line: 2, .. }), "{e}");
    }

    #[test]
    fn ranges_merge() {
        assert_eq!(
            merge(vec![r(10, 20), r(5, 9), r(30, 40), r(15, 35), r(50, 50), r(u32::MAX, u32::MAX)]),
            [r(5, 40), r(50, 50), r(u32::MAX, u32::MAX)]
        );
    }

    #[test]
    fn nsswitch_sources() {
        assert_eq!(external_subid_source("passwd: files\n"), None);
        assert_eq!(external_subid_source("subid: files # local\n"), None);
        assert_eq!(external_subid_source("subid:\n"), None);
        assert_eq!(external_subid_source("subid: sss\n").as_deref(), Some("sss"));
        assert_eq!(external_subid_source("  subid:  files sss\n").as_deref(), Some("files sss"));
        assert_eq!(external_subid_source("# subid: sss\n"), None);
    }

    #[test]
    fn fingerprint_changes_with_any_range_and_the_uid() {
        let a = SubIds { uids: vec![r(100000, 165535)], gids: vec![r(100000, 165535)] };
        let fp = a.fingerprint(1001);
        assert_eq!(fp.len(), 16);
        assert_eq!(fp, a.clone().fingerprint(1001));
        let mut b = a.clone();
        b.gids.push(r(300000, 300009));
        let mut c = a.clone();
        c.uids = vec![];
        for other in [a.fingerprint(1002), b.fingerprint(1001), c.fingerprint(1001)] {
            assert_ne!(fp, other);
        }
        // uids and gids are not interchangeable.
        let swapped = SubIds { uids: vec![], gids: vec![r(1, 2)] };
        assert_ne!(
            swapped.fingerprint(1),
            SubIds { uids: vec![r(1, 2)], gids: vec![] }.fingerprint(1)
        );
    }

    #[test]
    fn accounts_inside_ranges_are_found() {
        let passwd = "root:x:0:0::/root:/bin/sh\nalice:x:1001:1001::/h:/bin/sh\n\
                      svc:x:100005:100005::/:/bin/false\nbroken\nbob:x:165536:1::/:/bin/sh\n";
        let ranges = [r(1001, 1001), r(100000, 165535)];
        assert_eq!(accounts_in_ranges(passwd, &ranges, 1001), [("svc".to_owned(), 100005)]);
        assert_eq!(accounts_in_ranges(passwd, &[], 1001), []);
    }

    #[test]
    fn display() {
        assert_eq!(SubIds::default().to_string(), "no subordinate ids");
        let s = SubIds { uids: vec![r(7, 7), r(100, 199)], gids: vec![] };
        assert_eq!(s.to_string(), "subuids 7 100-199, subgids none");
    }
}
