//! Processes outliving the launch: macOS has no pid namespace, so a double-forked child of the
//! command keeps running (and writing) after the command ended. At the end of a launch every
//! process still confined by *this launch's* profile is killed, again and again until none is
//! found (a process may fork between the listing and the kill).
//!
//! How a process is recognised: each launch's profile allows one thing no other profile does,
//! `mach-lookup` of [`launch_service`] (a name nobody registers), and `sandbox_check` asks the
//! kernel, for a given pid, whether its profile allows that lookup. A process outside any
//! sandbox would be allowed everything, so only processes that are sandboxed at all are asked;
//! and so would one under another program's profile that allows every lookup (`(allow
//! default)`, as Homebrew's build sandbox), so the process must also refuse a name no sandgate
//! profile allows ([`canary_service`], [`is_ours`]). Processes are listed by any of their uids
//! ([`of_user`]): a set-user-id program execed inside keeps the profile but not the effective
//! uid.
//! Chosen over process groups or sessions (the command may leave them with `setsid`) and over
//! parent links (a double fork is reparented to launchd): the profile is the one thing a process
//! cannot leave. The listing and the checks are the glue's ([`Processes`]); the loop is here.

/// The Mach service name only this launch's profile may look up. It is written into the
/// profile as text, so any character of the id outside `[A-Za-z0-9._-]` becomes `_` (the glue
/// asks about the same name).
pub fn launch_service(id: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "._-".contains(c);
    let id: String = id.chars().map(|c| if safe(c) { c } else { '_' }).collect();
    format!("org.sandgate.launch.{id}")
}

/// A name no sandgate profile allows (this launch's name with a suffix): a process whose profile
/// allows it too allows every lookup (another program's `(allow default)` profile, Homebrew's
/// build sandbox), so its "yes" for [`launch_service`] says nothing, and it is not this launch's.
pub fn canary_service(id: &str) -> String {
    format!("{}.none", launch_service(id))
}

/// Whether a sandboxed process is this launch's: its profile allows [`launch_service`] and
/// refuses [`canary_service`].
pub fn is_ours(allows_own: bool, allows_canary: bool) -> bool {
    allows_own && !allows_canary
}

/// The user ids of a process (`proc_bsdinfo`: `pbi_ruid`, `pbi_uid`, `pbi_svuid`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Uids {
    /// Real uid.
    pub ruid: u32,
    /// Effective uid.
    pub euid: u32,
    /// Saved set-user-id.
    pub svuid: u32,
}

/// Whether a process belongs to `uid` for the reaping: by any of its uids. A set-user-id
/// program (`sudo`, `crontab`) execed inside keeps the profile and the caller's real uid but
/// not its effective one; the caller may still signal it (the kernel compares real and saved
/// uids).
pub fn of_user(ids: Uids, uid: u32) -> bool {
    ids.ruid == uid || ids.euid == uid || ids.svuid == uid
}

/// The processes of the user running the launch, as the glue sees them.
pub trait Processes {
    /// Pids of live (not zombie) processes confined by this launch's profile.
    fn confined(&mut self) -> std::io::Result<Vec<u32>>;
    /// Sends SIGKILL to `pid` (gone already: not an error).
    fn kill(&mut self, pid: u32);
}

/// How the reaping ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reaped {
    /// None left; `killed` distinct processes were killed.
    AllGone {
        /// How many processes outlived the command.
        killed: usize,
    },
    /// Still some after `rounds` rounds of killing (a fork faster than the loop), or the list
    /// could not be read.
    Left {
        /// The pids found last.
        pids: Vec<u32>,
        /// Why it stopped.
        why: String,
    },
}

/// Kills every process [`Processes::confined`] lists until it lists none, at most `rounds`
/// times.
pub fn reap(p: &mut dyn Processes, rounds: usize) -> Reaped {
    let mut killed = std::collections::BTreeSet::new();
    let mut last = Vec::new();
    for _ in 0..rounds {
        let pids = match p.confined() {
            Ok(pids) => pids,
            Err(e) => {
                return Reaped::Left { pids: last, why: format!("cannot list processes: {e}") };
            }
        };
        if pids.is_empty() {
            return Reaped::AllGone { killed: killed.len() };
        }
        for &pid in &pids {
            p.kill(pid);
            killed.insert(pid);
        }
        last = pids;
    }
    Reaped::Left { pids: last, why: format!("still running after {rounds} rounds of SIGKILL") }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process table where each killed process may have forked one child just before.
    struct Table {
        live: Vec<u32>,
        forks_left: u32,
        next: u32,
        fail: bool,
    }

    impl Processes for Table {
        fn confined(&mut self) -> std::io::Result<Vec<u32>> {
            if self.fail {
                return Err(std::io::Error::other("EPERM"));
            }
            Ok(self.live.clone())
        }
        fn kill(&mut self, pid: u32) {
            self.live.retain(|&p| p != pid);
            if self.forks_left > 0 {
                self.forks_left -= 1;
                self.next += 1;
                self.live.push(self.next);
            }
        }
    }

    #[test]
    fn kills_until_none_is_left() {
        // (live at the end, forks made while being killed, rounds, outcome)
        let table = [
            (vec![], 0, 3, Reaped::AllGone { killed: 0 }),
            (vec![10, 11], 0, 3, Reaped::AllGone { killed: 2 }),
            (vec![10], 2, 5, Reaped::AllGone { killed: 3 }),
            (
                vec![10],
                100,
                3,
                Reaped::Left {
                    pids: vec![102],
                    why: "still running after 3 rounds of SIGKILL".into(),
                },
            ),
        ];
        for (live, forks, rounds, want) in table {
            let mut t = Table { live: live.clone(), forks_left: forks, next: 100, fail: false };
            assert_eq!(reap(&mut t, rounds), want, "{live:?} forks {forks}");
        }
        let mut t = Table { live: vec![1], forks_left: 0, next: 0, fail: true };
        assert!(matches!(reap(&mut t, 3), Reaped::Left { why, .. } if why.contains("EPERM")));
    }

    #[test]
    fn the_service_name_is_the_launch_s() {
        assert_eq!(launch_service("sg-1-ab"), "org.sandgate.launch.sg-1-ab");
        assert_eq!(launch_service("a\")(allow default"), "org.sandgate.launch.a___allow_default");
    }
}
