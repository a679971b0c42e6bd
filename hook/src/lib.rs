//! Agent permission hooks: is this tool call already confined by a sandgate tier?
//!
//! A coding agent asks before it runs a shell command or touches a file. This crate answers the
//! question for calls that need no person: a shell command line whose every part runs inside
//! `sandbox-run`, `sandbox-net` or `sandbox-build` (the kernel confines it), and a file-tool call
//! whose one path the tier's policy allows (checked by path, with the launcher's own policy
//! model). Everything else — and every input it does not fully understand — gets no decision, so
//! the agent's normal prompt appears.
//!
//! Its decisions are pure: JSON in, [`Verdict`] out, with the filesystem behind the
//! [`Filesystem`] trait (canonical paths, link metadata, `PATH` lookup). The I/O around them is
//! kept apart: [`tier`] reads configuration files for a tier's walls and sends the decision line
//! to the daemon, [`claude_settings`] edits Claude Code's settings file. Nothing here prints;
//! the `sandgate hook` command does.
//!
//! # Precedence
//! 1. malformed, oversized or unknown input → no decision (never allow, never deny);
//! 2. `Bash`: every pipeline stage a wrapper of ours with narrowing options only (after `cd DIR`
//!    and `&&`/`;` as the `shell` module follows them), and every `build` stage where the
//!    launcher accepts its working directory as a writable root → allow; otherwise no decision;
//! 3. file tools: the resolved path allowed by [`check_path`] → allow; refused → no decision
//!    (or deny with the refusal's message, when the hook is configured to deny).
//!
//! # Why these choices
//!
//! - A conservative tokenizer of a small shell subset, not a shell parser crate: an allow may
//!   come only from a line understood completely, and a parser that understands more of the shell
//!   would accept more (see the `shell` module).

#![forbid(unsafe_code)]

mod claude;
pub mod claude_settings;
mod fs;
mod paths;
mod shell;
pub mod tier;

pub use claude::{HookSettings, MAX_INPUT, Verdict, decide_claude, verdict_json};
pub use fs::{FileInfo, Filesystem, RealFs, Wrapper};
pub use paths::{Access, PathRefusal, RefusalKind, Walls, check_path, resolve_path};
pub use shell::{CommandRefusal, Join, Pipeline, Stage, WRAPPERS, check_command, split_line};
