//! The launcher's error types.
//!
//! Like rustls' errors, none of them prints its `source` in its own message: a caller shows the
//! whole chain (`anyhow`'s `{:#}`, or a walk over [`std::error::Error::source`]) and every cause
//! appears once.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// What went wrong while building or starting a sandbox.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    /// A path in the spec that is not absolute or cannot be resolved.
    #[error("{role} path {path:?}")]
    Path {
        /// What the path was for (`writable`, `cwd`, ...).
        role: &'static str,
        /// The offending path.
        path: PathBuf,
        /// Why it was refused.
        source: io::Error,
    },
    /// The command to run is empty or cannot be found.
    #[error("command {command:?} not found in PATH")]
    CommandNotFound {
        /// The program name as given.
        command: String,
    },
    /// `launch` was called while the process runs several threads (forking would be unsafe).
    #[error(
        "the launcher must start the sandbox before any other thread exists ({threads} running)"
    )]
    Threads {
        /// How many threads were running.
        threads: usize,
    },
    /// The kernel refused to create a user namespace for an unprivileged caller.
    #[error(
        "cannot create a user namespace: unprivileged user namespaces are disabled here; \
         enable them with `sysctl kernel.unprivileged_userns_clone=1` (Debian), \
         `sysctl user.max_user_namespaces=15000`, or on Ubuntu \
         `sysctl kernel.apparmor_restrict_unprivileged_userns=0` (or an AppArmor profile allowing `userns`)"
    )]
    UserNamespaceDenied {
        /// The kernel's answer.
        source: io::Error,
    },
    /// One setup step inside the new namespaces (or of a nested launch) failed.
    #[error("sandbox setup failed at {step}")]
    Setup {
        /// The step that failed, with what it acted on.
        step: SetupStep,
        /// The kernel's (or the library's) answer.
        source: io::Error,
    },
    /// `require_full` was set and the kernel could not enforce every wall.
    #[error(
        "the kernel cannot enforce every restriction and full enforcement was required: {missing}"
    )]
    NotFullyEnforced {
        /// What could not be enforced, `; `-separated.
        missing: String,
    },
    /// A system call of the launcher itself failed.
    #[error("{what}")]
    Io {
        /// What the launcher was doing.
        what: &'static str,
        /// The kernel's answer.
        source: io::Error,
    },
    /// The sandbox's private temporary directory could not be made as asked (macOS): it existed
    /// already, or what was made is not a 0700 directory of the launching user.
    #[error("private TMPDIR {}: {reason}", path.display())]
    PrivateTmp {
        /// The directory.
        path: std::path::PathBuf,
        /// What was wrong.
        reason: String,
    },
    /// The platform has no sandbox backend.
    #[error("sandboxing is not supported on this platform")]
    Unsupported,
}

impl SandboxError {
    pub(crate) fn io(what: &'static str) -> impl FnOnce(io::Error) -> SandboxError {
        move |source| SandboxError::Io { what, source }
    }

    /// A [`SandboxError::Setup`] of `step`.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) fn setup(step: SetupStep) -> impl FnOnce(io::Error) -> SandboxError {
        move |source| SandboxError::Setup { step, source }
    }
}

/// Defines [`SetupStep`]: unit steps and steps on a path, each with its text, and the names by
/// which a step crosses from the sandbox's init to the launcher (see [`SetupStep::tag`]).
macro_rules! setup_steps {
    (
        $( $(#[$doc:meta])* $unit:ident => $text:literal, )*
        ;
        $( $(#[$pdoc:meta])* $on:ident($fmt:literal), )*
    ) => {
        /// Which step of a sandbox's setup failed, with what it acted on (the path, for the
        /// steps that have one). Its text is the one `sandbox setup failed at ...` shows.
        #[derive(Debug, Clone, PartialEq, Eq)]
        #[non_exhaustive]
        pub enum SetupStep {
            $( $(#[$doc])* $unit, )*
            $( $(#[$pdoc])* $on(PathBuf), )*
        }

        impl SetupStep {
            /// A stable name of the step (its variant's name), for the message from the
            /// sandbox's init to the launcher.
            #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
            pub(crate) fn tag(&self) -> &'static str {
                match self {
                    $( SetupStep::$unit => stringify!($unit), )*
                    $( SetupStep::$on(_) => stringify!($on), )*
                }
            }

            /// The path the step acted on, when it has one.
            pub fn path(&self) -> Option<&Path> {
                match self {
                    $( SetupStep::$unit => None, )*
                    $( SetupStep::$on(p) => Some(p), )*
                }
            }

            /// The step named `tag` (with `path` for the steps that have one).
            #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
            pub(crate) fn from_tag(tag: &str, path: PathBuf) -> Option<SetupStep> {
                match tag {
                    $( stringify!($unit) => Some(SetupStep::$unit), )*
                    $( stringify!($on) => Some(SetupStep::$on(path)), )*
                    _ => None,
                }
            }
        }

        impl fmt::Display for SetupStep {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match self {
                    $( SetupStep::$unit => f.write_str($text), )*
                    $( SetupStep::$on(p) => write!(f, $fmt, p.display()), )*
                }
            }
        }
    };
}

setup_steps! {
    /// The launcher could not start the sandbox's init, or init ended before it was ready.
    Start => "start",
    /// `prctl(PR_SET_PDEATHSIG)`.
    ParentDeathSignal => "parent death signal",
    /// Writing the user namespace's `uid_map` / `gid_map`.
    IdMaps => "user namespace id maps",
    /// Making the whole tree a private mount.
    MakePrivate => "make / private",
    /// The sandbox's `/proc`.
    MountProc => "mount /proc",
    /// The sandbox's own devpts instance.
    MountDevpts => "mount private /dev/pts",
    /// Making every mount read-only and nosuid.
    MakeReadOnly => "make / read-only",
    /// Bringing the loopback interface up.
    Loopback => "bring lo up",
    /// The device the namespace's default routes lead to (one tun device, or a veth pair where
    /// no tun can be made), over rtnetlink.
    RouteDevice => "route device (rtnetlink)",
    /// The namespace's nf_tables firewall.
    Firewall => "firewall (nf_tables)",
    /// The proxy listener (127.0.0.1:3128 inside).
    ProxyListener => "proxy listener",
    /// The DNS stub's sockets.
    DnsSockets => "DNS stub sockets (127.0.0.1:53)",
    /// The NFLOG socket (opened by the caller's [`NamespaceHooks`](crate::NamespaceHooks)).
    Nflog => "nflog",
    /// The sandbox's pseudo-terminal.
    PseudoTerminal => "pseudo-terminal",
    /// The launcher expected a pty from the sandbox and got none.
    Terminal => "terminal",
    /// An argument of the command line (one with a NUL byte).
    CommandLine => "command line",
    /// The command's environment (a variable with a NUL byte).
    Environment => "environment",
    /// A session of its own (`setsid`).
    Setsid => "setsid",
    /// A new session keyring.
    SessionKeyring => "session keyring",
    /// `PR_SET_NO_NEW_PRIVS`.
    NoNewPrivs => "no_new_privs",
    /// `PR_SET_DUMPABLE` off.
    Dumpable => "dumpable",
    /// The Landlock ruleset.
    Landlock => "landlock",
    /// Dropping every capability.
    DropCapabilities => "drop capabilities",
    /// Building or installing the seccomp filters.
    Seccomp => "seccomp",
    /// Handing the descriptors made inside to the launcher.
    HandOver => "hand over",
    ;
    /// Changing into the working directory.
    Chdir("chdir {}"),
    /// Cloning a tree under `/tmp` that must survive the private `/tmp`.
    OpenTree("open_tree {}"),
    /// A private tmpfs (`/tmp`, `/dev/shm`).
    MountTmpfs("mount private {}"),
    /// Creating a file or directory the mounts need.
    Create("create {}"),
    /// Opening a file or directory the mounts need.
    Open("open {}"),
    /// Changing the mode of a directory the mounts need.
    Chmod("chmod {}"),
    /// Making the mount point of a tree put back under the private `/tmp`.
    MountPoint("mount point {}"),
    /// Putting a cloned tree back under the private `/tmp`.
    PutBack("put back {}"),
    /// A bind mount onto this path.
    Bind("bind {}"),
    /// A read-only tmpfs with provided files.
    Provide("provide {}"),
    /// Covering a hidden path.
    Hide("hide {}"),
    /// Removing a file or directory the mounts needed.
    Remove("remove {}"),
    /// Making a mount writable again.
    MakeWritable("make {} writable"),
    /// Pinning a directory on the way to a protected path.
    Pin("pin {}"),
    /// A Landlock rule for this path.
    LandlockRule("landlock rule for {}"),
}
