//! Starting a process without copying this one's address space: the command from the sandbox's
//! init ([`vfork_exec`]), and the launcher's helper that joins a network made ahead and clones
//! init from there (`netpool`, on a larger stack: init runs on a copy of it).
//!
//! Init is a copy of the launcher (a large binary, its heap, its libraries). A `fork` copies its
//! page tables, write-protects every written page on both sides, and the command's `execve` then
//! throws the copy away; the copies and faults are a measurable part of a launch. Like
//! `posix_spawn`, this runs the child on a stack of its own in init's memory (`CLONE_VM |
//! CLONE_VFORK`): init is suspended until the child has called `execve` (or exited), so the two
//! never run at the same time.
//!
//! What the child may do: system calls, and writes to its own stack. Allocation is safe here
//! only because init has one thread and is stopped in `clone` (not inside the allocator) for the
//! child's whole life; whatever the child allocates is init's to keep. The child must not
//! unwind, return, or drop values that init still owns.

#![allow(unsafe_code)]

use std::io;

/// Size of the child's stack: it runs the pre-exec steps, and an error message at worst.
const STACK: usize = 256 * 1024;

/// Runs `child` in a new process sharing this one's memory until it execs, and returns its pid
/// once it has (or has exited). `child` must end in `execve` or `_exit` (should it return, the
/// child exits with 126). Signals must be blocked
/// in the caller (the child inherits the mask): a handler must not run on the shared memory.
pub fn vfork_exec<F: FnMut()>(child: F) -> io::Result<libc::pid_t> {
    vfork_on(STACK, child)
}

/// [`vfork_exec`] with a stack of `size` bytes (only what the child touches is faulted in), with
/// a guard page below it: an overflow faults instead of writing over other memory.
pub fn vfork_on<F: FnMut()>(size: usize, mut child: F) -> io::Result<libc::pid_t> {
    extern "C" fn trampoline<F: FnMut()>(arg: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `arg` is the `&mut F` passed below, alive until clone returns, which is not
        // before this child has exec'd or exited.
        let child = unsafe { &mut *arg.cast::<F>() };
        child();
        // Not reached (`child` ends in execve or _exit); never return into the parent's frames.
        // SAFETY: _exit never returns.
        unsafe { libc::_exit(126) }
    }
    // SAFETY: sysconf with a constant name; no memory is involved.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    let len = size + page;
    // SAFETY: a fresh anonymous private mapping; no existing memory is affected.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_STACK,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the lowest page of the mapping just made becomes the guard.
    if unsafe { libc::mprotect(base, page, libc::PROT_NONE) } != 0 {
        let e = io::Error::last_os_error();
        // SAFETY: the mapping made above, unused.
        unsafe { libc::munmap(base, len) };
        return Err(e);
    }
    // Stacks grow down on every architecture Linux runs this on; 16-byte aligned top.
    let top = (base as usize + len) & !15;
    // SAFETY: the stack is valid below `top` down to the guard page and outlives the child's use
    // of it (clone returns only after the child exec'd or exited, CLONE_VFORK); the argument
    // points to `child`, which outlives the call likewise.
    let pid = unsafe {
        libc::clone(
            trampoline::<F>,
            top as *mut libc::c_void,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            (&raw mut child).cast::<libc::c_void>(),
        )
    };
    let err = io::Error::last_os_error();
    // SAFETY: the mapping made above; the child no longer runs on it (exec'd or exited), and a
    // process it forked has a copy of its own.
    unsafe { libc::munmap(base, len) };
    if pid < 0 { Err(err) } else { Ok(pid) }
}
