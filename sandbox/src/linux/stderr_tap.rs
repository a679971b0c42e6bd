//! The command's stderr through the launcher when it is not a terminal, so that "Read-only file
//! system" messages can be recognised (see [`crate::readonly`] for why this and not seccomp).
//!
//! The command's descriptor 2 becomes the write end of a pipe; a thread of the launcher reads it,
//! writes every byte at once to the launcher's own descriptor 2 (the same file, pipe or socket
//! the command would have had), and only then lets the scanner look at them. When descriptors 1
//! and 2 share one open file description (`2>&1`, `&>log`, an agent's combined pipe), both go
//! into the same pipe: writes keep their order exactly, as they would on the shared file. When
//! the launcher's stderr goes away (`EPIPE`), the pipe is closed too, so the command sees
//! `EPIPE`/`SIGPIPE` as it would have.
//!
//! Cost: one read and one write per chunk of stderr (16 KiB) and the scanner's `memmem` over it;
//! `bench/stderr-tap.sh` measured no difference in wall time against `--quiet` (no relay) for a
//! launch, and +18 ms of CPU for 64 MiB of stderr lines (debug build). `tee(2)` + `splice(2)`
//! would save one of the two copies but not the scanner's read of the bytes, and `splice` to an
//! `O_APPEND` file (`2>>log`) fails with `EINVAL`, so plain reads and writes it is. Nothing is
//! held back, so the order between a separate stdout and stderr is as close as two descriptors
//! allow. A closed stderr or `/dev/null` is left alone (nobody would read a hint there). The
//! launcher's own notices go through the same relay ([`crate::notice`]), between the command's
//! lines.

use std::io::{self, Read};
use std::os::fd::{AsRawFd, OwnedFd};
use std::thread::JoinHandle;

use super::sys;
use crate::readonly::SharedScanner;

/// The launcher's half: the thread relaying the pipe.
#[derive(Debug)]
pub(super) struct Tap {
    thread: Option<JoinHandle<()>>,
}

/// The sandbox's half, before the clone: what init puts on its descriptors.
#[derive(Debug)]
pub(super) struct TapEnds {
    pub(super) reader: io::PipeReader,
    /// Becomes descriptor 2 of init and the command (and 1 too when `merge_stdout`).
    pub(super) writer: OwnedFd,
    pub(super) merge_stdout: bool,
}

/// A pipe for the command's stderr; `stdout_on_tty` says whether descriptor 1 goes to the pty.
pub(super) fn ends(stdout_on_tty: bool) -> io::Result<TapEnds> {
    let (reader, writer) = io::pipe()?;
    let merge_stdout = !stdout_on_tty && sys::same_open_file(1, 2) == Some(true);
    Ok(TapEnds { reader, writer: writer.into(), merge_stdout })
}

impl Tap {
    /// Starts relaying `reader` to the launcher's stderr through `scanner`.
    pub(super) fn start(mut reader: io::PipeReader, scanner: SharedScanner) -> io::Result<Tap> {
        crate::notice::attach(Box::new(write_all));
        let thread = std::thread::Builder::new().name("stderr-tap".into()).spawn(move || {
            // On the thread's stack: a heap buffer would be this thread's first allocation, which
            // makes glibc map a new 64 MiB arena, and a launch whose command writes nothing to
            // stderr would pay for that and for zeroing 64 KiB (bench/launch-cpu.sh).
            let mut buf = [0u8; 16 * 1024];
            loop {
                let n = match reader.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                };
                // Through the notice gate: a notice of the launcher's waits for a line end.
                if !crate::notice::relay(&buf[..n]) {
                    // Our stderr is gone: close the pipe, so the command learns it too.
                    crate::notice::end();
                    return;
                }
                scanner.lock().unwrap_or_else(|e| e.into_inner()).feed(&buf[..n]);
            }
            crate::notice::end();
            scanner.lock().unwrap_or_else(|e| e.into_inner()).finish();
        })?;
        Ok(Tap { thread: Some(thread) })
    }

    /// Waits until every writer is gone (the sandbox ended) and the last bytes are out.
    pub(super) fn finish(&mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Writes to the launcher's descriptor 2; false once it cannot take more.
fn write_all(data: &[u8]) -> bool {
    let mut data = data;
    let fd = io::stderr().as_raw_fd();
    while !data.is_empty() {
        match sys::write(fd, data) {
            Ok(0) => return false,
            Ok(n) => data = &data[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {
                // Someone else's non-blocking stderr: wait until it takes more.
                let mut p = [libc::pollfd { fd, events: libc::POLLOUT, revents: 0 }];
                let _ = sys::poll(&mut p, 1000);
            }
            Err(_) => return false,
        }
    }
    true
}
