//! What the scan remembers of the previous launch in the same writable paths, so that a
//! directory that has not changed since is `stat`ed instead of listed (one path lookup instead
//! of opening, listing and sorting every entry: most of a large tree's cost).
//!
//! A directory's listing is taken from memory only when its key is what it was when it was
//! listed: device, inode, change time and modification time. Every change of a directory's
//! entries (an entry made, removed, renamed in or out, linked in) moves its change time to
//! now, and the change time cannot be set back by anyone but the clock's owner (`utimensat`
//! sets the modification time, and moves the change time to now); a directory swapped for
//! another has another inode, or (an inode number used again) a change time of its making; a
//! mount over it has another device and inode. Each directory is checked on its own, so a
//! change deep in the tree is seen wherever it is.
//!
//! Where the key could miss a change, nothing is remembered:
//! - **the clock's tick**: timestamps come from a coarse clock (a few milliseconds; a second on
//!   some filesystems), so a change made within the tick of the listing's own key would leave
//!   the key as it was. A listing is remembered only when the directory's last change was
//!   [`SETTLED`] before the scan began (as git treats "racily clean" index entries); a
//!   directory changed since then is listed again next time;
//! - **the clock set back** past the remembered scan's start: the memory is not used;
//! - **filesystems** whose times are not this machine's or may not move on every change
//!   (network and FUSE filesystems, overlays, FAT): only [`TRUSTED_FS`] are remembered;
//! - another rule, other writable paths or bounds: another memory (the header must match).
//!
//! The memory lives in sandgate's data directory, which no sandbox can see, one file per set
//! of writable paths, written whole (a new file renamed over the old) by the warden process
//! after the sandbox has started, off the launch's path.

use std::collections::HashMap;
use std::io::Write as _;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::Entries;

/// How long before the scan's start a directory's last change must lie for its listing to be
/// remembered: past the coarsest clock tick of [`TRUSTED_FS`] (a second on ext4 with small
/// inodes), with a margin.
pub(crate) const SETTLED: Duration = Duration::from_secs(2);

/// Filesystems (`statfs` magic numbers) whose directories' change times move on every change of
/// their entries, on this machine's clock: ext4 (and ext2/3), XFS, Btrfs, tmpfs, F2FS, ZFS,
/// bcachefs.
const TRUSTED_FS: &[i64] =
    &[0xEF53, 0x5846_5342, 0x9123_683E, 0x0102_1994, 0xF2F5_2010, 0x2FC1_2FC1, 0xCA45_1A4E];

/// The first line of a memory file (its format).
const MAGIC: &[u8] = b"sandgate-scan-memory 1\n";

/// What identifies a directory's state: device, inode, change and modification time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Key {
    dev: u64,
    ino: u64,
    ctime: (i64, i64),
    mtime: (i64, i64),
}

impl Key {
    /// The key of the directory at `path` (not through a symbolic link), when its filesystem
    /// is one whose keys can be trusted (`trusted`: what is known of each device so far).
    pub(crate) fn of(path: &Path, trusted: &mut HashMap<u64, bool>) -> Option<Key> {
        let m = std::fs::symlink_metadata(path).ok()?;
        if !m.is_dir() {
            return None;
        }
        let key = Key {
            dev: m.dev(),
            ino: m.ino(),
            ctime: (m.ctime(), m.ctime_nsec()),
            mtime: (m.mtime(), m.mtime_nsec()),
        };
        let ok = *trusted.entry(key.dev).or_insert_with(|| trusted_fs(path));
        ok.then_some(key)
    }

    /// Whether a listing made under this key may be remembered by a scan that began at
    /// `start` (seconds, nanoseconds): the directory's last change lies [`SETTLED`] before.
    pub(crate) fn settled(&self, start: (i64, i64)) -> bool {
        let settled = SETTLED.as_secs() as i64;
        let last = self.ctime.max(self.mtime);
        last < (start.0 - settled, start.1)
    }
}

/// Whether the filesystem of `path` is one of [`TRUSTED_FS`].
#[cfg(target_os = "linux")]
// (`c_long`: `i64` here, `i32` on 32-bit targets.)
#[allow(clippy::unnecessary_cast)]
pub(crate) fn trusted_fs(path: &Path) -> bool {
    nix::sys::statfs::statfs(path)
        .is_ok_and(|s| TRUSTED_FS.contains(&(s.filesystem_type().0 as i64)))
}

/// (Elsewhere, nothing is remembered.)
#[cfg(not(target_os = "linux"))]
pub(crate) fn trusted_fs(_: &Path) -> bool {
    let _ = TRUSTED_FS;
    false
}

/// A directory's key and what its listing said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) key: Key,
    pub(crate) entries: Entries,
}

/// The memory of the previous scan, as read at the start of this one.
#[derive(Debug, Default)]
pub(crate) struct Recall {
    records: HashMap<PathBuf, Record>,
}

impl Recall {
    /// What the directory `path` held when it was listed, if its key is the same now (taken
    /// out: each directory is read once).
    pub(crate) fn take(&mut self, path: &Path, now: Option<&Key>) -> Option<Entries> {
        if self.records.get(path).is_none_or(|r| Some(&r.key) != now) {
            return None;
        }
        self.records.remove(path).map(|r| r.entries)
    }
}

/// What a scan leaves for the next launch, written by [`Memory::write`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Memory {
    file: PathBuf,
    header: Vec<u8>,
    start: (i64, i64),
    records: Vec<(PathBuf, Record)>,
}

/// The file that holds the memory of a scan of `tops` in `dir`.
pub(crate) fn file_for(dir: &Path, tops: &[PathBuf]) -> PathBuf {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for t in tops {
        for b in t.as_os_str().as_bytes().iter().chain([&0u8]) {
            h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    dir.join(format!("{h:016x}.scan"))
}

/// What must be the same for a memory to apply: the writable paths, the rule, the bounds.
pub(crate) fn header(tops: &[PathBuf], rule: &crate::TopLevel, bounds: (usize, usize)) -> Vec<u8> {
    // (The version too: what a listing says may change with the code that sorts it.)
    let mut out = format!("{}\n", env!("CARGO_PKG_VERSION")).into_bytes();
    for t in tops {
        out.extend_from_slice(t.as_os_str().as_bytes());
        out.push(0);
    }
    for list in [&rule.writable, &rule.protected, &rule.below, &rule.review, &rule.skip] {
        out.extend_from_slice(list.join("\0").as_bytes());
        out.push(1);
    }
    out.extend_from_slice(format!("{} {}", bounds.0, bounds.1).as_bytes());
    out
}

/// Now, as (seconds, nanoseconds) since the epoch.
pub(crate) fn now() -> (i64, i64) {
    let d = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    (d.as_secs() as i64, i64::from(d.subsec_nanos()))
}

/// Reads the memory in `file` made under `header`; `None` when there is none, it was made
/// under another header, or the clock now lies before the scan that made it.
pub(crate) fn recall(file: &Path, header: &[u8], start: (i64, i64)) -> Option<Recall> {
    let bytes = std::fs::read(file).ok()?;
    let mut r = Reader::new(&bytes);
    if r.take(MAGIC.len())? != MAGIC || r.field()? != header {
        return None;
    }
    let made = (r.i64()?, r.i64()?);
    if made > start {
        return None;
    }
    let n = r.u32()? as usize;
    let mut records = HashMap::with_capacity(n.min(1 << 20));
    for _ in 0..n {
        let path = PathBuf::from(std::ffi::OsStr::from_bytes(r.field()?));
        let key = Key {
            dev: r.u64()?,
            ino: r.u64()?,
            ctime: (r.i64()?, r.i64()?),
            mtime: (r.i64()?, r.i64()?),
        };
        let flags = r.take(1)?[0];
        let mut names = || -> Option<Vec<Vec<u8>>> {
            let n = r.u32()? as usize;
            (0..n).map(|_| r.field().map(<[u8]>::to_vec)).collect()
        };
        let entries = Entries {
            git_dir: flags & 1 != 0,
            dot_git: flags & 2 != 0,
            protect: names()?,
            enter: names()?,
            skip: names()?,
            review: names()?,
            links: names()?,
        };
        records.insert(path, Record { key, entries });
    }
    (r.at == bytes.len()).then_some(Recall { records })
}

impl Memory {
    /// A memory of `records` for the file `file`, from a scan that began at `start`.
    pub(crate) fn new(
        file: PathBuf,
        header: Vec<u8>,
        start: (i64, i64),
        records: Vec<(PathBuf, Record)>,
    ) -> Memory {
        Memory { file, header, start, records }
    }

    /// How many directories it remembers.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether it remembers no directory.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The file's bytes.
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 * self.records.len() + 256);
        out.extend_from_slice(MAGIC);
        field(&mut out, &self.header);
        out.extend_from_slice(&self.start.0.to_le_bytes());
        out.extend_from_slice(&self.start.1.to_le_bytes());
        out.extend_from_slice(&(self.records.len() as u32).to_le_bytes());
        for (path, r) in &self.records {
            field(&mut out, path.as_os_str().as_bytes());
            let k = &r.key;
            for v in [k.dev, k.ino] {
                out.extend_from_slice(&v.to_le_bytes());
            }
            for v in [k.ctime.0, k.ctime.1, k.mtime.0, k.mtime.1] {
                out.extend_from_slice(&v.to_le_bytes());
            }
            let e = &r.entries;
            out.push(u8::from(e.git_dir) | u8::from(e.dot_git) << 1);
            for list in [&e.protect, &e.enter, &e.skip, &e.review, &e.links] {
                out.extend_from_slice(&(list.len() as u32).to_le_bytes());
                for name in list {
                    field(&mut out, name);
                }
            }
        }
        out
    }

    /// Writes the memory: a new file (mode 0600, in a directory of mode 0700) renamed over the
    /// old one, so that a reader sees one whole memory or the other.
    pub fn write(&self) -> std::io::Result<()> {
        use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
        let dir = self.file.parent().unwrap_or(Path::new("."));
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
        let tmp = self.file.with_extension(format!("{}.tmp", std::process::id()));
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        let written = f.write_all(&self.encode()).and_then(|()| std::fs::rename(&tmp, &self.file));
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        written
    }
}

/// Writes a field as [`Reader::field`] reads it: its length (`u32`, little-endian), then its bytes.
pub(super) fn field(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// Reads the little-endian fields of a memory file (and of the index's question and answer,
/// written the same way); `None` at its end.
pub(super) struct Reader<'b> {
    bytes: &'b [u8],
    at: usize,
}

impl<'b> Reader<'b> {
    /// A reader at the start of `bytes`.
    pub(super) fn new(bytes: &'b [u8]) -> Self {
        Reader { bytes, at: 0 }
    }
    /// Whether every byte has been read (the index's question and answer end exactly).
    #[cfg(target_os = "linux")]
    pub(super) fn at_end(&self) -> bool {
        self.at == self.bytes.len()
    }
    /// The next `n` bytes.
    pub(super) fn take(&mut self, n: usize) -> Option<&'b [u8]> {
        let out = self.bytes.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(out)
    }
    /// The next `u32`.
    pub(super) fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    /// The next `u64`.
    pub(super) fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn i64(&mut self) -> Option<i64> {
        Some(i64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    /// The next field, as [`field`] wrote it.
    pub(super) fn field(&mut self) -> Option<&'b [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
}
