//! The seccomp filters: system calls no sandboxed command needs and that would let it leave or
//! weaken its walls.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch, sock_filter,
};

/// Namespace flags of `clone(2)` / `unshare(2)`.
const NAMESPACE_FLAGS: [u64; 8] = [
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWCGROUP as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
    0x80, // CLONE_NEWTIME
];

// System calls newer than the `libc` crate's tables. Every call numbered 424 or above has one
// number on every architecture (alpha adds 110; not a target here).
/// `statmount(2)` (Linux 6.8).
const SYS_STATMOUNT: i64 = 457;
/// `listmount(2)` (Linux 6.8).
const SYS_LISTMOUNT: i64 = 458;
/// `setxattrat(2)` (Linux 6.13).
const SYS_SETXATTRAT: i64 = 463;
/// `getxattrat(2)` (Linux 6.13).
const SYS_GETXATTRAT: i64 = 464;
/// `listxattrat(2)` (Linux 6.13).
const SYS_LISTXATTRAT: i64 = 465;
/// `removexattrat(2)` (Linux 6.13).
const SYS_REMOVEXATTRAT: i64 = 466;
/// `open_tree_attr(2)` (Linux 6.15): `open_tree` with mount attributes set on the copy.
const SYS_OPEN_TREE_ATTR: i64 = 467;
/// `file_getattr(2)` (Linux 6.17).
const SYS_FILE_GETATTR: i64 = 468;
/// `file_setattr(2)` (Linux 6.17): inode flags and project quotas by path.
const SYS_FILE_SETATTR: i64 = 469;

/// Calls answered with `ENOSYS`, as a kernel without them would: `clone3` (its flags live in
/// memory a filter cannot read; libc then falls back to `clone`, whose flags it can), and the
/// newest xattr and inode-attribute calls, whose callers all fall back to the older calls (which
/// the mounts and Landlock confine, and which this filter knows). A call the filter has not been
/// taught about must not be the way around it.
const UNAVAILABLE: &[i64] = &[
    libc::SYS_clone3,
    SYS_SETXATTRAT,
    SYS_GETXATTRAT,
    SYS_LISTXATTRAT,
    SYS_REMOVEXATTRAT,
    SYS_FILE_GETATTR,
    SYS_FILE_SETATTR,
];

/// Calls refused outright with `EPERM`.
const DENIED: &[i64] = &[
    // namespaces and mounts: no way to build a new view of the system or undo the mounts
    libc::SYS_setns,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_mount_setattr,
    SYS_OPEN_TREE_ATTR,
    // the mount tree of the namespace, read without /proc (no use in a sandbox)
    SYS_STATMOUNT,
    SYS_LISTMOUNT,
    // other processes' memory
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_pidfd_getfd,
    // io_uring bypasses seccomp for the operations it carries
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    // kernel keyrings (the session keyring is fresh, but no reason to reach any)
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    // kernel attack surface with no use in a build
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_kexec_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
];

/// The socket address families a sandboxed command may create (every other `socket(2)` is refused
/// with `EPERM`): unix sockets (subject to [`FilterOptions::deny_unix_sockets`]), IPv4 and IPv6
/// (the network namespace and its firewall decide where they go), and netlink (the C library asks
/// the kernel for the addresses it has through it).
pub const ALLOWED_FAMILIES: [libc::c_int; 4] =
    [libc::AF_UNIX, libc::AF_INET, libc::AF_INET6, libc::AF_NETLINK];

/// Which optional rules to add.
#[derive(Debug, Clone, Copy)]
pub struct FilterOptions {
    /// Refuse `socket(AF_UNIX, ...)`: the kernel cannot check which pathname socket a process
    /// connects to (Landlock below ABI 9), so no unix socket may be created at all.
    /// `socketpair` stays allowed (it reaches nothing outside).
    pub deny_unix_sockets: bool,
}

/// The bit the x32 ABI sets in system call numbers (`__X32_SYSCALL_BIT`).
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// A filter refusing (`EPERM`) every system call whose number has the x32 bit set. x32 calls
/// report the x86_64 architecture, so the architecture check of the other filters lets them
/// through, and their numbers (`nr | 0x40000000`) match none of the rules: on a kernel built with
/// `CONFIG_X86_X32_ABI`, `unshare`, `socket`, `io_uring_setup`, `ioctl(TIOCSTI)` ... would all be
/// allowed that way. No architecture uses numbers this high for anything else. Chromium and
/// Docker's default profile close the same door.
pub fn x32() -> BpfProgram {
    // BPF_W and BPF_K are 0: a word load, a constant operand.
    let op = |code: u32, jt, jf, k| sock_filter { code: code as u16, jt, jf, k };
    vec![
        // seccomp_data.nr is at offset 0.
        op(libc::BPF_LD | libc::BPF_ABS, 0, 0, 0),
        op(libc::BPF_JMP | libc::BPF_JGE, 0, 1, X32_SYSCALL_BIT),
        op(libc::BPF_RET, 0, 0, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32),
        op(libc::BPF_RET, 0, 0, libc::SECCOMP_RET_ALLOW),
    ]
}

/// Builds the filters: the first refuses the x32 ABI ([`x32`]), the second answers the
/// [`UNAVAILABLE`] calls with `ENOSYS`, the third refuses everything else with `EPERM`.
pub fn build(options: FilterOptions) -> Result<[BpfProgram; 3], seccompiler::BackendError> {
    let arch = TargetArch::try_from(std::env::consts::ARCH)?;

    let mut unavailable = BTreeMap::new();
    for &nr in UNAVAILABLE {
        unavailable.insert(nr, vec![]);
    }
    let unavailable = SeccompFilter::new(
        unavailable,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )?;

    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for &nr in DENIED {
        rules.insert(nr, vec![]);
    }
    let any_flag = |arg: u8| -> Result<Vec<SeccompRule>, seccompiler::BackendError> {
        NAMESPACE_FLAGS
            .iter()
            .map(|&f| {
                SeccompRule::new(vec![SeccompCondition::new(
                    arg,
                    SeccompCmpArgLen::Qword,
                    SeccompCmpOp::MaskedEq(f),
                    f,
                )?])
            })
            .collect()
    };
    // clone's flags are argument 0 on every architecture seccompiler knows.
    rules.insert(libc::SYS_clone, any_flag(0)?);
    rules.insert(libc::SYS_unshare, any_flag(0)?);
    // Terminal injection: TIOCSTI pushes input into a terminal, TIOCLINUX can too. Compared on
    // 32 bits because the kernel truncates the request number to an int.
    #[allow(clippy::unnecessary_cast)] // the request type differs between targets
    let ioctls = [libc::TIOCSTI as u64, libc::TIOCLINUX as u64]
        .into_iter()
        .map(|req| {
            SeccompRule::new(vec![SeccompCondition::new(
                1,
                SeccompCmpArgLen::Dword,
                SeccompCmpOp::Eq,
                req,
            )?])
        })
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(libc::SYS_ioctl, ioctls);
    // Sockets: only the families a command needs. Others reach past the network namespace
    // (AF_VSOCK talks to the hypervisor host, whatever the namespace) or are attack surface
    // nothing here uses (AF_ALG, AF_BLUETOOTH, AF_TIPC, ...).
    let family = |op: SeccompCmpOp, f: libc::c_int| {
        SeccompCondition::new(0, SeccompCmpArgLen::Dword, op, f as u64)
    };
    let mut socket = vec![SeccompRule::new(
        ALLOWED_FAMILIES
            .iter()
            .map(|&f| family(SeccompCmpOp::Ne, f))
            .collect::<Result<Vec<_>, _>>()?,
    )?];
    if options.deny_unix_sockets {
        socket.push(SeccompRule::new(vec![family(SeccompCmpOp::Eq, libc::AF_UNIX)?])?);
    }
    rules.insert(libc::SYS_socket, socket);
    // socketpair(2) makes connected pairs of other families too (AF_TIPC), and loads their
    // modules: unix only.
    rules.insert(
        libc::SYS_socketpair,
        vec![SeccompRule::new(vec![family(SeccompCmpOp::Ne, libc::AF_UNIX)?])?],
    );
    let main = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )?;
    Ok([x32(), unavailable.try_into()?, main.try_into()?])
}

/// The one filter a nested launch adds on top of the outer sandbox's (see `nested`): `socket(2)`
/// refused with `EACCES` for every address family but `AF_UNIX` with `deny_network` (so that no
/// network and no loopback listener, the outer's proxy among them, can be reached), and for
/// `AF_UNIX` with `deny_unix_sockets`. `socketpair` stays allowed. `None`: nothing to refuse.
pub fn build_sockets(
    deny_network: bool,
    deny_unix_sockets: bool,
) -> Result<Option<BpfProgram>, seccompiler::BackendError> {
    let arch = TargetArch::try_from(std::env::consts::ARCH)?;
    let family = |op: SeccompCmpOp| -> Result<Vec<SeccompRule>, seccompiler::BackendError> {
        Ok(vec![SeccompRule::new(vec![SeccompCondition::new(
            0,
            SeccompCmpArgLen::Dword,
            op,
            libc::AF_UNIX as u64,
        )?])?])
    };
    let socket = match (deny_network, deny_unix_sockets) {
        (true, true) => vec![], // every call matches
        (true, false) => family(SeccompCmpOp::Ne)?,
        (false, true) => family(SeccompCmpOp::Eq)?,
        (false, false) => return Ok(None),
    };
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    rules.insert(libc::SYS_socket, socket);
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EACCES as u32),
        arch,
    )?;
    Ok(Some(filter.try_into()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_compile_with_and_without_the_unix_rule() {
        for deny in [false, true] {
            let [x, a, b] = build(FilterOptions { deny_unix_sockets: deny }).unwrap();
            assert_eq!(x.len(), 4);
            assert!(!a.is_empty());
            assert!(b.len() > DENIED.len());
        }
    }

    #[test]
    fn the_mount_and_attribute_calls_are_all_covered() {
        for nr in [
            libc::SYS_mount,
            libc::SYS_fsopen,
            libc::SYS_fsconfig,
            libc::SYS_fsmount,
            libc::SYS_fspick,
            libc::SYS_move_mount,
            libc::SYS_mount_setattr,
            libc::SYS_open_tree,
            SYS_OPEN_TREE_ATTR,
            SYS_STATMOUNT,
            SYS_LISTMOUNT,
        ] {
            assert!(DENIED.contains(&nr), "{nr} denied");
        }
        for nr in [SYS_SETXATTRAT, SYS_GETXATTRAT, SYS_LISTXATTRAT, SYS_REMOVEXATTRAT] {
            assert!(UNAVAILABLE.contains(&nr), "{nr} answered ENOSYS");
        }
        assert!(UNAVAILABLE.contains(&SYS_FILE_SETATTR) && UNAVAILABLE.contains(&SYS_FILE_GETATTR));
    }

    #[test]
    fn the_nested_network_filter_compiles_with_and_without_unix_sockets() {
        for (net, unix) in [(true, true), (true, false), (false, true)] {
            assert!(!build_sockets(net, unix).unwrap().unwrap().is_empty(), "{net} {unix}");
        }
        assert!(build_sockets(false, false).unwrap().is_none());
    }
}
