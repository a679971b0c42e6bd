//! Copy-on-write package caches: the layers a launch mounts over the host's caches (see
//! `sandgate_config::package_caches` for which directories are caches, and
//! `sandgate_sandbox::CacheLayer` for the mount).
//!
//! Layers live in sandgate's data directory, which every sandbox hides and no host tool reads:
//! `caches/project-<key>/<slot>/<cache>/{upper,work}` (one per project, the repository around
//! the working directory, by default) or `caches/shared/<slot>/...` (`[filesystem] caches =
//! "shared"`). An overlay's upper layer may be used by one mount at a time, so each launch takes
//! a slot with an exclusive lock held while it runs; concurrent launches in one project take the
//! next slot (colder, never shared). `sandgate cache ls | clear` reads and frees them.
//!
//! An overlay's work directory must be empty or its own: an overlay mounted on one used before
//! first clears it (removes the `work` inside), and that removal frees a block, which on a file
//! system mounted with `discard` waits for the disk (~0.15 ms per cache on the launch's path).
//! So the launcher's detached closer empties the work directories once the overlays are gone,
//! and a launch mounts on emptied ones: each slot has a few sets of work directories
//! (`<cache>/work-<n>`, locked by `work-<n>.lock` in the slot); a launch takes the first set
//! whose lock is free and hands the lock to its closer, which holds it until the set is empty
//! again. Should every set be busy (closers slow to finish), the launch makes work directories
//! of its own (`work-<sandbox id>`), which its closer removes.

use std::fs::File;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use sandgate_config::{CacheMode, PackageCache, Policy};
use sandgate_sandbox::CacheLayer;

use crate::launch_env::LaunchEnv;

/// How many launches of one project may layer its caches at once (each in a slot of its own).
const SLOTS: usize = 8;

/// How many sets of work directories a slot has (see the module's documentation).
const WORK_SETS: usize = 4;

/// The name of the file in a project's layer directory that says which project it is.
const PROJECT_FILE: &str = "project";

/// The layers of one launch, with the slot's lock (held until dropped).
#[derive(Debug, Default)]
pub struct Layers {
    /// What the launcher mounts.
    pub caches: Vec<CacheLayer>,
    /// Notes for the person (a cache skipped, every slot busy).
    pub notes: Vec<String>,
    /// Credential files of the layered caches, to hide inside (`credentials.toml` of a
    /// `CARGO_HOME` outside the home, whose allowlist names only `~/.cargo`'s).
    pub hidden: Vec<PathBuf>,
    /// Work directories made for this launch alone (every set was busy): removed when the
    /// layers are let go if still empty (a launch that failed before its overlays were
    /// mounted; once mounted, the launcher's closer removes them after the overlays are gone).
    work: Vec<PathBuf>,
    /// The lock of the set of work directories taken, which the launcher's closer holds on
    /// until it has emptied them (see [`Layers::work_lock`]).
    work_set: Option<File>,
    _slot: Option<nix::fcntl::Flock<File>>,
}

impl Layers {
    /// The descriptor of the work directories' lock, for the launcher's closer to hold.
    pub fn work_lock(&self) -> Option<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd as _;
        self.work_set.as_ref().map(|l| l.as_raw_fd())
    }
}

impl Drop for Layers {
    fn drop(&mut self) {
        for w in &self.work {
            let _ = std::fs::remove_dir(w);
        }
    }
}

/// `$XDG_DATA_HOME/sandgate/caches`.
pub fn caches_dir(data_home: &Path) -> PathBuf {
    data_home.join("sandgate").join("caches")
}

/// The directory of the layers for a launch in `cwd` (`None` when the mode is off).
pub fn scope_dir(mode: CacheMode, data_home: &Path, project: &Path) -> Option<PathBuf> {
    let name = match mode {
        CacheMode::Off => return None,
        CacheMode::Shared => "shared".to_owned(),
        CacheMode::Project => format!("project-{}", sandgate_config::project_key(project)),
    };
    Some(caches_dir(data_home).join(name))
}

/// The project a launch in `ctx.cwd` belongs to (the repository around it, or the directory).
pub fn project_of(ctx: &LaunchEnv) -> PathBuf {
    let cwd = ctx.cwd.canonicalize().unwrap_or_else(|_| ctx.cwd.clone());
    match &ctx.config_home {
        Some(cfg) => {
            sandgate_config::project_root(&cwd, &cfg.join("sandgate"), ctx.home.as_deref())
        }
        None => cwd,
    }
}

/// Whether a tier layers caches: one that writes (`build`) or reaches the network (`net`), where
/// package managers fill them; never `run`.
pub fn applies(policy: &Policy) -> bool {
    policy.fs.caches != CacheMode::Off
        && (policy.net.mode == sandgate_config::NetMode::Proxy || !policy.fs.writable.is_empty())
}

/// `path` with links resolved as far as it exists (a missing rest appended as written): what a
/// mount there would cover.
fn resolved(path: &Path) -> PathBuf {
    let mut existing = path;
    let mut rest = Vec::new();
    while !existing.exists() {
        let (Some(parent), Some(name)) = (existing.parent(), existing.file_name()) else { break };
        rest.push(name);
        existing = parent;
    }
    let mut out = existing.canonicalize().unwrap_or_else(|_| existing.to_path_buf());
    out.extend(rest.into_iter().rev());
    out
}

/// [`resolved`] for many paths that share parents (the caches of one home): each parent's
/// resolution is kept, so a path below one costs an `lstat` where resolving it from the root
/// costs a `readlink` per component (this is on every `net` and `build` launch's path).
#[derive(Default)]
struct Resolver {
    /// Keyed by the path as spelled: `Path`'s equality ignores a trailing `/`, which changes
    /// what a link's path names.
    done: std::collections::HashMap<std::ffi::OsString, PathBuf>,
}

impl Resolver {
    /// `path` as [`resolved`] gives it.
    fn resolve(&mut self, path: &Path) -> PathBuf {
        if let Some(r) = self.done.get(path.as_os_str()) {
            return r.clone();
        }
        // Only a path spelled as its components are (no `..`, and no trailing `/` or `.`, after
        // which `lstat` follows a link: `CARGO_HOME=~/link/` would be taken for the link's own
        // path, which holds nothing, where it names the directory the link points to).
        let plain = path.is_absolute()
            && path.components().all(|c| {
                matches!(c, std::path::Component::RootDir | std::path::Component::Normal(_))
            })
            && path.components().collect::<PathBuf>().as_os_str() == path.as_os_str();
        let out = match (path.parent(), path.file_name()) {
            (Some(parent), Some(name)) if plain => {
                let above = self.resolve(parent);
                match std::fs::symlink_metadata(path) {
                    Ok(m) if m.file_type().is_symlink() => resolved(path),
                    Ok(_) => above.join(name),
                    // Missing: the rest appended as written, as `resolved` does. (Any other
                    // failure, a parent that is not a directory, is left to it.)
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => above.join(name),
                    Err(_) => resolved(path),
                }
            }
            _ => resolved(path),
        };
        self.done.insert(path.as_os_str().to_owned(), out.clone());
        out
    }
}

/// How a `PATH` directory is opened: only as a place to look names up in (`O_PATH` where there
/// is one: no read permission needed).
#[cfg(target_os = "linux")]
const PATH_DIR_FLAGS: libc::c_int = libc::O_PATH | libc::O_DIRECTORY;
#[cfg(not(target_os = "linux"))]
const PATH_DIR_FLAGS: libc::c_int = libc::O_DIRECTORY;

/// The directories of a `PATH`, each opened once (absolute ones only, each once), so that
/// looking a program up in them is one `fstatat` of a name per directory, not a walk of the
/// whole path: a launch asks for some thirty programs.
struct PathDirs(Vec<File>);

impl PathDirs {
    fn open(path: Option<std::ffi::OsString>) -> Self {
        use std::os::unix::fs::OpenOptionsExt as _;
        let mut seen: Vec<PathBuf> = Vec::new();
        let mut dirs = Vec::new();
        for d in path.iter().flat_map(std::env::split_paths) {
            if !d.is_absolute() || seen.contains(&d) {
                continue;
            }
            let opened =
                std::fs::OpenOptions::new().read(true).custom_flags(PATH_DIR_FLAGS).open(&d);
            seen.push(d);
            dirs.extend(opened);
        }
        PathDirs(dirs)
    }

    /// Whether `program` is a regular file (links followed) in one of the directories.
    fn has(&self, program: &str) -> bool {
        use std::os::fd::AsRawFd as _;
        let flags = nix::fcntl::AtFlags::empty();
        self.0.iter().any(|d| {
            nix::sys::stat::fstatat(Some(d.as_raw_fd()), program, flags)
                .is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFREG)
        })
    }
}

/// The variable lookup of a launch's environment (`None` when unset or empty).
pub(crate) fn env_var(ctx: &LaunchEnv) -> impl Fn(&str) -> Option<std::ffi::OsString> + '_ {
    |name: &str| {
        ctx.env
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .filter(|v| !v.is_empty())
    }
}

/// The package cache (resolved) at or above `dir`, if any: a build started there would write
/// the host's cache itself. A cache is at or above `dir` when the directory its path names
/// (links followed) is `dir` or one of its parents, by device and inode: one `stat` per cache
/// and per parent, where resolving every cache's path took a `readlink` per component of each
/// (this is on every `build` launch's path). The same directory reached by a bind mount counts
/// too.
pub fn holding(ctx: &LaunchEnv, dir: &Path) -> Option<PackageCache> {
    use std::os::unix::fs::MetadataExt as _;
    let home = ctx.home.as_deref()?;
    let id = |p: &Path| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
    let above: Vec<(u64, u64)> = resolved(dir).ancestors().filter_map(id).collect();
    sandgate_config::package_caches(env_var(ctx), home)
        .into_iter()
        .find(|c| id(&c.path).is_some_and(|i| above.contains(&i)))
        .map(|c| PackageCache { path: resolved(&c.path), ..c })
}

/// The caches a launch would layer (paths resolved), and why each other one is left out: pure
/// but for reading whether paths exist and which programs are on `PATH`. Every check is on the
/// resolved path: `CARGO_HOME=/usr/..` or a link to `/proc/self/root` is `/`.
pub fn eligible(policy: &Policy, ctx: &LaunchEnv) -> (Vec<PackageCache>, Vec<String>) {
    let Some(home) = ctx.home.as_deref() else { return (Vec::new(), Vec::new()) };
    let var = env_var(ctx);
    let path_dirs = PathDirs::open(var("PATH"));
    let on_path = |program: &str| path_dirs.has(program);
    let mut resolver = Resolver::default();
    let mut resolved = |p: &Path| resolver.resolve(p);
    // A layer over a directory that holds one of these would shadow it (the home, the project,
    // a writable path) or show what is hidden (the store, the configuration, the control
    // socket); a cache inside sandgate's own directories is not a host cache to layer.
    let own: Vec<PathBuf> = [
        ctx.config_home.as_ref().map(|c| c.join("sandgate")),
        ctx.data_home.as_ref().map(|d| d.join("sandgate")),
        Some(ctx.runtime_dir.clone()),
    ]
    .into_iter()
    .flatten()
    .map(|p| resolved(&p))
    .collect();
    let mut held: Vec<PathBuf> = own.clone();
    held.extend(
        [&ctx.cwd]
            .into_iter()
            .chain(ctx.home.iter())
            .chain(ctx.passwd_home.iter())
            .chain(policy.fs.writable.iter().map(|w| &w.path))
            .map(|p| resolved(p)),
    );
    // Named writable (`--allow-write`, `allow_write`): the person asked for the real thing.
    let named: Vec<PathBuf> = policy
        .fs
        .writable
        .iter()
        .filter(|w| w.source != sandgate_config::RuleSource::CurrentDirectory)
        .map(|w| resolved(&w.path))
        .collect();
    let mut notes = Vec::new();
    let caches = sandgate_config::package_caches(&var, home)
        .into_iter()
        .map(|c| PackageCache { path: resolved(&c.path), ..c })
        .filter(|c| {
            if named.iter().any(|w| c.path.starts_with(w)) {
                return false; // writable by name: nothing to layer
            }
            let special = ["/proc", "/sys", "/dev"].iter().find(|s| c.path.starts_with(s));
            let why = if c.path.parent().is_none() {
                Some("it is the root of the filesystem".to_owned())
            } else if let Some(s) = special {
                Some(format!("it is under {s}"))
            } else if let Some(h) = held.iter().find(|h| h.starts_with(&c.path)) {
                Some(format!("it holds {}", h.display()))
            } else {
                own.iter()
                    .find(|o| c.path.starts_with(o))
                    .map(|o| format!("it lies in {}", o.display()))
            };
            if let Some(why) = why {
                notes.push(format!(
                    "the {} cache at {} is not layered: {why}",
                    c.name,
                    c.path.display()
                ));
                return false;
            }
            c.path.is_dir() || c.programs.iter().any(|p| on_path(p))
        })
        .collect();
    (caches, notes)
}

/// Makes the layers of a launch: the host's missing cache directories of installed tools (empty,
/// so that the overlay has a place), the scope, a free slot (locked), each cache's upper
/// directory and this launch's work directory (`work-<id>`, `id` the sandbox's). Nothing when
/// the tier layers no caches. A failure is a note, never a failed launch: the cache then stays
/// read-only, as before.
pub fn prepare(policy: &Policy, ctx: &LaunchEnv, id: &str) -> Layers {
    let mut layers = Layers::default();
    let Some(data_home) = ctx.data_home.as_deref().filter(|_| applies(policy)) else {
        return layers;
    };
    let (caches, notes) = eligible(policy, ctx);
    layers.notes = notes;
    if caches.is_empty() {
        return layers;
    }
    let project = project_of(ctx);
    let Some(scope) = scope_dir(policy.fs.caches, data_home, &project) else { return layers };
    if let Err(e) = make_scope(&scope, &project, policy.fs.caches) {
        layers.notes.push(format!("package caches stay read-only: {e:#}"));
        return layers;
    }
    let Some((slot_dir, lock)) = (0..SLOTS).find_map(|n| take_slot(&scope, n)) else {
        layers.notes.push(format!(
            "package caches stay read-only: {SLOTS} sandboxes of this project already use their \
             layers"
        ));
        return layers;
    };
    layers._slot = Some(lock);
    let set = make_private_dir(&slot_dir).ok().and_then(|()| take_work_set(&slot_dir));
    let work_name = match &set {
        Some((n, _)) => format!("work-{n}"),
        None => format!("work-{id}"),
    };
    let own_work = set.is_none();
    layers.work_set = set.map(|(_, lock)| lock);
    for c in caches {
        let upper = slot_dir.join(c.name).join("upper");
        let work = slot_dir.join(c.name).join(&work_name);
        let made = make_private_dir(&c.path)
            .with_context(|| format!("creating {}", c.path.display()))
            .and_then(|()| make_private_dir(&upper).context("creating its layer"))
            .and_then(|()| {
                if own_work { make_new_dir(&work) } else { make_private_dir(&work) }
                    .context("creating its layer")
            });
        match made {
            Ok(()) => {
                if own_work {
                    layers.work.push(work.clone());
                }
                layers.hidden.extend(c.secrets.iter().map(|f| c.path.join(f)));
                layers.caches.push(CacheLayer { path: c.path, upper, work, own_work });
            }
            Err(e) => layers.notes.push(format!("the {} cache stays read-only: {e:#}", c.name)),
        }
    }
    layers
}

/// Creates `dir` (and its parents) with mode 0700 if missing.
fn make_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    if dir.is_dir() {
        return Ok(());
    }
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)
}

/// Creates `dir` with mode 0700; it must not exist (a work directory is this launch's alone).
fn make_new_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().mode(0o700).create(dir)
}

/// The scope's directory, with the project it is for written once (for `cache ls`).
fn make_scope(scope: &Path, project: &Path, mode: CacheMode) -> anyhow::Result<()> {
    make_private_dir(scope).with_context(|| format!("creating {}", scope.display()))?;
    let file = scope.join(PROJECT_FILE);
    if mode == CacheMode::Project && !file.exists() {
        std::fs::write(&file, project.as_os_str().as_encoded_bytes())
            .with_context(|| format!("writing {}", file.display()))?;
    }
    Ok(())
}

/// The lock file at `path`, made when missing (never truncated: it holds nothing).
fn lock_file(path: &Path) -> Option<File> {
    std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(path).ok()
}

/// Slot `n` of `scope`, locked for this launch, or `None` when another launch holds it.
fn take_slot(scope: &Path, n: usize) -> Option<(PathBuf, nix::fcntl::Flock<File>)> {
    let lock = lock_file(&scope.join(format!("{n}.lock")))?;
    let held = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusiveNonblock).ok()?;
    Some((scope.join(n.to_string()), held))
}

/// The first set of work directories of `slot_dir` whose lock is free (see the module's
/// documentation), locked; `None` when every one is held. The lock is the open file's (`flock`),
/// released when the last descriptor of it closes, never unlocked by hand: the launcher's
/// closer holds a copy past this process's end (nix's `Flock` unlocks when dropped, which
/// would free it for every holder).
fn take_work_set(slot_dir: &Path) -> Option<(usize, File)> {
    (0..WORK_SETS).find_map(|n| {
        let lock = lock_file(&slot_dir.join(format!("work-{n}.lock")))?;
        lock.try_lock().ok().map(|()| (n, lock))
    })
}

/// One scope of layers, for `sandgate cache ls`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ScopeInfo {
    /// `shared`, or `project-<key>`.
    pub scope: String,
    /// The project (for a project's layers whose file says).
    pub project: Option<PathBuf>,
    /// Each cache's name and bytes on disk, over every slot.
    pub caches: Vec<(String, u64)>,
    /// Bytes on disk of the whole scope.
    pub bytes: u64,
    /// Whether a running sandbox holds one of its slots.
    pub in_use: bool,
}

/// Every scope of layers under `data_home`, sorted by name.
pub fn list(data_home: &Path) -> anyhow::Result<Vec<ScopeInfo>> {
    let dir = caches_dir(data_home);
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if !path.is_dir() {
            continue;
        }
        let project = std::fs::read(path.join(PROJECT_FILE))
            .ok()
            .map(|b| PathBuf::from(String::from_utf8_lossy(&b).into_owned()));
        let mut caches: Vec<(String, u64)> = Vec::new();
        for slot in (0..SLOTS).map(|n| path.join(n.to_string())) {
            for cache in std::fs::read_dir(&slot).into_iter().flatten().flatten() {
                // (The work directories' locks lie beside the caches.)
                if !cache.file_type().is_ok_and(|t| t.is_dir()) {
                    continue;
                }
                let name = cache.file_name().to_string_lossy().into_owned();
                let bytes = disk_usage(&cache.path());
                match caches.iter_mut().find(|(n, _)| *n == name) {
                    Some((_, b)) => *b += bytes,
                    None => caches.push((name, bytes)),
                }
            }
        }
        caches.sort();
        let in_use = (0..SLOTS)
            .any(|n| path.join(format!("{n}.lock")).exists() && take_slot(&path, n).is_none());
        out.push(ScopeInfo {
            scope: entry.file_name().to_string_lossy().into_owned(),
            project,
            bytes: caches.iter().map(|(_, b)| b).sum(),
            caches,
            in_use,
        });
    }
    out.sort_by(|a, b| a.scope.cmp(&b.scope));
    Ok(out)
}

/// Bytes for a person (B, KiB, MiB, GiB, TiB): `cache ls`, `doctor`.
pub fn human(bytes: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 { format!("{bytes} B") } else { format!("{v:.1} {}", units[u]) }
}

/// `scopes` as pretty JSON (`sandgate cache ls --json`).
pub fn to_json(scopes: &[ScopeInfo]) -> String {
    serde_json::to_string_pretty(scopes).unwrap_or_default()
}

/// Removes the scopes `which` selects (a project's, or every one); refuses one a running sandbox
/// uses, and waits for the closers of launches just ended (their sets of work directories).
/// Returns what was removed and the bytes freed.
pub fn clear(data_home: &Path, which: Option<&str>) -> anyhow::Result<Vec<(String, u64)>> {
    let mut removed = Vec::new();
    for info in list(data_home)? {
        if which.is_some_and(|w| w != info.scope) {
            continue;
        }
        let path = caches_dir(data_home).join(&info.scope);
        // Held for the removal, so that no launch starts using a slot meanwhile.
        let mut held = Vec::new();
        for n in 0..SLOTS {
            match take_slot(&path, n) {
                Some(lock) => held.push(lock),
                None => anyhow::bail!(
                    "the layers of {} are in use by a running sandbox; clear them when it has ended",
                    info.project.as_deref().unwrap_or(Path::new(&info.scope)).display()
                ),
            }
        }
        // And every set of work directories: a launch's closer holds its set past the launch
        // (whose slot is free by then) until it has emptied it. Removed under it, the lock
        // files would no longer keep the next launch from mounting on the directories that
        // closer is about to empty. Waited for: with every slot held no launch can take a set,
        // and a closer is done soon after its launcher.
        let mut sets = Vec::new();
        for n in 0..SLOTS {
            for m in 0..WORK_SETS {
                let lock = path.join(n.to_string()).join(format!("work-{m}.lock"));
                let Ok(f) = std::fs::OpenOptions::new().write(true).open(&lock) else { continue };
                f.lock().with_context(|| format!("waiting for {}", lock.display()))?;
                sets.push(f);
            }
        }
        remove_tree(&path).with_context(|| format!("removing {}", path.display()))?;
        drop(sets);
        drop(held);
        removed.push((info.scope, info.bytes));
    }
    Ok(removed)
}

/// Bytes on disk of the tree at `path` (blocks, as `du`), not following links. Walked with a
/// stack of paths, one directory open at a time: a sandbox can make a tree deeper than the
/// descriptor limit in a second.
fn disk_usage(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let mut stack = vec![path.to_path_buf()];
    while let Some(p) = stack.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&p) else { continue };
        total += meta.blocks() * 512;
        if meta.is_dir() {
            stack.extend(std::fs::read_dir(&p).into_iter().flatten().flatten().map(|e| e.path()));
        }
    }
    total
}

/// Removes a layer tree. Package managers leave read-only directories behind (Go's module cache
/// is 0555), the overlay's work directory is 0000, and a sandbox can make a tree deeper than the
/// descriptor limit (`remove_dir_all` holds one per level) or than `PATH_MAX`: coreutils' `chmod
/// -R` and `rm -rf` walk any depth (fts, relative to descriptors they recycle), and neither
/// follows a link it meets below the top.
fn remove_tree(path: &Path) -> std::io::Result<()> {
    let run = |program: &str, args: &[&str]| -> std::io::Result<()> {
        let status = std::process::Command::new(program)
            .args(args)
            .arg("--")
            .arg(path)
            .stdin(std::process::Stdio::null())
            .status()?;
        if status.success() {
            Ok(())
        } else {
            Err(std::io::Error::other(format!("{program} {}: {status}", args.join(" "))))
        }
    };
    run("chmod", &["-R", "u+rwx"])?;
    run("rm", &["-rf", "--one-file-system"])?;
    if path.exists() {
        return Err(std::io::Error::other("still there after rm -rf"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_are_per_project_unless_shared() {
        let data = Path::new("/d");
        let a = scope_dir(CacheMode::Project, data, Path::new("/p/a")).unwrap();
        let b = scope_dir(CacheMode::Project, data, Path::new("/p/b")).unwrap();
        assert_ne!(a, b);
        assert!(
            a.starts_with("/d/sandgate/caches")
                && a.file_name().unwrap().to_str().unwrap().starts_with("project-")
        );
        assert_eq!(
            scope_dir(CacheMode::Shared, data, Path::new("/p/a")).unwrap(),
            Path::new("/d/sandgate/caches/shared")
        );
        assert_eq!(scope_dir(CacheMode::Off, data, Path::new("/p/a")), None);
    }

    #[test]
    fn a_slot_is_taken_by_one_launch_at_a_time_and_clear_frees_every_scope() {
        let d = tempfile::tempdir().unwrap();
        let scope = caches_dir(d.path()).join("project-x");
        std::fs::create_dir_all(scope.join("0/cargo/upper/bin")).unwrap();
        std::fs::write(scope.join("0/cargo/upper/bin/tool"), vec![0u8; 10_000]).unwrap();
        let first = take_slot(&scope, 0).unwrap();
        assert!(take_slot(&scope, 0).is_none(), "the slot is held");
        assert!(take_slot(&scope, 1).is_some(), "the next one is free");
        let listed = list(d.path()).unwrap();
        assert_eq!(listed.len(), 1);
        assert!(listed[0].in_use && listed[0].bytes >= 10_000, "{listed:?}");
        assert_eq!(listed[0].caches[0].0, "cargo");
        let refused = clear(d.path(), None).unwrap_err().to_string();
        assert!(refused.contains("in use"), "{refused}");
        drop(first);
        // A read-only directory inside (as Go leaves them) does not stop the removal.
        use std::os::unix::fs::PermissionsExt;
        let ro = scope.join("0/cargo/upper/bin");
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
        let removed = clear(d.path(), None).unwrap();
        assert_eq!(removed.len(), 1);
        assert!(!scope.exists());
        assert!(list(d.path()).unwrap().is_empty());
    }

    /// Red-team finding (`cache clear` and the closers): a launch's closer holds its set of work
    /// directories (`work-<n>.lock`) past the launch, whose slot is free by then; `clear` took
    /// the slots only and removed the tree (the lock files with it) under a closer not done yet,
    /// and the next launch made a new `work-<n>.lock`, took it and mounted its overlays on
    /// `work-<n>`, whose `work` the old closer then removed or emptied of the live overlay's
    /// `#<n>` entries. `clear` must wait for every set's lock before removing anything. Watched
    /// by the kernel's list of blocked locks (`/proc/locks`), with a deadline; the control: the
    /// removal goes ahead once the set is let go.
    #[test]
    fn clear_waits_for_a_closer_still_holding_a_work_set() {
        use std::os::unix::fs::MetadataExt as _;
        let d = tempfile::tempdir().unwrap();
        let scope = caches_dir(d.path()).join("project-x");
        std::fs::create_dir_all(scope.join("0/npm/work-1/work")).unwrap();
        std::fs::create_dir_all(scope.join("0/npm/upper")).unwrap();
        // A closer's set (its launch, and so the slot, done).
        let (n, closer) = take_work_set(&scope.join("0")).unwrap();
        assert!(take_work_set(&scope.join("0")).is_some_and(|(m, _)| m != n), "held");
        let ino = closer.metadata().unwrap().ino();
        let clearing = {
            let data = d.path().to_path_buf();
            std::thread::spawn(move || clear(&data, None).map(|r| r.len()))
        };
        // Blocked on the closer's lock: a waiter (`->`) on its inode in /proc/locks.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let waiting = loop {
            let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
            let blocked = locks.lines().any(|l| {
                l.contains("->") && l.contains("FLOCK") && l.contains(&format!(":{ino} "))
            });
            if blocked || clearing.is_finished() || std::time::Instant::now() > deadline {
                break blocked;
            }
            std::thread::yield_now();
        };
        assert!(scope.join("0/npm/work-1/work").exists(), "cleared under a closer");
        assert!(waiting, "clear did not wait for the closer");
        drop(closer);
        assert_eq!(clearing.join().unwrap().unwrap(), 1);
        assert!(!scope.exists(), "the control: cleared once the closer is done");
    }
}

#[cfg(test)]
mod resolver_tests {
    use super::*;

    /// The kept parents give what resolving each path alone gives, over links (to a directory,
    /// to a link, dangling, relative, to a file), missing paths below each, a file's child, `..`,
    /// and a link named with a trailing `/` or `/.` (`lstat` follows it there: once taken for
    /// the link's own path, which the checks of `eligible` let an overlay cover); asked in an
    /// order that has parents resolved first and again in reverse. The control: a link's own
    /// path differs from its resolution, so a resolver that ignored links would fail.
    #[test]
    fn kept_parents_resolve_as_each_path_alone() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path().canonicalize().unwrap();
        std::fs::create_dir_all(r.join("real/deep")).unwrap();
        std::fs::write(r.join("file"), b"").unwrap();
        let link = |target: &str, name: &str| std::os::unix::fs::symlink(target, r.join(name));
        link(r.join("real").to_str().unwrap(), "abs").unwrap();
        link("real", "rel").unwrap();
        link("abs", "chain").unwrap();
        link("nowhere", "dangling").unwrap();
        link("file", "tofile").unwrap();
        let names = [
            "",
            "real",
            "real/deep",
            "real/missing/more",
            "abs",
            "abs/deep",
            "abs/missing",
            "rel/deep",
            "chain/deep/x",
            "dangling",
            "dangling/below",
            "tofile",
            "file/child",
            "missing",
            "missing/a/b",
            "real/../abs/deep",
            "abs/",
            "abs/.",
            "abs/./deep",
            "chain/",
            "rel/deep/",
            "tofile/",
            "dangling/",
            "real//deep",
        ];
        let paths: Vec<PathBuf> = names.iter().map(|n| r.join(n)).collect();
        for order in [paths.clone(), paths.iter().rev().cloned().collect()] {
            let mut resolver = Resolver::default();
            for p in &order {
                assert_eq!(resolver.resolve(p), resolved(p), "{}", p.display());
            }
        }
        assert_ne!(resolved(&r.join("abs/deep")), r.join("abs/deep"), "control");
    }

    /// A program is found in a `PATH` directory (a link to one too), not as a directory, not in
    /// a relative or missing entry.
    #[test]
    fn programs_are_found_in_the_path_s_directories() {
        let d = tempfile::tempdir().unwrap();
        let (a, b) = (d.path().join("a"), d.path().join("b"));
        std::fs::create_dir_all(a.join("dir-named-tool")).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        std::fs::write(b.join("tool"), b"").unwrap();
        std::os::unix::fs::symlink(b.join("tool"), a.join("linked")).unwrap();
        let path = std::env::join_paths([a.clone(), "rel".into(), d.path().join("no"), b]).unwrap();
        let dirs = PathDirs::open(Some(path));
        assert!(dirs.has("tool") && dirs.has("linked"));
        assert!(!dirs.has("dir-named-tool") && !dirs.has("absent"));
        assert!(!PathDirs::open(None).has("tool"));
    }
}

#[cfg(test)]
mod holding_tests {
    use super::*;

    fn ctx(home: &Path, env: &[(&str, &Path)]) -> LaunchEnv {
        LaunchEnv {
            cwd: home.to_path_buf(),
            home: Some(home.to_path_buf()),
            passwd_home: None,
            exes: Vec::new(),
            config_home: None,
            data_home: None,
            runtime_dir: home.join("run"),
            other_runtime_dirs: Vec::new(),
            env: env.iter().map(|(k, v)| ((*k).into(), v.as_os_str().to_owned())).collect(),
            proxy_port: 0,
        }
    }

    /// The cache a working directory lies in, found by the directory each cache's path names:
    /// the cache itself, a directory deep inside, one reached through a link to it, a cache
    /// whose variable names a link; none for a directory beside the caches or for a cache that
    /// is not there. The path given is the cache's, resolved.
    #[test]
    fn the_cache_a_directory_lies_in_is_found_by_the_directory_it_names() {
        let d = tempfile::tempdir().unwrap();
        let home = d.path().canonicalize().unwrap();
        let registry = home.join(".cargo/registry/src/crate-1.0");
        std::fs::create_dir_all(&registry).unwrap();
        std::fs::create_dir_all(home.join("proj/src")).unwrap();
        std::fs::create_dir_all(home.join("real-npm/_cacache")).unwrap();
        std::os::unix::fs::symlink(home.join(".cargo/registry"), home.join("proj/reg")).unwrap();
        std::os::unix::fs::symlink(home.join("real-npm"), home.join("npm-link")).unwrap();
        let plain = ctx(&home, &[]);
        let npm_link = home.join("npm-link");
        let moved = ctx(&home, &[("npm_config_cache", &npm_link)]);
        // (what, the launch, the working directory, the cache found)
        type Case<'a> = (&'a str, &'a LaunchEnv, PathBuf, Option<(&'a str, PathBuf)>);
        let cases: &[Case<'_>] = &[
            ("the cache itself", &plain, home.join(".cargo"), Some(("cargo", home.join(".cargo")))),
            ("deep inside", &plain, registry.clone(), Some(("cargo", home.join(".cargo")))),
            (
                "through a link",
                &plain,
                home.join("proj/reg/src"),
                Some(("cargo", home.join(".cargo"))),
            ),
            (
                "a variable naming a link",
                &moved,
                home.join("real-npm/_cacache"),
                Some(("npm", home.join("real-npm"))),
            ),
            ("beside the caches", &plain, home.join("proj/src"), None),
            ("the home above them", &plain, home.clone(), None),
            ("a cache not there", &plain, home.join("real-npm/_cacache"), None),
        ];
        for (what, ctx, dir, want) in cases {
            let found = holding(ctx, dir).map(|c| (c.name, c.path));
            let want = want.as_ref().map(|(n, p)| (*n, p.clone()));
            assert_eq!(found, want, "{what}");
        }
    }
}
