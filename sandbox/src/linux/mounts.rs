//! The mount namespace: the host's tree read-only and nosuid, a private `/tmp` and `/dev/shm`,
//! writable paths bound back writable, protected paths read-only again, hidden paths covered,
//! the directories leading to those pinned, and a `/proc` of the new pid namespace.
//!
//! A mount point cannot be renamed or removed (`EBUSY`), but a directory that merely contains one
//! can, and the mount goes along: with `.git/hooks` bound read-only, `mv .git .git2` would take
//! the read-only hooks away and leave a fresh, writable `.git/hooks` to be made. So every
//! directory between a writable path and a path the sandbox must not change is bound onto itself
//! as well ("pinned"), with the writability it had.
//!
//! The sequence is a pure plan ([`plan`]: the resolved [`FsPlan`] and what the [`HostLayout`] offers
//! become a list of [`MountOp`]s, golden-tested per tier without root) and a thin executor
//! ([`execute`]) that performs each operation and names a failure by its
//! [`SetupStep`](crate::SetupStep).

use std::ffi::CStr;
use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::mount::MsFlags;

use super::sys;
use crate::{SandboxError, SetupStep};

/// The resolved filesystem plan (all paths canonical and existing).
#[derive(Debug, Clone, Default)]
pub struct FsPlan {
    /// Working directory (kept visible even under `/tmp`).
    pub cwd: PathBuf,
    /// Writable paths.
    pub writable: Vec<PathBuf>,
    /// Paths made read-only again (inside writable ones, or the sandgate config).
    pub read_only: Vec<PathBuf>,
    /// Directories to cover with an empty, unreadable tmpfs.
    pub hidden_dirs: Vec<PathBuf>,
    /// Files to cover with an empty, unreadable file.
    pub hidden_files: Vec<PathBuf>,
    /// Directories bound onto themselves so that they cannot be moved away (see [`pins`]).
    pub pinned: Vec<PathBuf>,
    /// Paths kept visible even under `/tmp` (besides `cwd` and the writable paths).
    pub visible: Vec<PathBuf>,
    /// Directories replaced by a read-only tmpfs with their files (paths canonical).
    pub provided: Vec<crate::spec::ProvidedDir>,
    /// Package caches mounted copy-on-write (paths canonical, none under `/tmp`).
    pub caches: Vec<crate::spec::CacheLayer>,
    /// What `/etc/resolv.conf` says inside (proxy mode: the DNS stub), bound over the host's.
    pub resolv_conf: Option<Vec<u8>>,
}

const TMP: &str = "/tmp";
const SHM: &str = "/dev/shm";
const PTS: &str = "/dev/pts";
const EMPTY: &str = "/tmp/.sandgate-empty";
const EMPTY_DIR: &str = "/tmp/.sandgate-empty-dir";
const RESOLV_CONF: &str = "/etc/resolv.conf";
const RESOLV_SOURCE: &str = "/tmp/.sandgate-resolv.conf";

/// Paths under `/tmp` that must stay visible on top of the private `/tmp`: the working directory,
/// the writable paths and the `visible` ones, without those nested inside another one (they come
/// along).
pub fn kept_under_tmp(cwd: &Path, writable: &[PathBuf], visible: &[PathBuf]) -> Vec<PathBuf> {
    let mut all: Vec<&Path> = std::iter::once(cwd)
        .chain(writable.iter().map(PathBuf::as_path))
        .chain(visible.iter().map(PathBuf::as_path))
        .filter(|p| p.starts_with(TMP))
        .collect();
    all.sort();
    all.dedup();
    let mut kept: Vec<PathBuf> = Vec::new();
    for p in all {
        if !kept.iter().any(|k| p.starts_with(k)) {
            kept.push(p.to_path_buf());
        }
    }
    kept
}

/// The directories to pin: every directory strictly between the outermost writable path that
/// holds one of `targets` (read-only or hidden paths, all canonical) and the target itself,
/// except writable paths (mounts already). Targets that are not in a writable path cannot be
/// moved anyway (their parent is read-only), nor can targets under a hidden directory be reached.
/// Sorted, parents first. A target at the top of a writable path costs nothing.
pub fn pins(writable: &[PathBuf], targets: &[&Path], hidden_dirs: &[PathBuf]) -> Vec<PathBuf> {
    let mut pinned: Vec<PathBuf> = Vec::new();
    for t in targets {
        // Writable paths first: they are few, hidden directories can be a hundred.
        let Some(root) =
            writable.iter().filter(|w| t.starts_with(w)).min_by_key(|w| w.as_os_str().len())
        else {
            continue;
        };
        if hidden_dirs.iter().any(|h| t.starts_with(h) && t != h) {
            continue;
        }
        let between = t.ancestors().skip(1).take_while(|a| *a != root.as_path());
        pinned.extend(between.filter(|a| !writable.iter().any(|w| w == a)).map(Path::to_path_buf));
    }
    pinned.sort();
    pinned.dedup();
    pinned
}

/// What the host offers that the plan depends on, looked at before the mounts start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostLayout {
    /// `/dev/shm` is a directory (it gets a private tmpfs).
    pub dev_shm: bool,
    /// `/dev/pts` is a directory (it gets a devpts instance of its own).
    pub dev_pts: bool,
    /// `/etc/resolv.conf` exists (only then is the sandbox's bound over it).
    pub resolv_conf: bool,
}

impl HostLayout {
    /// Looks at this host (`resolv_conf` only when the plan has one to bind).
    fn probe(fs: &FsPlan) -> HostLayout {
        HostLayout {
            dev_shm: Path::new(SHM).is_dir(),
            dev_pts: Path::new(PTS).is_dir(),
            resolv_conf: fs.resolv_conf.is_some() && std::fs::metadata(RESOLV_CONF).is_ok(),
        }
    }
}

/// Flags of the private `/tmp` and `/dev/shm`.
const TMPFS_FLAGS: MsFlags = MsFlags::MS_NOSUID.union(MsFlags::MS_NODEV);
const TMPFS_DATA: &CStr = c"mode=1777";
/// Flags of a provided directory's tmpfs (read-only with the rest of the tree).
const PROVIDED_FLAGS: MsFlags =
    MsFlags::MS_NOSUID.union(MsFlags::MS_NODEV).union(MsFlags::MS_NOEXEC);
const PROVIDED_DATA: &CStr = c"mode=0755";
const PROC_FLAGS: MsFlags = MsFlags::MS_NOSUID.union(MsFlags::MS_NODEV).union(MsFlags::MS_NOEXEC);
const DEVPTS_FLAGS: MsFlags = MsFlags::MS_NOSUID.union(MsFlags::MS_NOEXEC);
const DEVPTS_DATA: &CStr = c"newinstance,ptmxmode=0666,mode=0620";
/// Every bind is recursive: what is mounted below the source comes along.
const BIND_FLAGS: MsFlags = MsFlags::MS_BIND.union(MsFlags::MS_REC);
/// Set on the whole tree (recursively) once every mount is in place.
const READ_ONLY_ATTRS: u64 = sys::MOUNT_ATTR_RDONLY | sys::MOUNT_ATTR_NOSUID;

/// One step of building the mount namespace. [`plan`] makes the list (a pure function of the
/// resolved [`FsPlan`] and the [`HostLayout`]), [`execute`] performs it in order.
///
/// Steps marked "if present" look at the path when they run: an earlier step may have covered
/// it (a path under the private `/tmp` outside the trees put back, a directory below one hidden
/// a moment ago), and what is not there is out of reach already.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MountOp {
    /// Every mount private (recursive), so that nothing done here reaches the host.
    MakePrivate,
    /// A detached copy of the tree at this path under `/tmp`, taken before the private `/tmp`
    /// hides it (whether it is a directory is read now too).
    CloneTree(PathBuf),
    /// A private tmpfs (`/tmp`, `/dev/shm`): nosuid, nodev, mode 1777.
    Tmpfs(PathBuf),
    /// A file holding this text bound over `/etc/resolv.conf` (made on the private `/tmp`,
    /// removed from it once bound).
    ResolvConf(Vec<u8>),
    /// The mode-000 file bound over hidden files, held by an `O_PATH` descriptor.
    EmptyFile,
    /// The mode-000 directory bound over hidden directories, held by an `O_PATH` descriptor.
    EmptyDir,
    /// The tree cloned from this path put back on top of the private `/tmp`.
    PutBack(PathBuf),
    /// A writable path bound onto itself: a mount of its own, made writable again below.
    BindWritable(PathBuf),
    /// The upper and work directories of these caches' layers opened (`O_PATH`), while every
    /// path still names the host's (an overlay is later given them through the descriptors).
    OpenLayers(Vec<crate::spec::CacheLayer>),
    /// A package cache mounted copy-on-write (an overlay of the layer on the host's directory;
    /// where the kernel refuses the overlay, the layer bound alone), made writable again below.
    Overlay(crate::spec::CacheLayer),
    /// The cache overlay mounted at this path writable again (through the descriptor of its
    /// root taken when it was mounted; nothing when it was not).
    CacheWritable(PathBuf),
    /// A directory replaced by a tmpfs holding the given files (read-only with the tree).
    Provide(crate::spec::ProvidedDir),
    /// A protected path bound onto itself (read-only with the tree), if present.
    BindReadOnly(PathBuf),
    /// A hidden directory covered by the empty directory, if present.
    HideDir(PathBuf),
    /// The empty directory removed from `/tmp` (only if the path still names ours).
    RemoveEmptyDir,
    /// A hidden file covered by the empty file, if present.
    HideFile(PathBuf),
    /// The empty file removed from `/tmp` (only if the path still names ours).
    RemoveEmptyFile,
    /// A `/proc` of the new pid namespace: nosuid, nodev, noexec.
    Proc,
    /// A devpts instance of the sandbox's own on `/dev/pts`.
    Devpts,
    /// Every mount read-only and nosuid (recursively). Mounts the host locked stay as they are.
    ReadOnly,
    /// This mount writable again (not recursive).
    Writable(PathBuf),
    /// A directory on the way to a protected path bound onto itself (see [`pins`]), refused if
    /// it is no longer a directory.
    Pin(PathBuf),
}

/// The mount steps for `fs` on `host`, in the order they run. The order matters:
/// - trees under `/tmp` are cloned before the private `/tmp` covers them, and put back after the
///   files the hides need are made on it (a tree put back on `/tmp` itself would cover them);
/// - provided directories come before hidden paths (one below a hidden path is hidden with it);
/// - read-only is set on the whole tree last but for the writable mounts, which get their
///   writability back after it;
/// - pins come last, so that each is a copy of what is there by then (with the read-only and
///   hidden mounts inside); parents first, so a deeper pin lands in the copy.
pub fn plan(fs: &FsPlan, host: &HostLayout) -> Vec<MountOp> {
    let mut ops = vec![MountOp::MakePrivate];
    // Before the private /tmp: a layer's directories may lie where it will hide them.
    if !fs.caches.is_empty() {
        ops.push(MountOp::OpenLayers(fs.caches.clone()));
    }
    let kept = kept_under_tmp(&fs.cwd, &fs.writable, &fs.visible);
    ops.extend(kept.iter().cloned().map(MountOp::CloneTree));
    ops.push(MountOp::Tmpfs(PathBuf::from(TMP)));
    if host.dev_shm {
        ops.push(MountOp::Tmpfs(PathBuf::from(SHM)));
    }
    // While /tmp is certainly our tmpfs (no tree put back on it yet).
    if let Some(text) = fs.resolv_conf.as_ref().filter(|_| host.resolv_conf) {
        ops.push(MountOp::ResolvConf(text.clone()));
    }
    if !fs.hidden_files.is_empty() {
        ops.push(MountOp::EmptyFile);
    }
    if !fs.hidden_dirs.is_empty() {
        ops.push(MountOp::EmptyDir);
    }
    ops.extend(kept.iter().cloned().map(MountOp::PutBack));
    // Writable paths get their own mount so that they can be writable in a read-only tree (a
    // tree put back is one already).
    let mut writable = fs.writable.clone();
    writable.sort();
    ops.extend(writable.iter().filter(|w| !kept.contains(w)).cloned().map(MountOp::BindWritable));
    // Before the hides: what is hidden inside a cache (credentials next to it) is covered on
    // top of the layer.
    ops.extend(fs.caches.iter().cloned().map(MountOp::Overlay));
    ops.extend(fs.provided.iter().cloned().map(MountOp::Provide));
    ops.extend(fs.read_only.iter().cloned().map(MountOp::BindReadOnly));
    // Hidden directories: each a bind of one empty directory of mode 000, removed once bound
    // (nothing can be created in a removed directory, and the binds end up read-only with the
    // rest of the tree). A bind costs a fraction of a tmpfs of its own per directory, and a home
    // directory can hide a hundred of them.
    if !fs.hidden_dirs.is_empty() {
        ops.extend(fs.hidden_dirs.iter().cloned().map(MountOp::HideDir));
        ops.push(MountOp::RemoveEmptyDir);
    }
    if !fs.hidden_files.is_empty() {
        ops.extend(fs.hidden_files.iter().cloned().map(MountOp::HideFile));
        ops.push(MountOp::RemoveEmptyFile);
    }
    ops.push(MountOp::Proc);
    // A devpts instance of our own: the host's terminals (/dev/pts/N, owned by the same user or,
    // as root, by anyone) are out of sight, and /dev/ptmx allocates ptys here (the kernel looks
    // for "pts" next to the ptmx node in the caller's mount namespace).
    if host.dev_pts {
        ops.push(MountOp::Devpts);
    }
    ops.push(MountOp::ReadOnly);
    ops.push(MountOp::Writable(PathBuf::from(TMP)));
    if host.dev_shm {
        ops.push(MountOp::Writable(PathBuf::from(SHM)));
    }
    ops.extend(writable.into_iter().map(MountOp::Writable));
    ops.extend(fs.caches.iter().map(|c| MountOp::CacheWritable(c.path.clone())));
    ops.extend(fs.pinned.iter().cloned().map(MountOp::Pin));
    ops
}

impl MountOp {
    /// The setup step a failure of this operation is reported as (a step may have several
    /// parts: `PutBack` makes the mount point, then moves the tree).
    fn step(&self) -> SetupStep {
        match self {
            MountOp::MakePrivate => SetupStep::MakePrivate,
            MountOp::OpenLayers(_) => SetupStep::Open(PathBuf::from("cache layers")),
            MountOp::CloneTree(p) => SetupStep::OpenTree(p.clone()),
            MountOp::Tmpfs(p) => SetupStep::MountTmpfs(p.clone()),
            MountOp::ResolvConf(_) => SetupStep::Bind(PathBuf::from(RESOLV_CONF)),
            MountOp::EmptyFile => SetupStep::Create(PathBuf::from(EMPTY)),
            MountOp::EmptyDir => SetupStep::Create(PathBuf::from(EMPTY_DIR)),
            MountOp::PutBack(p) => SetupStep::PutBack(p.clone()),
            MountOp::BindWritable(p) | MountOp::BindReadOnly(p) => SetupStep::Bind(p.clone()),
            MountOp::Overlay(c) => SetupStep::Bind(c.path.clone()),
            MountOp::Provide(d) => SetupStep::Provide(d.path.clone()),
            MountOp::HideDir(p) | MountOp::HideFile(p) => SetupStep::Hide(p.clone()),
            MountOp::RemoveEmptyDir => SetupStep::Remove(PathBuf::from(EMPTY_DIR)),
            MountOp::RemoveEmptyFile => SetupStep::Remove(PathBuf::from(EMPTY)),
            MountOp::Proc => SetupStep::MountProc,
            MountOp::Devpts => SetupStep::MountDevpts,
            MountOp::ReadOnly => SetupStep::MakeReadOnly,
            MountOp::Writable(p) | MountOp::CacheWritable(p) => SetupStep::MakeWritable(p.clone()),
            MountOp::Pin(p) => SetupStep::Pin(p.clone()),
        }
    }
}

impl fmt::Display for MountOp {
    /// One line per operation with its flags, for golden tests and debugging.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let data = |d: &CStr| d.to_string_lossy().into_owned();
        match self {
            MountOp::MakePrivate => write!(f, "private / ({})", flag_names(MsFlags::MS_REC)),
            MountOp::OpenLayers(c) => write!(f, "open {} cache layers", c.len()),
            MountOp::CloneTree(p) => write!(f, "clone {}", p.display()),
            MountOp::Tmpfs(p) => {
                write!(
                    f,
                    "tmpfs {} ({},{})",
                    p.display(),
                    flag_names(TMPFS_FLAGS),
                    data(TMPFS_DATA)
                )
            }
            MountOp::ResolvConf(t) => write!(f, "bind {} ({} bytes, 0444)", RESOLV_CONF, t.len()),
            MountOp::EmptyFile => write!(f, "create {EMPTY} (0000)"),
            MountOp::EmptyDir => write!(f, "create {EMPTY_DIR} (0000)"),
            MountOp::PutBack(p) => write!(f, "put back {}", p.display()),
            MountOp::BindWritable(p) => {
                write!(f, "bind {} ({}, writable)", p.display(), flag_names(BIND_FLAGS))
            }
            MountOp::Overlay(c) => write!(
                f,
                "overlay {} (upper {}, {})",
                c.path.display(),
                c.upper.display(),
                flag_names(OVERLAY_FLAGS)
            ),
            MountOp::Provide(d) => write!(
                f,
                "provide {} ({} files; tmpfs {},{})",
                d.path.display(),
                d.files.len(),
                flag_names(PROVIDED_FLAGS),
                data(PROVIDED_DATA)
            ),
            MountOp::BindReadOnly(p) => {
                write!(f, "bind {} ({}, read-only)", p.display(), flag_names(BIND_FLAGS))
            }
            MountOp::HideDir(p) => write!(f, "hide dir {}", p.display()),
            MountOp::RemoveEmptyDir => write!(f, "remove {EMPTY_DIR}"),
            MountOp::HideFile(p) => write!(f, "hide file {}", p.display()),
            MountOp::RemoveEmptyFile => write!(f, "remove {EMPTY}"),
            MountOp::Proc => write!(f, "proc /proc ({})", flag_names(PROC_FLAGS)),
            MountOp::Devpts => {
                write!(f, "devpts {PTS} ({},{})", flag_names(DEVPTS_FLAGS), data(DEVPTS_DATA))
            }
            MountOp::ReadOnly => f.write_str("read-only / (rdonly,nosuid; recursive)"),
            MountOp::Writable(p) => write!(f, "writable {}", p.display()),
            MountOp::CacheWritable(p) => write!(f, "writable cache {}", p.display()),
            MountOp::Pin(p) => write!(f, "pin {}", p.display()),
        }
    }
}

/// `nosuid,nodev,...` for the flags the plan uses.
fn flag_names(flags: MsFlags) -> String {
    let names = [
        (MsFlags::MS_BIND, "bind"),
        (MsFlags::MS_REC, "rec"),
        (MsFlags::MS_NOSUID, "nosuid"),
        (MsFlags::MS_NODEV, "nodev"),
        (MsFlags::MS_NOEXEC, "noexec"),
    ];
    let known: Vec<&str> =
        names.iter().filter(|(f, _)| flags.contains(*f)).map(|(_, n)| *n).collect();
    known.join(",")
}

/// Builds the mount namespace's view. Runs inside the new user + mount namespaces, with the
/// capabilities of the user namespace, before anything else is restricted.
/// Returns the caches mounted copy-on-write (the only ones Landlock may let the command write).
pub fn build(fs: &FsPlan) -> Result<Vec<PathBuf>, SandboxError> {
    execute(&plan(fs, &HostLayout::probe(fs)))
}

/// Performs `ops` in order; the first failure ends it, named by its step. Returns the paths of
/// the cache overlays it mounted.
pub fn execute(ops: &[MountOp]) -> Result<Vec<PathBuf>, SandboxError> {
    let mut ex = Executor::default();
    for op in ops {
        ex.run(op)?;
    }
    Ok(ex.caches.into_iter().map(|(p, _)| p).collect())
}

/// What the operations hand on to later ones.
#[derive(Debug, Default)]
struct Executor {
    /// Trees cloned before the private `/tmp`: path, tree, whether it is a directory.
    trees: Vec<(PathBuf, OwnedFd, bool)>,
    /// The empty file bound over hidden files ([`MountOp::EmptyFile`]).
    empty: Option<std::fs::File>,
    /// The empty directory bound over hidden directories ([`MountOp::EmptyDir`]).
    empty_dir: Option<std::fs::File>,
    /// Cache overlays mounted: path, and a descriptor of the mount's root.
    caches: Vec<(PathBuf, std::fs::File)>,
    /// Caches' layers opened before the private `/tmp`: path, upper and work directories.
    layers: Vec<(PathBuf, std::fs::File, std::fs::File)>,
}

/// Tags a failure with its step.
fn at<T>(step: SetupStep, r: io::Result<T>) -> Result<T, SandboxError> {
    r.map_err(SandboxError::setup(step))
}

/// Whether `p` exists (as itself: a symbolic link counts).
fn present(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok()
}

impl Executor {
    fn run(&mut self, op: &MountOp) -> Result<(), SandboxError> {
        let step = || op.step();
        match op {
            MountOp::MakePrivate => at(
                step(),
                nix_mount(None, Path::new("/"), None, MsFlags::MS_REC | MsFlags::MS_PRIVATE, None),
            ),
            MountOp::CloneTree(p) => {
                // Whether it is a directory must be read now: once the private /tmp covers it,
                // the path no longer exists and its mount point would be made as a file
                // (move_mount: EINVAL).
                let tree = at(step(), sys::open_tree_clone(p))?;
                self.trees.push((p.clone(), tree, p.is_dir()));
                Ok(())
            }
            MountOp::Tmpfs(p) => at(step(), mount_fs(c"tmpfs", p, TMPFS_FLAGS, Some(TMPFS_DATA))),
            MountOp::ResolvConf(text) => resolv_conf(text),
            MountOp::EmptyFile => {
                // Held by an O_PATH descriptor, because a kept tree put back on /tmp itself
                // would cover its path.
                at(
                    step(),
                    std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .mode(0o000)
                        .open(EMPTY),
                )?;
                let opened =
                    std::fs::OpenOptions::new().read(true).custom_flags(libc::O_PATH).open(EMPTY);
                self.empty = Some(at(SetupStep::Open(PathBuf::from(EMPTY)), opened)?);
                Ok(())
            }
            MountOp::EmptyDir => {
                at(step(), std::fs::create_dir(EMPTY_DIR))?;
                at(
                    SetupStep::Chmod(PathBuf::from(EMPTY_DIR)),
                    std::fs::set_permissions(EMPTY_DIR, std::fs::Permissions::from_mode(0o000)),
                )?;
                let opened = std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
                    .open(EMPTY_DIR);
                self.empty_dir = Some(at(SetupStep::Open(PathBuf::from(EMPTY_DIR)), opened)?);
                Ok(())
            }
            MountOp::PutBack(p) => {
                let Some(i) = self.trees.iter().position(|(t, _, _)| t == p) else {
                    return at(step(), Err(io::Error::other("no tree cloned from this path")));
                };
                let (_, tree, is_dir) = self.trees.swap_remove(i);
                at(SetupStep::MountPoint(p.clone()), make_mount_point(p, is_dir))?;
                at(step(), sys::move_mount(&tree, p))
            }
            MountOp::BindWritable(p) => at(step(), bind(p, p)),
            MountOp::OpenLayers(caches) => {
                let open = |p: &Path| {
                    std::fs::OpenOptions::new()
                        .read(true)
                        .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
                        .open(p)
                };
                for c in caches {
                    // A layer that cannot be opened leaves its cache as it is (read-only).
                    if let (Ok(upper), Ok(work)) = (open(&c.upper), open(&c.work)) {
                        self.layers.push((c.path.clone(), upper, work));
                    }
                }
                Ok(())
            }
            MountOp::Overlay(c) => {
                let Some((_, upper, work)) = self.layers.iter().find(|(p, _, _)| *p == c.path)
                else {
                    return Ok(());
                };
                if let Some(root) = at(step(), overlay(c, upper, work))? {
                    self.caches.push((c.path.clone(), root));
                }
                Ok(())
            }
            MountOp::CacheWritable(p) => match self.caches.iter().find(|(c, _)| c == p) {
                Some((_, root)) => {
                    let at_root = PathBuf::from(format!("/proc/self/fd/{}", root.as_raw_fd()));
                    at(step(), sys::mount_setattr(&at_root, 0, sys::MOUNT_ATTR_RDONLY, false))
                }
                None => Ok(()),
            },
            MountOp::Provide(d) => at(step(), provide(&d.path, &d.files)),
            MountOp::BindReadOnly(p) if present(p) => at(step(), bind(p, p)),
            MountOp::HideDir(p) if present(p) => {
                let source = fd_path(self.empty_dir.as_ref(), op)?;
                at(step(), bind(&source, p))
            }
            MountOp::HideFile(p) if present(p) => {
                let source = fd_path(self.empty.as_ref(), op)?;
                at(step(), bind(&source, p))
            }
            MountOp::BindReadOnly(_) | MountOp::HideDir(_) | MountOp::HideFile(_) => Ok(()),
            MountOp::RemoveEmptyDir => match &self.empty_dir {
                Some(dir) if names(dir, EMPTY_DIR) => at(step(), std::fs::remove_dir(EMPTY_DIR)),
                _ => Ok(()),
            },
            MountOp::RemoveEmptyFile => match &self.empty {
                Some(file) if names(file, EMPTY) => at(step(), std::fs::remove_file(EMPTY)),
                _ => Ok(()),
            },
            MountOp::Proc => at(step(), mount_fs(c"proc", Path::new("/proc"), PROC_FLAGS, None)),
            MountOp::Devpts => {
                at(step(), mount_fs(c"devpts", Path::new(PTS), DEVPTS_FLAGS, Some(DEVPTS_DATA)))
            }
            MountOp::ReadOnly => {
                at(step(), sys::mount_setattr(Path::new("/"), READ_ONLY_ATTRS, 0, true))
            }
            MountOp::Writable(p) => {
                at(step(), sys::mount_setattr(p, 0, sys::MOUNT_ATTR_RDONLY, false))
            }
            MountOp::Pin(d) => {
                // The launcher resolved these paths; one that is no longer a directory (a
                // symlink put there since) is refused, not followed.
                let checked = match std::fs::symlink_metadata(d).map(|m| m.is_dir()) {
                    Ok(true) => Ok(()),
                    Ok(false) => {
                        Err(io::Error::new(io::ErrorKind::InvalidInput, "no longer a directory"))
                    }
                    Err(e) => Err(e),
                };
                at(step(), checked.and_then(|()| bind(d, d)))
            }
        }
    }
}

/// `/proc/self/fd/N` of the empty file or directory a hide binds (made by an earlier step).
fn fd_path(held: Option<&std::fs::File>, op: &MountOp) -> Result<PathBuf, SandboxError> {
    match held {
        Some(f) => Ok(PathBuf::from(format!("/proc/self/fd/{}", f.as_raw_fd()))),
        None => at(op.step(), Err(io::Error::other("the empty file or directory was not made"))),
    }
}

/// Whether `path` still names the file held open as `held` (not a put-back real /tmp's entry).
fn names(held: &std::fs::File, path: &str) -> bool {
    let ours = held.metadata().ok();
    let named = std::fs::symlink_metadata(path).ok();
    matches!((ours, named), (Some(a), Some(b)) if a.dev() == b.dev() && a.ino() == b.ino())
}

/// Binds a file holding `text` over `/etc/resolv.conf` (the file it names, when it is a
/// symbolic link, as the resolver reads it). Without one there is nothing to cover (see
/// [`HostLayout::resolv_conf`]): the C library's default name server is 127.0.0.1, the stub too.
fn resolv_conf(text: &[u8]) -> Result<(), SandboxError> {
    let made = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o444)
        .open(RESOLV_SOURCE)
        .and_then(|mut f| io::Write::write_all(&mut f, text));
    at(SetupStep::Create(PathBuf::from(RESOLV_SOURCE)), made)?;
    at(
        SetupStep::Bind(PathBuf::from(RESOLV_CONF)),
        bind(Path::new(RESOLV_SOURCE), Path::new(RESOLV_CONF)),
    )?;
    at(SetupStep::Remove(PathBuf::from(RESOLV_SOURCE)), std::fs::remove_file(RESOLV_SOURCE))
}

/// Mounts a tmpfs on `dir` (made first when the private `/tmp` hid it) holding `files`; the
/// mount becomes read-only with the rest of the tree.
fn provide(dir: &Path, files: &[(PathBuf, Vec<u8>)]) -> io::Result<()> {
    if std::fs::symlink_metadata(dir).is_err() {
        std::fs::create_dir_all(dir)?;
    }
    mount_fs(c"tmpfs", dir, PROVIDED_FLAGS, Some(PROVIDED_DATA))?;
    for (rel, contents) in files {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let mut f =
            std::fs::OpenOptions::new().write(true).create_new(true).mode(0o444).open(&path)?;
        io::Write::write_all(&mut f, contents)?;
    }
    Ok(())
}

/// `mount(2)` through nix.
fn nix_mount(
    source: Option<&Path>,
    target: &Path,
    fstype: Option<&CStr>,
    flags: MsFlags,
    data: Option<&CStr>,
) -> io::Result<()> {
    nix::mount::mount(source, target, fstype, flags, data).map_err(io::Error::from)
}

/// A new instance of the pseudo file system `fstype` (named as its own source) on `target`.
fn mount_fs(fstype: &CStr, target: &Path, flags: MsFlags, data: Option<&CStr>) -> io::Result<()> {
    nix::mount::mount(Some(fstype), target, Some(fstype), flags, data).map_err(io::Error::from)
}

/// Flags of a cache's overlay (read-only with the tree, then writable again like a writable path).
const OVERLAY_FLAGS: MsFlags = MsFlags::MS_NOSUID.union(MsFlags::MS_NODEV);

/// Mounts cache `c` copy-on-write: an overlay whose lower layer is the host's directory at
/// `c.path` (named before the overlay covers it) and whose upper layer is `c.upper`. A kernel
/// that refuses overlayfs here (no overlay in a user namespace before Linux 5.11, an upper file
/// system without user extended attributes) gets `c.upper` bound alone: the tool starts from the
/// sandbox's own layer without the host's contents, which is slower but writes nothing back
/// either. Said once on stderr, with why.
///
/// The mount goes exactly where the launcher resolved: the directory is opened without following
/// a link and must still be `c.path` (a link swapped in on the way since is refused), the mount is
/// made on that descriptor, and the path must then show a mount other than before. Returns a
/// descriptor of the new mount's root (the later writability is set through it, never through a
/// path that might name the host's mount), or `None` when the cache stays as it is.
fn overlay(
    c: &crate::spec::CacheLayer,
    upper: &std::fs::File,
    work: &std::fs::File,
) -> io::Result<Option<std::fs::File>> {
    let open = || {
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW)
            .open(&c.path)
    };
    // Not there inside (under a /tmp that is not kept): nothing to layer.
    let Ok(before) = open() else { return Ok(None) };
    let at = PathBuf::from(format!("/proc/self/fd/{}", before.as_raw_fd()));
    if std::fs::read_link(&at)? != c.path {
        return Ok(None); // changed since the launcher resolved it
    }
    let fd_path = |f: &std::fs::File| PathBuf::from(format!("/proc/self/fd/{}", f.as_raw_fd()));
    let mounted = mount_overlay(&at, &fd_path(upper), &fd_path(work), &at);
    if let Err(e) = mounted {
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| {
            eprintln!(
                "sandgate: the kernel refused a copy-on-write package cache here ({e}); the \
                 caches start from the sandbox's own layers, without the host's contents"
            );
        });
        bind(&fd_path(upper), &at)?;
    }
    let after = open()?;
    if mount_id(&after)? == mount_id(&before)? {
        return Ok(None); // the path does not show the new mount: never made writable
    }
    Ok(Some(after))
}

/// The id of the mount `f` is on: `statx`'s `STATX_MNT_ID` (Linux 5.8; one call, where reading
/// `/proc/self/fdinfo` costs an open, a read and a close), else `mnt_id` of `/proc/self/fdinfo`.
fn mount_id(f: &std::fs::File) -> io::Result<u64> {
    if let Some(id) = sys::statx_mount_id(f.as_fd()) {
        return Ok(id);
    }
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", f.as_raw_fd()))?;
    info.lines()
        .find_map(|l| l.strip_prefix("mnt_id:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| io::Error::other("no mnt_id in fdinfo"))
}

/// An overlay of `upper` (with `work`) on `lower` at `target`, as a cache layer is mounted
/// (`sandgate doctor` tries the same call).
pub(super) fn mount_overlay(
    lower: &Path,
    upper: &Path,
    work: &Path,
    target: &Path,
) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let mut data = b"lowerdir=".to_vec();
    for (i, (key, p)) in
        [("", lower), (",upperdir=", upper), (",workdir=", work)].into_iter().enumerate()
    {
        if i > 0 {
            data.extend_from_slice(key.as_bytes());
        }
        data.extend_from_slice(p.as_os_str().as_bytes());
    }
    // In a user namespace the overlay keeps its metadata (opaque directories, whiteouts) in
    // `user.overlay.*` attributes; without `userxattr` it cannot, and removing a directory that
    // comes from the host's cache fails with EIO. Through the overlay, those names are its own:
    // a process inside can neither set nor read them.
    data.extend_from_slice(b",userxattr");
    let data = std::ffi::CString::new(data).map_err(io::Error::other)?;
    nix_mount(Some(Path::new("overlay")), target, Some(c"overlay"), OVERLAY_FLAGS, Some(&data))
}

fn bind(source: &Path, target: &Path) -> io::Result<()> {
    nix_mount(Some(source), target, None, BIND_FLAGS, None)
}

fn make_mount_point(path: &Path, dir: bool) -> io::Result<()> {
    if dir {
        std::fs::create_dir_all(path)?;
        return Ok(());
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let f = std::fs::OpenOptions::new().write(true).create(true).truncate(false).open(path)?;
    f.set_permissions(std::fs::Permissions::from_mode(0o600))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST: HostLayout = HostLayout { dev_shm: true, dev_pts: true, resolv_conf: true };

    fn paths(s: &[&str]) -> Vec<PathBuf> {
        s.iter().map(PathBuf::from).collect()
    }

    /// What `resolve` makes for a home `/h` and a project `/h/p`: the credential directories and
    /// files hidden, sandgate's config read-only, the home and the launcher kept visible.
    fn run_tier() -> FsPlan {
        FsPlan {
            cwd: "/h/p".into(),
            read_only: paths(&["/h/.config/sandgate"]),
            hidden_dirs: paths(&["/h/.aws", "/h/.ssh"]),
            hidden_files: paths(&["/etc/shadow", "/h/.netrc"]),
            visible: paths(&["/h", "/usr/bin/sandgate"]),
            ..FsPlan::default()
        }
    }

    /// `build`: the project and a cache writable, the project's top-level protected entries and
    /// git hooks read-only, and the way to the hooks pinned.
    fn build_tier() -> FsPlan {
        let mut fs = run_tier();
        fs.writable = paths(&["/h/p", "/h/.cargo"]);
        fs.read_only =
            paths(&["/h/.config/sandgate", "/h/p/.envrc", "/h/p/.git/hooks", "/h/p/.vscode"]);
        let targets: Vec<&Path> = fs.read_only.iter().map(PathBuf::as_path).collect();
        fs.pinned = pins(&fs.writable, &targets, &fs.hidden_dirs);
        fs.resolv_conf = Some(b"nameserver 127.0.0.1\n".to_vec());
        fs.provided = vec![crate::spec::ProvidedDir {
            path: "/h/.config/git".into(),
            files: vec![("config".into(), b"[core]\n".to_vec())],
        }];
        fs
    }

    fn lines(ops: &[MountOp]) -> Vec<String> {
        ops.iter().map(ToString::to_string).collect()
    }

    #[track_caller]
    fn golden(fs: &FsPlan, host: &HostLayout, want: &[&str]) {
        let got = lines(&plan(fs, host));
        assert_eq!(got, want, "\ngot:\n{}\n", got.join("\n"));
    }

    #[test]
    fn the_run_tier_hides_and_makes_everything_read_only() {
        golden(
            &run_tier(),
            &HOST,
            &[
                "private / (rec)",
                "tmpfs /tmp (nosuid,nodev,mode=1777)",
                "tmpfs /dev/shm (nosuid,nodev,mode=1777)",
                "create /tmp/.sandgate-empty (0000)",
                "create /tmp/.sandgate-empty-dir (0000)",
                "bind /h/.config/sandgate (bind,rec, read-only)",
                "hide dir /h/.aws",
                "hide dir /h/.ssh",
                "remove /tmp/.sandgate-empty-dir",
                "hide file /etc/shadow",
                "hide file /h/.netrc",
                "remove /tmp/.sandgate-empty",
                "proc /proc (nosuid,nodev,noexec)",
                "devpts /dev/pts (nosuid,noexec,newinstance,ptmxmode=0666,mode=0620)",
                "read-only / (rdonly,nosuid; recursive)",
                "writable /tmp",
                "writable /dev/shm",
            ],
        );
    }

    #[test]
    fn the_net_tier_binds_the_stubs_resolver_configuration() {
        let mut fs = run_tier();
        fs.resolv_conf = Some(b"nameserver 127.0.0.1\n".to_vec());
        let got = lines(&plan(&fs, &HOST));
        let at =
            |l: &str| got.iter().position(|g| g == l).unwrap_or_else(|| panic!("{l}: {got:?}"));
        // On our /tmp, after its tmpfs and before anything else is made there.
        let resolv = at("bind /etc/resolv.conf (21 bytes, 0444)");
        assert_eq!(resolv, at("tmpfs /dev/shm (nosuid,nodev,mode=1777)") + 1);
        assert_eq!(resolv + 1, at("create /tmp/.sandgate-empty (0000)"));
        // Otherwise the run tier's plan.
        let mut without = got.clone();
        without.remove(resolv);
        assert_eq!(without, lines(&plan(&run_tier(), &HOST)));
        // A host without /etc/resolv.conf: nothing to cover.
        let bare = HostLayout { resolv_conf: false, ..HOST };
        assert_eq!(lines(&plan(&fs, &bare)), lines(&plan(&run_tier(), &bare)));
    }

    #[test]
    fn the_build_tier_binds_writable_paths_and_pins_the_way_to_protected_ones() {
        golden(
            &build_tier(),
            &HOST,
            &[
                "private / (rec)",
                "tmpfs /tmp (nosuid,nodev,mode=1777)",
                "tmpfs /dev/shm (nosuid,nodev,mode=1777)",
                "bind /etc/resolv.conf (21 bytes, 0444)",
                "create /tmp/.sandgate-empty (0000)",
                "create /tmp/.sandgate-empty-dir (0000)",
                // Sorted: the writable paths, each a mount of its own.
                "bind /h/.cargo (bind,rec, writable)",
                "bind /h/p (bind,rec, writable)",
                "provide /h/.config/git (1 files; tmpfs nosuid,nodev,noexec,mode=0755)",
                // The top-level rule's entries and the hooks, inside the writable project.
                "bind /h/.config/sandgate (bind,rec, read-only)",
                "bind /h/p/.envrc (bind,rec, read-only)",
                "bind /h/p/.git/hooks (bind,rec, read-only)",
                "bind /h/p/.vscode (bind,rec, read-only)",
                "hide dir /h/.aws",
                "hide dir /h/.ssh",
                "remove /tmp/.sandgate-empty-dir",
                "hide file /etc/shadow",
                "hide file /h/.netrc",
                "remove /tmp/.sandgate-empty",
                "proc /proc (nosuid,nodev,noexec)",
                "devpts /dev/pts (nosuid,noexec,newinstance,ptmxmode=0666,mode=0620)",
                "read-only / (rdonly,nosuid; recursive)",
                "writable /tmp",
                "writable /dev/shm",
                "writable /h/.cargo",
                "writable /h/p",
                // Last: a copy of .git with the read-only hooks inside, so `mv .git` fails.
                "pin /h/p/.git",
            ],
        );
    }

    /// A project under /tmp survives the private /tmp: cloned before it, put back after the
    /// empty file and directory are made, and not bound a second time.
    #[test]
    fn paths_under_tmp_are_cloned_and_put_back() {
        let mut fs = build_tier();
        fs.cwd = "/tmp/w/p".into();
        fs.writable = paths(&["/tmp/w/p"]);
        fs.visible = paths(&["/h", "/tmp/w/target/debug/sandgate"]);
        fs.read_only = paths(&["/tmp/w/p/.envrc"]);
        fs.pinned = Vec::new();
        fs.provided = Vec::new();
        fs.resolv_conf = None;
        let bare = HostLayout { dev_shm: false, dev_pts: false, resolv_conf: false };
        golden(
            &fs,
            &bare,
            &[
                "private / (rec)",
                "clone /tmp/w/p",
                "clone /tmp/w/target/debug/sandgate",
                "tmpfs /tmp (nosuid,nodev,mode=1777)",
                "create /tmp/.sandgate-empty (0000)",
                "create /tmp/.sandgate-empty-dir (0000)",
                "put back /tmp/w/p",
                "put back /tmp/w/target/debug/sandgate",
                "bind /tmp/w/p/.envrc (bind,rec, read-only)",
                "hide dir /h/.aws",
                "hide dir /h/.ssh",
                "remove /tmp/.sandgate-empty-dir",
                "hide file /etc/shadow",
                "hide file /h/.netrc",
                "remove /tmp/.sandgate-empty",
                "proc /proc (nosuid,nodev,noexec)",
                "read-only / (rdonly,nosuid; recursive)",
                "writable /tmp",
                "writable /tmp/w/p",
            ],
        );
    }

    /// The walls in every plan: nothing is bound after the tree turns read-only except the
    /// pins and the writability of exactly the writable mounts; hides come after every bind
    /// that could cover them again; nothing is hidden or made without something to hide.
    #[test]
    fn every_plan_keeps_the_order_of_the_walls() {
        let mut nothing_hidden = run_tier();
        nothing_hidden.hidden_dirs.clear();
        nothing_hidden.hidden_files.clear();
        for (name, fs) in
            [("run", run_tier()), ("build", build_tier()), ("nothing hidden", nothing_hidden)]
        {
            let ops = plan(&fs, &HOST);
            let pos = |f: &dyn Fn(&MountOp) -> bool| ops.iter().position(f);
            let read_only = pos(&|o| *o == MountOp::ReadOnly).expect("read-only");
            for (i, op) in ops.iter().enumerate() {
                let late = matches!(op, MountOp::Writable(_) | MountOp::Pin(_));
                assert_eq!(i > read_only, late, "{name}: {op} at {i}");
                let bind = matches!(
                    op,
                    MountOp::BindWritable(_) | MountOp::BindReadOnly(_) | MountOp::Provide(_)
                );
                let first_hide = pos(&|o| matches!(o, MountOp::HideDir(_) | MountOp::HideFile(_)));
                if let (true, Some(h)) = (bind, first_hide) {
                    assert!(i < h, "{name}: {op} after a hide");
                }
            }
            let mut writable: Vec<&Path> = vec![Path::new(TMP), Path::new(SHM)];
            let mut sorted = fs.writable.clone();
            sorted.sort();
            writable.extend(sorted.iter().map(PathBuf::as_path));
            let made: Vec<&Path> = ops
                .iter()
                .filter_map(|o| match o {
                    MountOp::Writable(p) => Some(p.as_path()),
                    _ => None,
                })
                .collect();
            assert_eq!(made, writable, "{name}");
            let hidden = fs.hidden_dirs.len() + fs.hidden_files.len();
            let hides =
                ops.iter().filter(|o| matches!(o, MountOp::HideDir(_) | MountOp::HideFile(_)));
            assert_eq!(hides.count(), hidden, "{name}");
            let made_empty =
                ops.iter().any(|o| matches!(o, MountOp::EmptyDir | MountOp::EmptyFile));
            assert_eq!(made_empty, hidden > 0, "{name}");
        }
    }

    /// A failed operation is reported as the step it was before the plan existed.
    #[test]
    fn operations_fail_as_their_setup_step() {
        let table = [
            (MountOp::MakePrivate, "make / private"),
            (MountOp::CloneTree("/tmp/p".into()), "open_tree /tmp/p"),
            (MountOp::Tmpfs(TMP.into()), "mount private /tmp"),
            (MountOp::EmptyDir, "create /tmp/.sandgate-empty-dir"),
            (MountOp::PutBack("/tmp/p".into()), "put back /tmp/p"),
            (MountOp::BindWritable("/h/p".into()), "bind /h/p"),
            (MountOp::BindReadOnly("/h/p/.envrc".into()), "bind /h/p/.envrc"),
            (MountOp::HideDir("/h/.ssh".into()), "hide /h/.ssh"),
            (MountOp::RemoveEmptyFile, "remove /tmp/.sandgate-empty"),
            (MountOp::Proc, "mount /proc"),
            (MountOp::Devpts, "mount private /dev/pts"),
            (MountOp::ReadOnly, "make / read-only"),
            (MountOp::Writable("/h/p".into()), "make /h/p writable"),
            (MountOp::Pin("/h/p/.git".into()), "pin /h/p/.git"),
        ];
        for (op, want) in table {
            assert_eq!(op.step().to_string(), want, "{op}");
        }
    }

    #[test]
    fn kept_under_tmp_keeps_outermost_paths_only() {
        let p = PathBuf::from;
        let table: &[(&str, &[&str], &[&str])] = &[
            ("/home/u/p", &[], &[]),
            ("/tmp/a/p", &[], &["/tmp/a/p"]),
            ("/tmp/a/p", &["/tmp/a"], &["/tmp/a"]),
            ("/tmp/a", &["/tmp/a/x", "/tmp/b", "/var/tmp/c"], &["/tmp/a", "/tmp/b"]),
            ("/tmpfoo", &[], &[]),
            ("/tmp", &[], &["/tmp"]),
        ];
        for (cwd, writable, want) in table {
            let w: Vec<PathBuf> = writable.iter().map(p).collect();
            let got = kept_under_tmp(Path::new(cwd), &w, &[]);
            let want: Vec<PathBuf> = want.iter().map(p).collect();
            assert_eq!(got, want, "cwd {cwd} writable {writable:?}");
        }
        // Visible paths (the home directory, the launcher) count like writable ones.
        let v = |s: &[&str]| s.iter().map(PathBuf::from).collect::<Vec<_>>();
        let visible = v(&["/tmp/h", "/tmp/b/target/debug/sandgate", "/usr/bin/sandgate"]);
        let got = kept_under_tmp(Path::new("/tmp/h/p"), &v(&["/tmp/b"]), &visible);
        assert_eq!(got, v(&["/tmp/b", "/tmp/h"]));
    }

    #[test]
    fn pins_cover_the_directories_between_writable_roots_and_targets() {
        let v = |s: &[&str]| s.iter().map(PathBuf::from).collect::<Vec<_>>();
        let hidden = v(&["/h/.ssh", "/h/.local/share/keyrings"]);
        let table: &[(&[&str], &[&str], &[&str])] = &[
            // Top-level targets cost nothing.
            (&["/p"], &["/p/.envrc", "/p/.vscode"], &[]),
            (&["/p"], &["/p/.git/hooks", "/p/.git/config"], &["/p/.git"]),
            // Outside any writable path: the read-only tree holds the parents.
            (&["/p"], &["/h/.config/sandgate"], &[]),
            (
                &["/h"],
                &["/h/.config/sandgate", "/h/.local/share/sandgate", "/h/.ssh"],
                &["/h/.config", "/h/.local", "/h/.local/share"],
            ),
            // Under a hidden directory: out of reach, nothing to pin (it is not there inside).
            (&["/h"], &["/h/.ssh/config", "/h/.local/share/keyrings/k"], &[]),
            // Nested writable paths: from the outermost one, skipping the inner one (a mount).
            (&["/h", "/h/a/p"], &["/h/a/p/.git/hooks"], &["/h/a", "/h/a/p/.git"]),
            (&["/h/a/p", "/h"], &["/h/a/p/.git/hooks"], &["/h/a", "/h/a/p/.git"]),
            // A writable path that is a prefix by name only is not a parent.
            (&["/h/a"], &["/h/ab/c/d"], &[]),
        ];
        for (writable, targets, want) in table {
            let targets: Vec<PathBuf> = v(targets);
            let refs: Vec<&Path> = targets.iter().map(PathBuf::as_path).collect();
            let got = pins(&v(writable), &refs, &hidden);
            assert_eq!(got, v(want), "writable {writable:?} targets {targets:?}");
        }
    }
}
