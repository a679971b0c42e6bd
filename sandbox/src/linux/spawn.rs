//! Starting the command from the sandbox's init without copying init's address space.
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
pub fn vfork_exec<F: FnMut()>(mut child: F) -> io::Result<libc::pid_t> {
    extern "C" fn trampoline<F: FnMut()>(arg: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `arg` is the `&mut F` passed below, alive until clone returns, which is not
        // before this child has exec'd or exited.
        let child = unsafe { &mut *arg.cast::<F>() };
        child();
        // Not reached (`child` ends in execve or _exit); never return into init's frames.
        // SAFETY: _exit never returns.
        unsafe { libc::_exit(126) }
    }
    // Untouched pages of a large allocation are never faulted in: only what the child uses.
    let mut stack = vec![0u8; 0];
    stack.reserve_exact(STACK);
    let base = stack.as_mut_ptr() as usize;
    // Stacks grow down on every architecture Linux runs this on; 16-byte aligned top.
    let top = (base + STACK) & !15;
    // SAFETY: the stack is valid for STACK bytes and outlives the child's use of it (clone
    // returns only after the child exec'd or exited, CLONE_VFORK); the argument points to
    // `child`, which outlives the call likewise.
    let pid = unsafe {
        libc::clone(
            trampoline::<F>,
            top as *mut libc::c_void,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            (&raw mut child).cast::<libc::c_void>(),
        )
    };
    drop(stack);
    if pid < 0 { Err(io::Error::last_os_error()) } else { Ok(pid) }
}
