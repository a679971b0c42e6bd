//! `SANDGATE_DEBUG=launch`: one stderr line per launch step with the time since the process
//! started measuring, to find where a launch spends its milliseconds (the child inherits the
//! clock, so its steps line up with the parent's). Off, a step costs one relaxed load.

use std::sync::OnceLock;
use std::time::Instant;

static START: OnceLock<Option<Instant>> = OnceLock::new();

fn start() -> Option<Instant> {
    *START.get_or_init(|| {
        std::env::var("SANDGATE_DEBUG")
            .is_ok_and(|v| v.split(',').any(|w| w == "launch" || w == "all"))
            .then(Instant::now)
    })
}

/// Starts the clock (if `SANDGATE_DEBUG` asks for launch timings); later marks count from here.
pub fn begin() {
    let _ = start();
}

/// Prints `sandgate: launch +1.234 ms STEP` when launch timings are on.
pub fn mark(step: &str) {
    if let Some(t0) = start() {
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        // One write per line: the sandbox's init writes its lines through the stderr relay
        // while the launcher writes its own, and `eprintln!` writes a formatted line in pieces.
        let line = format!("sandgate: launch {:>+9.3} ms  [{}] {step}\n", ms, std::process::id());
        let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
    }
}
