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
/// `fchmodat2(2)` (Linux 6.6): `fchmodat` with flags (not in the `libc` crate's aarch64 table).
const SYS_FCHMODAT2: i64 = 452;
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

/// The highest system call number this filter was written against (Linux 6.18 has no call
/// above it): every number above, up to the x32 bit, is answered with `ENOSYS`, as a kernel
/// without the call would. The walls deny by default: a call added to a later kernel is not
/// allowed until someone has looked at it here, given it a verdict and raised this number.
///
/// The constant of this file rather than the top of the `libc` crate's table: libc 0.2.191 ends
/// at 462 (`mseal`) on x86_64 and aarch64 and at 450 on riscv64, below the calls listed above, so
/// today this is the higher of the two. And it should stay this file's number even if a libc
/// upgrade brings a higher one: the boundary says up to where every call was reviewed, and a
/// call libc knows but this file does not is exactly an unreviewed one. A test checks that every
/// number in [`verdicts`] lies at or below it.
const LAST_KNOWN: u32 = SYS_FILE_SETATTR as u32;

/// `ioctl` requests refused with `EPERM` (compared on the low 32 bits: the kernel reads the
/// request as an int). Terminal injection: `TIOCSTI` pushes input into a terminal, `TIOCLINUX`
/// can too. `TUNSETIFF` attaches to a tun device: no capability is needed to attach to an existing
/// one that has no owner, and a sandbox's route device is such a tun; attached, a command could
/// clear its persistence and close it, and with the device its routes would go, so that direct
/// connections failed unreported (its holder, the daemon or init, keeps it attached; this holds
/// when the holder is gone too, and where Landlock cannot refuse device ioctls). Creating a tun
/// needs a capability no sandboxed process has, so nothing legitimate is refused.
#[allow(clippy::unnecessary_cast)] // the request type differs between targets
fn denied_ioctls() -> [u32; 3] {
    [libc::TIOCSTI as u32, libc::TIOCLINUX as u32, libc::TUNSETIFF as u32]
}

/// Calls answered with `ENOSYS`, as a kernel without them would: `clone3` (its flags live in
/// memory a filter cannot read; libc then falls back to `clone`, whose flags it can), `openat2`
/// (its mode lives in memory too, see [`mode_calls`]; callers written for kernels before 5.6
/// fall back to `openat`, but not one that relies on a C library's wrapper without a fallback,
/// as GNU tar does since its fix for CVE-2025-45582 where glibc has that wrapper: it fails), and
/// the newest xattr and inode-attribute calls, whose callers all fall back to the older calls
/// (which the mounts and Landlock confine, and which this filter knows). A call the filter has
/// not been taught about must not be the way around it.
const UNAVAILABLE: &[i64] = &[
    libc::SYS_clone3,
    libc::SYS_openat2,
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

/// The unix socket types a sandboxed command may create, by `socket(2)` (when unix sockets are
/// allowed at all) or `socketpair(2)`: the connection-oriented ones. Their ends cannot be given
/// another peer: `connect` on a connected end fails with `EISCONN`, a stream end's `sendmsg` with a
/// name fails, a seqpacket end's ignores the name. A datagram socket (`SOCK_DGRAM`, and
/// `SOCK_RAW`, which unix sockets treat as datagram) can: one end of even a `socketpair` can be
/// re-addressed with `connect` or `sendto`/`sendmsg` with a name to any pathname datagram socket
/// the sandbox can see (`/dev/log`, `$XDG_RUNTIME_DIR/systemd/notify`) and, bound inside a writable
/// directory, receive its replies. Neither the address nor the socket's type is visible to a
/// filter at `sendto`/`connect` time, so the type is decided at creation, where it is an argument.
pub const UNIX_SOCKET_TYPES: [libc::c_int; 2] = [libc::SOCK_STREAM, libc::SOCK_SEQPACKET];

/// The bits of a socket type argument that name the type (`SOCK_TYPE_MASK`); the others are
/// flags (`SOCK_NONBLOCK`, `SOCK_CLOEXEC`).
const SOCK_TYPE_MASK: u32 = 0xf;

/// The set-user-ID and set-group-ID bits of a file mode (`S_ISUID | S_ISGID`, `06000`).
const SETID_BITS: u32 = libc::S_ISUID | libc::S_ISGID;

/// Every call that sets a file's mode from an argument, with that argument's index: a mode with
/// any of [`SETID_BITS`] is refused with `EPERM`, whatever the other arguments.
///
/// Why: a file a sandbox makes set-user-ID in a writable path keeps the bit on the host, where
/// the `nosuid` of the sandbox's own mounts does not reach. A root launch's command is the real
/// uid 0 (see `write_id_maps`), owns what it creates and needs no capability to `chmod 4755` its
/// own file, so any local user could then run it as root; a rootless one would hand out its
/// user. The modes given at creation count too: writing to a file clears its set-user-ID bit
/// (the command has no `CAP_FSETID`), but a set-group-ID bit without group execute survives the
/// write, and an ACL (`system.posix_acl_access`, the owner's to set) then adds group execute.
/// The mode of `open`/`openat` is refused whatever the flags (a check of `O_CREAT`, as systemd's
/// `RestrictSUIDSGID=` has, would miss `O_TMPFILE`): the kernel ignores the mode without either,
/// and glibc and musl pass 0 then, Go's `os.Open` 0, Rust's `File::open` `0o666`. `mkdir`/`mkdirat` are not here: the kernel keeps only the
/// permission and sticky bits of their mode (a directory becomes set-group-ID by inheriting it
/// from its parent, the host's choice, or by `chmod`, refused here). `openat2` carries its mode
/// in memory and is answered `ENOSYS` ([`UNAVAILABLE`]). File capabilities need no rule: setting
/// `security.capability` takes `CAP_SETFCAP`, which the command does not have.
///
/// The kernel reads the mode as a `umode_t`, so its low 32 bits are all that count.
fn mode_calls() -> Vec<(i64, u32)> {
    let mut calls = vec![
        (libc::SYS_fchmod, 1),
        (libc::SYS_fchmodat, 2),
        (SYS_FCHMODAT2, 2),
        (libc::SYS_openat, 3),
        (libc::SYS_mknodat, 2),
    ];
    // The calls of the older table, which the generic one (aarch64, riscv64) has only as `*at`.
    #[cfg(target_arch = "x86_64")]
    calls.extend([
        (libc::SYS_chmod, 1),
        (libc::SYS_open, 2),
        (libc::SYS_creat, 1),
        (libc::SYS_mknod, 1),
    ]);
    calls
}

/// Which optional rules to add.
#[derive(Debug, Clone, Copy)]
pub struct FilterOptions {
    /// Refuse `socket(AF_UNIX, ...)`: the kernel cannot check which pathname socket a process
    /// connects to (Landlock below ABI 9), so no unix socket may be created at all.
    /// `socketpair` stays allowed for the [`UNIX_SOCKET_TYPES`] (a pair of those reaches
    /// nothing outside).
    pub deny_unix_sockets: bool,
}

/// The bit the x32 ABI sets in system call numbers (`__X32_SYSCALL_BIT`). x32 calls report the
/// x86_64 architecture, so an architecture check lets them through, and their numbers
/// (`nr | 0x40000000`) match none of the rules: on a kernel built with `CONFIG_X86_X32_ABI`,
/// `unshare`, `socket`, `io_uring_setup`, `ioctl(TIOCSTI)` ... would all be allowed that way. No
/// architecture uses numbers this high for anything else, so every such call is refused (Chromium
/// and Docker's default profile close the same door).
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// What the filter answers for one system call it knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// `ENOSYS`, as a kernel without the call would.
    Unavailable,
    /// `EPERM`.
    Denied,
    /// `EPERM` if `clone`/`unshare`'s flags (argument 0) ask for any namespace.
    NamespaceFlags,
    /// `EPERM` for the terminal-injection requests (argument 1, compared on 32 bits because the
    /// kernel truncates the request number to an int).
    TerminalIoctl,
    /// `EPERM` for any family but [`ALLOWED_FAMILIES`] (argument 0), for `AF_UNIX` with
    /// [`FilterOptions::deny_unix_sockets`], and otherwise for a unix socket of a type outside
    /// [`UNIX_SOCKET_TYPES`] (argument 1).
    SocketFamily,
    /// `EPERM` for any family but `AF_UNIX` (`socketpair(2)` makes connected pairs of other
    /// families too, AF_TIPC, and loads their modules), and for a type outside
    /// [`UNIX_SOCKET_TYPES`].
    SocketpairFamily,
    /// `EPERM` for a mode with [`SETID_BITS`] in the given argument (see [`mode_calls`]).
    SetidMode(u32),
}

/// Every system call the filter knows, with its verdict; every other call up to [`LAST_KNOWN`]
/// is allowed (the numbers above it are answered with `ENOSYS`).
fn verdicts() -> Vec<(u32, Verdict)> {
    let mut all: Vec<(u32, Verdict)> = UNAVAILABLE
        .iter()
        .map(|&nr| (nr, Verdict::Unavailable))
        .chain(DENIED.iter().map(|&nr| (nr, Verdict::Denied)))
        .map(|(nr, v)| (nr as u32, v))
        .collect();
    all.extend([
        (libc::SYS_clone as u32, Verdict::NamespaceFlags),
        (libc::SYS_unshare as u32, Verdict::NamespaceFlags),
        (libc::SYS_ioctl as u32, Verdict::TerminalIoctl),
        (libc::SYS_socket as u32, Verdict::SocketFamily),
        (libc::SYS_socketpair as u32, Verdict::SocketpairFamily),
    ]);
    all.extend(mode_calls().into_iter().map(|(nr, arg)| (nr as u32, Verdict::SetidMode(arg))));
    all.sort_unstable_by_key(|&(nr, _)| nr);
    all
}

/// `AUDIT_ARCH_*` of the architecture this is built for (`linux/audit.h`): the filter kills a
/// process calling through another ABI (the i386 `int 0x80` entry on x86_64), whose numbers mean
/// other calls.
///
/// The ELF machine is chosen apart from the bits added to it, so the one expression this build
/// uses is the one its tests check (mutation testing finds no branch it cannot reach).
const AUDIT_ARCH: u32 = if ELF_MACHINE == 0 {
    0 // no known ABI: every call is killed, as an unknown architecture should be
} else {
    ELF_MACHINE | 0x8000_0000 | 0x4000_0000 // 64-bit | little endian
};

/// `EM_*` of the architecture this is built for (`linux/elf-em.h`), 0 for one we do not know.
const ELF_MACHINE: u32 = if cfg!(target_arch = "x86_64") {
    62 // EM_X86_64
} else if cfg!(target_arch = "aarch64") {
    183 // EM_AARCH64
} else if cfg!(target_arch = "riscv64") {
    243 // EM_RISCV
} else {
    0
};

/// Offsets in `struct seccomp_data`: the call's number, its architecture, and the low 32 bits of
/// argument `i` (little endian, the only byte order of the architectures above).
const NR: u32 = 0;
const ARCH: u32 = 4;
const fn arg_low(i: u32) -> u32 {
    16 + 8 * i
}

/// Builds the filter, one classic BPF program: the architecture check, the x32 refusal, then a
/// binary search over [`verdicts`] by call number; a number above [`LAST_KNOWN`] is answered with
/// `ENOSYS`, every other call is allowed.
///
/// The numbers above the table cost no instruction: they take the upper branch at every step of
/// the search, so only its last leaf can see them, and that leaf's final "not found: allow" jump
/// becomes "at or above `LAST_KNOWN + 1`: `ENOSYS`, else allow" (a conditional jump has two
/// targets). Above the table lie x86_64's x32-only numbers too (512..=547 without the x32 bit).
///
/// The holes below it (numbers no call has on this architecture: x86_64's 337..=423, the
/// 64-bit generic table's 295..=423 ...) stay allowed, as before: the kernel answers them with
/// `ENOSYS` itself today. They are not closed for good, though: new calls common to every
/// architecture take numbers above the table, but an architecture may still fill its own old
/// range (x86_64 got `uretprobe` at 335 in Linux 6.11, then `uprobe` at 336; the kernel runs both
/// past seccomp without asking the filter). Refusing the holes needs a table of them per
/// architecture, one more instruction per hole and a risk of refusing a call of an architecture
/// the tests cannot run (riscv64's `riscv_hwprobe`, which glibc uses, is 258, in the generic
/// table's range for architecture-specific calls); not done here.
///
/// Hand-written rather than with `seccompiler` (still used for the nested launch's small filter
/// and, in the tests, as the reference this program must agree with): seccompiler compiles one
/// action per filter as a linear chain of comparisons, so the same rules took three filters and
/// 404 instructions. At attach time the kernel runs each new filter once per system call number to
/// find the calls it always allows (its action cache), and every launch paid for three linear
/// programs; this one is 120 instructions, and finds a call in at most 9 comparisons.
///
/// A call with an argument check is never in that cache: since the mode checks, every `openat`
/// runs the program (at most 9 comparisons, then one load and one test of the mode).
pub fn build(options: FilterOptions) -> BpfProgram {
    let mut p = Program::default();
    let (allow, eperm, enosys, kill) = (p.label(), p.label(), p.label(), p.label());
    let (namespaces, ioctl, socket, socketpair) = (p.label(), p.label(), p.label(), p.label());
    let unix_type = p.label();
    // One check per argument that holds a mode (1, 2 and 3), shared by the calls that use it.
    let mut mode_args: Vec<u32> = mode_calls().into_iter().map(|(_, arg)| arg).collect();
    mode_args.sort_unstable();
    mode_args.dedup();
    let modes: Vec<(u32, Label)> = mode_args.into_iter().map(|arg| (arg, p.label())).collect();
    p.load(ARCH);
    p.jump_if(libc::BPF_JEQ, AUDIT_ARCH, None, Some(kill));
    p.load(NR);
    p.jump_if(libc::BPF_JGE, X32_SYSCALL_BIT, Some(eperm), None);
    let target = |v: Verdict| match v {
        Verdict::Unavailable => enosys,
        Verdict::Denied => eperm,
        Verdict::NamespaceFlags => namespaces,
        Verdict::TerminalIoctl => ioctl,
        Verdict::SocketFamily => socket,
        Verdict::SocketpairFamily => socketpair,
        Verdict::SetidMode(arg) => {
            modes.iter().find(|&&(a, _)| a == arg).expect("a label per mode argument").1
        }
    };
    let calls: Vec<(u32, Label)> = verdicts().into_iter().map(|(nr, v)| (nr, target(v))).collect();
    p.search(&calls, allow, Some((LAST_KNOWN + 1, enosys)));

    // Every namespace flag lives in the low 32 bits, and `clone` reads only those.
    p.place(namespaces);
    p.load(arg_low(0));
    let any_namespace = NAMESPACE_FLAGS.iter().fold(0, |m, &f| m | f) as u32;
    p.jump_if(libc::BPF_JSET, any_namespace, Some(eperm), Some(allow));

    p.place(ioctl);
    p.load(arg_low(1));
    for request in denied_ioctls() {
        p.jump_if(libc::BPF_JEQ, request, Some(eperm), None);
    }
    p.jump(allow);

    p.place(socket);
    p.load(arg_low(0));
    for family in ALLOWED_FAMILIES {
        let to = match family {
            libc::AF_UNIX if options.deny_unix_sockets => eperm,
            libc::AF_UNIX => unix_type,
            _ => allow,
        };
        p.jump_if(libc::BPF_JEQ, family as u32, Some(to), None);
    }
    p.jump(eperm);

    p.place(socketpair);
    p.load(arg_low(0));
    p.jump_if(libc::BPF_JEQ, libc::AF_UNIX as u32, None, Some(eperm));

    // A unix socket (of `socket` or `socketpair`): only the types whose ends keep their peer.
    p.place(unix_type);
    p.load(arg_low(1));
    p.and(SOCK_TYPE_MASK);
    let (last, others) = UNIX_SOCKET_TYPES.split_last().expect("a type is allowed");
    for &ty in others {
        p.jump_if(libc::BPF_JEQ, ty as u32, Some(allow), None);
    }
    p.jump_if(libc::BPF_JEQ, *last as u32, Some(allow), Some(eperm));

    for &(arg, label) in &modes {
        p.place(label);
        p.load(arg_low(arg));
        p.jump_if(libc::BPF_JSET, SETID_BITS, Some(eperm), Some(allow));
    }

    p.place(allow);
    p.ret(libc::SECCOMP_RET_ALLOW);
    p.place(eperm);
    p.ret(libc::SECCOMP_RET_ERRNO | libc::EPERM as u32);
    p.place(enosys);
    p.ret(libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32);
    p.place(kill);
    p.ret(libc::SECCOMP_RET_KILL_PROCESS);
    p.finish()
}

/// A jump target in a [`Program`] being built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Label(usize);

/// An instruction whose jump targets may not be placed yet.
#[derive(Debug, Clone, Copy)]
struct Insn {
    code: u32,
    k: u32,
    jt: Option<Label>,
    jf: Option<Label>,
}

/// A classic BPF program under construction: instructions plus labels, resolved at the end.
/// Every jump goes forward (as BPF requires): the search comes first, then the argument checks,
/// then the returns.
#[derive(Default)]
struct Program {
    code: Vec<Insn>,
    labels: Vec<Option<usize>>,
}

impl Program {
    fn label(&mut self) -> Label {
        self.labels.push(None);
        Label(self.labels.len() - 1)
    }

    fn place(&mut self, l: Label) {
        self.labels[l.0] = Some(self.code.len());
    }

    fn push(&mut self, code: u32, k: u32, jt: Option<Label>, jf: Option<Label>) {
        self.code.push(Insn { code, k, jt, jf });
    }

    /// `A = seccomp_data[offset]` (a 32-bit word).
    fn load(&mut self, offset: u32) {
        self.push(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, offset, None, None);
    }

    /// `if A <op> k goto jt else goto jf` (`None`: the next instruction).
    fn jump_if(&mut self, op: u32, k: u32, jt: Option<Label>, jf: Option<Label>) {
        self.push(libc::BPF_JMP | op | libc::BPF_K, k, jt, jf);
    }

    /// `A &= k`.
    fn and(&mut self, k: u32) {
        self.push(libc::BPF_ALU | libc::BPF_AND | libc::BPF_K, k, None, None);
    }

    fn jump(&mut self, to: Label) {
        self.push(libc::BPF_JMP | libc::BPF_JA, 0, Some(to), None);
    }

    fn ret(&mut self, action: u32) {
        self.push(libc::BPF_RET | libc::BPF_K, action, None, None);
    }

    /// A binary search of `calls` (sorted by number) on the number in A; a call found jumps to
    /// its label, a number at or above `above.0` (which must be above every call) to `above.1`,
    /// any other to `otherwise`. The range check replaces the last leaf's unconditional jump: no
    /// instruction more, no comparison more on any path.
    fn search(&mut self, calls: &[(u32, Label)], otherwise: Label, above: Option<(u32, Label)>) {
        if let (Some((first, _)), Some(&(last, _))) = (above, calls.last()) {
            assert!(last < first, "call {last} is above the table ({first}..)");
        }
        if calls.len() <= 4 {
            for &(nr, to) in calls {
                self.jump_if(libc::BPF_JEQ, nr, Some(to), None);
            }
            match above {
                Some((first, to)) => self.jump_if(libc::BPF_JGE, first, Some(to), Some(otherwise)),
                None => self.jump(otherwise),
            }
            return;
        }
        let (low, high) = calls.split_at(calls.len() / 2);
        let upper = self.label();
        self.jump_if(libc::BPF_JGE, high[0].0, Some(upper), None);
        self.search(low, otherwise, None);
        self.place(upper);
        self.search(high, otherwise, above);
    }

    /// The program with every label resolved to a forward offset.
    ///
    /// # Panics
    /// If a conditional jump is farther than 255 instructions (the program is built from constant
    /// lists; a unit test builds every variant).
    fn finish(self) -> BpfProgram {
        let at = |l: Label| self.labels[l.0].expect("every label is placed");
        self.code
            .iter()
            .enumerate()
            .map(|(i, insn)| {
                let offset = |l: Option<Label>| l.map_or(0, |l| at(l) - i - 1);
                if insn.code == libc::BPF_JMP | libc::BPF_JA {
                    return sock_filter {
                        code: insn.code as u16,
                        jt: 0,
                        jf: 0,
                        k: offset(insn.jt) as u32,
                    };
                }
                let short =
                    |l| u8::try_from(offset(l)).expect("conditional jumps reach 255 instructions");
                sock_filter {
                    code: insn.code as u16,
                    jt: short(insn.jt),
                    jf: short(insn.jf),
                    k: insn.k,
                }
            })
            .collect()
    }
}

/// The one filter a nested launch adds on top of the outer sandbox's (see `nested`): `socket(2)`
/// refused with `EACCES` for every address family but `AF_UNIX` with `deny_network` (so that no
/// network and no loopback listener, the outer's proxy among them, can be reached), and for
/// `AF_UNIX` with `deny_unix_sockets`. `socketpair` stays allowed. `None`: nothing to refuse.
///
/// Every other number is allowed here, those above [`LAST_KNOWN`] too, and that needs no default
/// of its own: this filter only ever stacks on the outer sandbox's (a nested launch happens only
/// under one), which a process cannot shed, and the kernel takes the more restrictive answer, the
/// outer's `ENOSYS`.
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

    /// The x32 refusal as the first of the replaced filters was (hand-written then too).
    fn x32() -> BpfProgram {
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

    /// The filters [`build`] replaced, built with seccompiler (one action per filter, so three
    /// of them), which it must agree with on every call but the numbers above [`LAST_KNOWN`]
    /// (they allowed those): the first refuses the x32 ABI ([`x32`]), the second answers the
    /// [`UNAVAILABLE`] calls with `ENOSYS`, the third refuses everything else with `EPERM`.
    fn reference(options: FilterOptions) -> Result<[BpfProgram; 3], seccompiler::BackendError> {
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
        // The requests of `denied_ioctls`. Compared on 32 bits because the kernel truncates the
        // request number to an int.
        let ioctls = denied_ioctls()
            .into_iter()
            .map(u64::from)
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
        // A unix socket of a type whose ends can be re-addressed (see UNIX_SOCKET_TYPES): one
        // rule per masked type value but the allowed ones (seccompiler has no masked "not equal").
        let unix_of_type = |ty: u32| -> Result<SeccompRule, seccompiler::BackendError> {
            SeccompRule::new(vec![
                family(SeccompCmpOp::Eq, libc::AF_UNIX)?,
                SeccompCondition::new(
                    1,
                    SeccompCmpArgLen::Dword,
                    SeccompCmpOp::MaskedEq(u64::from(SOCK_TYPE_MASK)),
                    u64::from(ty),
                )?,
            ])
        };
        let refused_types = (0..=SOCK_TYPE_MASK)
            .filter(|&t| !UNIX_SOCKET_TYPES.iter().any(|&a| a as u32 == t))
            .map(unix_of_type)
            .collect::<Result<Vec<_>, _>>()?;
        if options.deny_unix_sockets {
            socket.push(SeccompRule::new(vec![family(SeccompCmpOp::Eq, libc::AF_UNIX)?])?);
        } else {
            socket.extend(refused_types.iter().cloned());
        }
        rules.insert(libc::SYS_socket, socket);
        // socketpair(2) makes connected pairs of other families too (AF_TIPC), and loads their
        // modules: unix only, and of the types whose ends keep their peer.
        let mut socketpair =
            vec![SeccompRule::new(vec![family(SeccompCmpOp::Ne, libc::AF_UNIX)?])?];
        socketpair.extend(refused_types);
        rules.insert(libc::SYS_socketpair, socketpair);
        // A mode with the set-user-ID or the set-group-ID bit: one rule per bit (the rules of a
        // call are alternatives), compared on 32 bits as the kernel reads a `umode_t`.
        for (nr, arg) in mode_calls() {
            let bit = |b: u32| -> Result<SeccompRule, seccompiler::BackendError> {
                SeccompRule::new(vec![SeccompCondition::new(
                    arg as u8,
                    SeccompCmpArgLen::Dword,
                    SeccompCmpOp::MaskedEq(u64::from(b)),
                    u64::from(b),
                )?])
            };
            rules.insert(nr, vec![bit(libc::S_ISUID)?, bit(libc::S_ISGID)?]);
        }
        let main = SeccompFilter::new(
            rules,
            SeccompAction::Allow,
            SeccompAction::Errno(libc::EPERM as u32),
            arch,
        )?;
        Ok([x32(), unavailable.try_into()?, main.try_into()?])
    }

    /// Runs a classic BPF program on a `seccomp_data` as the kernel does (the instructions the
    /// two builders emit; anything else fails the test).
    fn run(prog: &[sock_filter], data: &[u8; 64]) -> u32 {
        run_counting(prog, data).0
    }

    /// [`run`], and how many instructions it executed.
    fn run_counting(prog: &[sock_filter], data: &[u8; 64]) -> (u32, usize) {
        let word = |off: u32| {
            let o = off as usize;
            u32::from_ne_bytes(data[o..o + 4].try_into().unwrap())
        };
        let (mut pc, mut a, mut steps) = (0usize, 0u32, 0usize);
        loop {
            let i = &prog[pc];
            steps += 1;
            let code = u32::from(i.code);
            pc += 1;
            match code {
                c if c == libc::BPF_LD | libc::BPF_W | libc::BPF_ABS => a = word(i.k),
                c if c == libc::BPF_ALU | libc::BPF_AND | libc::BPF_K => a &= i.k,
                c if c == libc::BPF_RET | libc::BPF_K => return (i.k, steps),
                c if c == libc::BPF_JMP | libc::BPF_JA => pc += i.k as usize,
                c if c & 0x07 == libc::BPF_JMP => {
                    let taken = match c & 0xf0 {
                        op if op == libc::BPF_JEQ => a == i.k,
                        op if op == libc::BPF_JGE => a >= i.k,
                        op if op == libc::BPF_JGT => a > i.k,
                        op if op == libc::BPF_JSET => a & i.k != 0,
                        op => panic!("jump op {op:#x}"),
                    };
                    pc += usize::from(if taken { i.jt } else { i.jf });
                }
                c => panic!("instruction {c:#x}"),
            }
        }
    }

    /// The kernel's choice among several filters' answers: the most restrictive action (the
    /// smallest as a signed number), the newest filter's on a tie.
    fn combined(filters: &[BpfProgram], data: &[u8; 64]) -> u32 {
        filters
            .iter()
            .rev()
            .map(|f| run(f, data))
            .reduce(|best, r| {
                let action = |x: u32| (x & libc::SECCOMP_RET_ACTION_FULL) as i32;
                if action(r) < action(best) { r } else { best }
            })
            .unwrap()
    }

    fn data(nr: u32, arch: u32, args: [u64; 6]) -> [u8; 64] {
        let mut d = [0u8; 64];
        d[0..4].copy_from_slice(&nr.to_ne_bytes());
        d[4..8].copy_from_slice(&arch.to_ne_bytes());
        for (i, a) in args.iter().enumerate() {
            d[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_ne_bytes());
        }
        d
    }

    const ENOSYS: u32 = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
    const EPERM: u32 = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;

    /// Every call number (and the x32 and out-of-range ones), every architecture the filter
    /// may see, and for the calls whose arguments are checked, each value that matters with the
    /// high half of the argument set and clear. The one difference: the three allowed every
    /// number above the table ([`LAST_KNOWN`]), this one answers them with `ENOSYS`.
    #[test]
    fn the_single_filter_decides_every_call_as_the_three_it_replaced() {
        const AUDIT_ARCH_I386: u32 = 3 | 0x4000_0000;
        let mut interesting: Vec<u64> = vec![0, 1, u64::MAX, 0x1_0000_0000, libc::SIGCHLD as u64];
        interesting.extend(NAMESPACE_FLAGS);
        interesting.push(libc::CLONE_VM as u64 | libc::CLONE_VFORK as u64 | libc::SIGCHLD as u64);
        interesting.push(NAMESPACE_FLAGS.iter().fold(0, |m, f| m | f));
        #[allow(clippy::unnecessary_cast)]
        interesting.extend([libc::TIOCSCTTY as u64, libc::TUNSETPERSIST as u64]);
        interesting.extend(denied_ioctls().map(u64::from));
        interesting.extend(0..50u64);
        let flags = (libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK) as u64;
        interesting.extend([libc::SOCK_DGRAM as u64 | flags, libc::SOCK_STREAM as u64 | flags]);
        // Modes: each special bit alone and with permissions and a file type, and the flags
        // that share their values (O_NONBLOCK is 0o4000, O_APPEND 0o2000 on x86_64).
        interesting.extend([0o4000, 0o2000, 0o1000, 0o6000, 0o7777, 0o4755, 0o2755, 0o755, 0o644]);
        interesting.extend([0o104755, 0o102745, 0o100644, 0o10000, 0o20000, 0o40000]);
        interesting.extend([libc::O_CREAT as u64 | 0o4000, libc::O_TMPFILE as u64]);
        let with_high: Vec<u64> =
            interesting.iter().flat_map(|&v| [v, v | 0xdead_0000_0000_0000]).collect();
        let mut numbers: Vec<u32> = (0..1100).collect();
        numbers.extend([
            X32_SYSCALL_BIT - 1,
            X32_SYSCALL_BIT,
            X32_SYSCALL_BIT | libc::SYS_unshare as u32,
            X32_SYSCALL_BIT | (LAST_KNOWN + 1),
            X32_SYSCALL_BIT | 1000,
            0x8000_0000,
            u32::MAX,
        ]);
        for boundary in [LAST_KNOWN, LAST_KNOWN + 1, LAST_KNOWN + 2, 1000, 0x3fff_ffff] {
            assert!(numbers.contains(&boundary), "{boundary:#x} is checked");
        }
        let (mut checked, mut above) = (0u64, 0u64);
        for deny_unix_sockets in [false, true] {
            let options = FilterOptions { deny_unix_sockets };
            let old = reference(options).unwrap();
            let new = build(options);
            for &nr in &numbers {
                for arch in [AUDIT_ARCH, AUDIT_ARCH_I386, 0] {
                    let argued = verdicts().iter().any(|&(n, v)| {
                        n == nr && !matches!(v, Verdict::Denied | Verdict::Unavailable)
                    });
                    let values: &[u64] = if argued { &with_high } else { &[0, u64::MAX] };
                    for &v in values {
                        let unix = libc::AF_UNIX as u64;
                        for args in [
                            [v, 0, 0, 0, 0, 0],
                            [0, v, 0, 0, 0, 0],
                            [0, 0, v, 0, 0, 0],
                            [0, 0, 0, v, 0, 0],
                            [v; 6],
                            [unix, v, 0, 0, 0, 0],
                        ] {
                            let d = data(nr, arch, args);
                            let what = format!(
                                "call {nr:#x}, arch {arch:#x}, args {args:x?}, deny unix {deny_unix_sockets}"
                            );
                            let mut want = combined(&old, &d);
                            if arch == AUDIT_ARCH && nr > LAST_KNOWN && nr < X32_SYSCALL_BIT {
                                assert_eq!(want, libc::SECCOMP_RET_ALLOW, "old: {what}");
                                want = ENOSYS;
                                above += 1;
                            }
                            assert_eq!(run(&new, &d), want, "{what}");
                            checked += 1;
                        }
                    }
                }
            }
        }
        assert!(checked > 10_000, "{checked}");
        assert!(above > 2 * 600, "{above} cases above the table");
    }

    /// The default: a number above the table, on the architecture the filter is built for (the
    /// only one it lets through), is `ENOSYS`, whatever the arguments and with either option;
    /// with the x32 bit it is still refused with `EPERM`, on another architecture still killed.
    /// Below the boundary nothing changed: `file_setattr` (the last call known) is `ENOSYS` as
    /// before, an allowed call and a hole stay allowed.
    #[test]
    fn numbers_above_the_table_are_answered_enosys() {
        for deny_unix_sockets in [false, true] {
            let f = build(FilterOptions { deny_unix_sockets });
            let at = |nr: u32, arch: u32, args: [u64; 6]| run(&f, &data(nr, arch, args));
            for nr in [LAST_KNOWN + 1, 471, 511, 512, 547, 1000, 1023, 0x3fff_ffff] {
                for args in [[0; 6], [u64::MAX; 6], [libc::CLONE_NEWUSER as u64; 6]] {
                    assert_eq!(at(nr, AUDIT_ARCH, args), ENOSYS, "{nr} {args:x?}");
                }
                assert_eq!(at(nr | X32_SYSCALL_BIT, AUDIT_ARCH, [0; 6]), EPERM, "x32 {nr}");
                for arch in [3 | 0x4000_0000, 0] {
                    let killed = at(nr, arch, [0; 6]);
                    assert_eq!(killed, libc::SECCOMP_RET_KILL_PROCESS, "{nr} arch {arch:#x}");
                }
            }
            assert_eq!(at(SYS_FILE_SETATTR as u32, AUDIT_ARCH, [0; 6]), ENOSYS);
            assert_eq!(at(libc::SYS_getpid as u32, AUDIT_ARCH, [0; 6]), libc::SECCOMP_RET_ALLOW);
            // 400: no call on x86_64, aarch64 or riscv64 (the kernel answers ENOSYS itself).
            assert_eq!(at(400, AUDIT_ARCH, [0; 6]), libc::SECCOMP_RET_ALLOW);
        }
    }

    /// No call that takes a mode may set the set-user-ID or set-group-ID bit, in the argument
    /// that holds the mode, whatever its other bits, its high half or the other arguments; the
    /// same values in any other argument are not a mode (`O_NONBLOCK` is `0o4000` and `O_APPEND`
    /// `0o2000` as `openat`'s flags) and pass, as do modes without those bits (sticky included).
    #[test]
    fn no_call_that_takes_a_mode_may_set_the_setuid_or_setgid_bit() {
        let refused: &[u64] = &[
            0o4000,
            0o2000,
            0o6000,
            0o4755,
            0o2755,
            0o2745, // group execute added later by an ACL
            0o7777,
            0o104755, // S_IFREG | 04755, as mknod takes it
            0o4755 | 0xffff_ffff_0000_0000,
        ];
        let allowed: &[u64] = &[0, 0o644, 0o755, 0o777, 0o1777, 0o100644, 0o755 | 0xdead << 48];
        let calls = mode_calls();
        assert!(calls.len() >= 5, "{calls:?}");
        for deny_unix_sockets in [false, true] {
            let f = build(FilterOptions { deny_unix_sockets });
            for &(nr, arg) in &calls {
                let call = |i: u32, v: u64| {
                    let mut args = [0u64; 6];
                    args[i as usize] = v;
                    run(&f, &data(nr as u32, AUDIT_ARCH, args))
                };
                for &mode in refused {
                    assert_eq!(call(arg, mode), EPERM, "call {nr} mode {mode:#o}");
                }
                for &mode in allowed {
                    assert_eq!(
                        call(arg, mode),
                        libc::SECCOMP_RET_ALLOW,
                        "call {nr} mode {mode:#o}"
                    );
                }
                for other in (0..6).filter(|&i| i != arg) {
                    for &v in refused {
                        assert_eq!(
                            call(other, v),
                            libc::SECCOMP_RET_ALLOW,
                            "call {nr} arg {other}"
                        );
                    }
                }
            }
        }
    }

    /// The rows by name: what a program calls, and the calls deliberately left alone.
    #[test]
    fn mode_rows_by_call() {
        let f = build(FilterOptions { deny_unix_sockets: false });
        let at = |nr: i64, args: [u64; 6]| run(&f, &data(nr as u32, AUDIT_ARCH, args));
        let cwd = libc::AT_FDCWD as u64;
        let (creat, nonblock) = (libc::O_CREAT as u64, libc::O_NONBLOCK as u64);
        let reg = u64::from(libc::S_IFREG);
        let allow = libc::SECCOMP_RET_ALLOW;
        let rows: Vec<(&str, i64, [u64; 6], u32)> = vec![
            ("fchmod(fd, 04755)", libc::SYS_fchmod, [3, 0o4755, 0, 0, 0, 0], EPERM),
            ("fchmod(fd, 0755)", libc::SYS_fchmod, [3, 0o755, 0, 0, 0, 0], allow),
            ("fchmodat(cwd, p, 02755, 0)", libc::SYS_fchmodat, [cwd, 1, 0o2755, 0, 0, 0], EPERM),
            ("fchmodat(cwd, p, 01777, 0)", libc::SYS_fchmodat, [cwd, 1, 0o1777, 0, 0, 0], allow),
            (
                "fchmodat2(cwd, p, 04755, 0x100)",
                SYS_FCHMODAT2,
                [cwd, 1, 0o4755, 0x100, 0, 0],
                EPERM,
            ),
            (
                "openat(cwd, p, O_CREAT, 04755)",
                libc::SYS_openat,
                [cwd, 1, creat, 0o4755, 0, 0],
                EPERM,
            ),
            // Refused whatever the flags: the kernel would ignore it, no C library passes it.
            ("openat(cwd, p, O_RDONLY, 02000)", libc::SYS_openat, [cwd, 1, 0, 0o2000, 0, 0], EPERM),
            ("openat(cwd, p, O_NONBLOCK, 0)", libc::SYS_openat, [cwd, 1, nonblock, 0, 0, 0], allow),
            (
                "openat(cwd, p, O_CREAT, 0666)",
                libc::SYS_openat,
                [cwd, 1, creat, 0o666, 0, 0],
                allow,
            ),
            (
                "mknodat(cwd, p, S_IFREG|04755, 0)",
                libc::SYS_mknodat,
                [cwd, 1, reg | 0o4755, 0, 0, 0],
                EPERM,
            ),
            (
                "mknodat(cwd, p, S_IFREG|0644, 0)",
                libc::SYS_mknodat,
                [cwd, 1, reg | 0o644, 0, 0, 0],
                allow,
            ),
            // The kernel drops both bits from mkdir's mode: nothing to refuse.
            ("mkdirat(cwd, p, 06755)", libc::SYS_mkdirat, [cwd, 1, 0o6755, 0, 0, 0], allow),
            // Its mode is in memory: answered as by a kernel before 5.6, whatever it holds.
            ("openat2(cwd, p, how, 24)", libc::SYS_openat2, [cwd, 1, 2, 24, 0, 0], ENOSYS),
            ("openat2(0...)", libc::SYS_openat2, [0; 6], ENOSYS),
        ];
        #[cfg(target_arch = "x86_64")]
        let rows = {
            let mut rows = rows;
            rows.extend([
                ("chmod(p, 04755)", libc::SYS_chmod, [1, 0o4755, 0, 0, 0, 0], EPERM),
                ("chmod(p, 0755)", libc::SYS_chmod, [1, 0o755, 0, 0, 0, 0], allow),
                ("open(p, O_CREAT, 02755)", libc::SYS_open, [1, creat, 0o2755, 0, 0, 0], EPERM),
                ("open(p, O_NONBLOCK, 0)", libc::SYS_open, [1, nonblock, 0, 0, 0, 0], allow),
                ("creat(p, 04755)", libc::SYS_creat, [1, 0o4755, 0, 0, 0, 0], EPERM),
                ("creat(p, 0644)", libc::SYS_creat, [1, 0o644, 0, 0, 0, 0], allow),
                (
                    "mknod(p, S_IFREG|02755, 0)",
                    libc::SYS_mknod,
                    [1, reg | 0o2755, 0, 0, 0, 0],
                    EPERM,
                ),
                ("mkdir(p, 06755)", libc::SYS_mkdir, [1, 0o6755, 0, 0, 0, 0], allow),
            ]);
            rows
        };
        for (what, nr, args, want) in rows {
            assert_eq!(at(nr, args), want, "{what}");
        }
    }

    /// Attaching to a tun device is refused on every low-32-bit spelling of the request (the
    /// route device's takeover), the other tun and terminal requests a command uses are not.
    #[test]
    #[allow(clippy::unnecessary_cast)]
    fn attaching_to_a_tun_device_is_refused() {
        let f = build(FilterOptions { deny_unix_sockets: false });
        let ioctl =
            |req: u64| run(&f, &data(libc::SYS_ioctl as u32, AUDIT_ARCH, [3, req, 0, 0, 0, 0]));
        let tunsetiff = libc::TUNSETIFF as u64;
        assert_eq!(ioctl(tunsetiff), EPERM);
        assert_eq!(ioctl(tunsetiff | 0xffff_ffff_0000_0000), EPERM);
        for allowed in [libc::TUNSETPERSIST as u64, libc::TUNGETIFF as u64, libc::FIONREAD as u64] {
            assert_eq!(ioctl(allowed), libc::SECCOMP_RET_ALLOW, "{allowed:#x}");
        }
    }

    /// A nested launch's filter allows every number it has no rule for, the ones above the
    /// table too, and needs no default of its own: it stacks on the outer sandbox's filter, which
    /// a process cannot shed, and the kernel takes the most restrictive answer (`ENOSYS` over
    /// allow). Its own refusal still wins where it has one (`EACCES` for `socket(AF_INET)`).
    #[test]
    fn a_nested_filter_keeps_the_outer_default_for_numbers_above_the_table() {
        let outer = build(FilterOptions { deny_unix_sockets: false });
        for (net, unix) in [(true, true), (true, false), (false, true)] {
            let inner = build_sockets(net, unix).unwrap().unwrap();
            for nr in [LAST_KNOWN + 1, 1000] {
                let d = data(nr, AUDIT_ARCH, [0; 6]);
                assert_eq!(run(&inner, &d), libc::SECCOMP_RET_ALLOW, "inner alone {nr}");
                assert_eq!(combined(&[outer.clone(), inner.clone()], &d), ENOSYS, "{nr}");
            }
        }
        let inner = build_sockets(true, false).unwrap().unwrap();
        let inet = data(libc::SYS_socket as u32, AUDIT_ARCH, [libc::AF_INET as u64, 1, 0, 0, 0, 0]);
        let eacces = libc::SECCOMP_RET_ERRNO | libc::EACCES as u32;
        assert_eq!(combined(&[outer, inner], &inet), eacces);
    }

    /// Control: the comparison catches a filter that lets one refused call through.
    #[test]
    fn the_comparison_catches_a_missing_rule() {
        let options = FilterOptions { deny_unix_sockets: false };
        let old = reference(options).unwrap();
        let mut new = build(options);
        let unshare =
            data(libc::SYS_unshare as u32, AUDIT_ARCH, [libc::CLONE_NEWUSER as u64, 0, 0, 0, 0, 0]);
        assert_eq!(run(&new, &unshare), libc::SECCOMP_RET_ERRNO | libc::EPERM as u32);
        // Make every JSET (the namespace test) never match.
        for i in new.iter_mut().filter(|i| u32::from(i.code) & 0xf0 == libc::BPF_JSET) {
            i.k = 0;
        }
        assert_ne!(run(&new, &unshare), combined(&old, &unshare));
    }

    /// The property behind the unix socket rule: a sandboxed command holds no unix socket whose
    /// peer it can name. Stream and seqpacket sockets and pairs (with any flags) are allowed,
    /// datagram and raw ones refused from `socket` and `socketpair` alike; with unix sockets
    /// denied, `socket` refuses every type and pairs keep the same rule. (The end-to-end test,
    /// `suite::sandbox_escape`, sends to host listeners.)
    #[test]
    fn unix_sockets_are_only_of_the_types_whose_ends_keep_their_peer() {
        let flags = (libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK) as u64;
        let unix = libc::AF_UNIX as u64;
        for deny_unix_sockets in [false, true] {
            let f = build(FilterOptions { deny_unix_sockets });
            for (nr, name) in [(libc::SYS_socket, "socket"), (libc::SYS_socketpair, "socketpair")] {
                let call = |ty: u64| run(&f, &data(nr as u32, AUDIT_ARCH, [unix, ty, 0, 0, 0, 0]));
                let refused_anyway = nr == libc::SYS_socket && deny_unix_sockets;
                for ty in [libc::SOCK_STREAM, libc::SOCK_SEQPACKET] {
                    for ty in [ty as u64, ty as u64 | flags, ty as u64 | 0xdead_0000_0000_0000] {
                        let want = if refused_anyway { EPERM } else { libc::SECCOMP_RET_ALLOW };
                        assert_eq!(call(ty), want, "{name} type {ty:#x} deny {deny_unix_sockets}");
                    }
                }
                for ty in [libc::SOCK_DGRAM, libc::SOCK_RAW, libc::SOCK_RDM, 0, 15] {
                    for ty in [ty as u64, ty as u64 | flags] {
                        assert_eq!(call(ty), EPERM, "{name} type {ty:#x} deny {deny_unix_sockets}");
                    }
                }
            }
            // Other families are untouched by the type rule: a UDP socket (the DNS stub's
            // clients) stays, a non-unix pair stays refused.
            let inet_dgram = [libc::AF_INET as u64, libc::SOCK_DGRAM as u64, 0, 0, 0, 0];
            let socket = libc::SYS_socket as u32;
            assert_eq!(run(&f, &data(socket, AUDIT_ARCH, inet_dgram)), libc::SECCOMP_RET_ALLOW);
            let pair = libc::SYS_socketpair as u32;
            assert_eq!(run(&f, &data(pair, AUDIT_ARCH, inet_dgram)), EPERM);
        }
    }

    #[test]
    fn the_filter_is_small_and_every_call_it_knows_is_listed_once() {
        for deny in [false, true] {
            let f = build(FilterOptions { deny_unix_sockets: deny });
            assert!(f.len() < 160, "{} instructions", f.len());
        }
        let v = verdicts();
        assert!(v.windows(2).all(|w| w[0].0 < w[1].0), "a call has two verdicts: {v:?}");
        let last = v.last().unwrap().0;
        assert!(last <= LAST_KNOWN, "call {last} is above LAST_KNOWN: raise it");
    }
    /// The filter runs on every system call the sandbox makes: a binary search over the call
    /// numbers keeps the longest path short, where a list would be read one call at a time.
    #[test]
    fn every_call_is_decided_in_a_few_instructions() {
        for deny in [false, true] {
            let f = build(FilterOptions { deny_unix_sockets: deny });
            let worst = (0..LAST_KNOWN + 16)
                .map(|nr| run_counting(&f, &data(nr, AUDIT_ARCH, [0; 6])).1)
                .max()
                .unwrap();
            assert!(worst <= 24, "{worst} instructions on the longest path");
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
