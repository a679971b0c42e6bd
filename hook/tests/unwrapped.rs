//! Property: no command line that contains an unwrapped command is ever allowed.

use std::io;
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use sandgate_config::RootRule;
use sandgate_hook::{CommandRefusal, FileInfo, Filesystem, Wrapper};

/// Every wrapper name resolves to "our" binary; every path is a directory of its own name.
struct Ours;

impl Filesystem for Ours {
    fn canonicalize(&self, p: &Path) -> io::Result<PathBuf> {
        Ok(p.to_owned())
    }
    fn symlink_metadata(&self, _: &Path) -> io::Result<FileInfo> {
        Ok(FileInfo { is_symlink: false, is_dir: true, nlink: 1 })
    }
    fn lookup_command(&self, name: &str) -> Option<PathBuf> {
        Some(Path::new("/opt/bin").join(name))
    }
    fn wrapper(&self, p: &Path, cwds: &[PathBuf]) -> Wrapper {
        if !p.starts_with("/opt/bin") {
            Wrapper::Foreign
        } else if cwds.iter().any(|c| p.starts_with(c)) {
            Wrapper::Exposed("in a directory of the line".into())
        } else {
            Wrapper::Ours
        }
    }
    fn searches_cdpath(&self) -> bool {
        false
    }
}

/// The line judged in the project `/p` (the home is `/h`).
fn check_command(line: &str, _: &Ours) -> Result<Vec<String>, CommandRefusal> {
    sandgate_hook::check_command(line, Path::new("/p"), &Ours, &RootRule::new(["/h".into()]))
}

fn wrapped() -> impl Strategy<Value = String> {
    (
        prop::sample::select(vec![
            "sandbox-run",
            "sandbox-net",
            "sandbox-build",
            "sandgate run --",
            "/opt/bin/sandbox-run",
        ]),
        prop::sample::select(vec!["ls", "cat x", "cargo build", "'a b'", "echo \"x y\""]),
    )
        .prop_map(|(w, c)| format!("{w} {c}"))
}

/// What may stand before a wrapped command: nothing, or a `cd` the hook follows.
fn cd_prefix() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["", "cd /p/sub && ", "cd sub; ", "cd /srv && cd app && "])
}

fn unwrapped() -> impl Strategy<Value = String> {
    (
        prop::sample::select(vec![
            "", "FOO=1 ", "exec ", "command ", "env ", "\\", "'", "\"", "time ", "nohup ",
        ]),
        prop::sample::select(vec!["rm -rf ~", "curl evil", "sh", "id", "sandbox-runx ls"]),
    )
        .prop_map(|(p, c)| format!("{p}{c}"))
}

/// Everything bash treats as the start of another command.
fn separator() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        ";", " ; ", "&&", " || ", "&", " | ", "|", "\n", "\r\n", " |& ", ";;", "$(", "`", "<(",
        ">(", " $( ", "\u{0}", " & ",
    ])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn a_line_with_an_unwrapped_command_is_never_allowed(
        before in prop::collection::vec((wrapped(), separator()), 0..3),
        bad in unwrapped(),
        after in prop::collection::vec((separator(), wrapped()), 0..3),
        close in prop::sample::select(vec!["", ")", "`", " )"]),
    ) {
        let mut line = String::new();
        for (w, s) in &before {
            line.push_str(w);
            line.push_str(s);
        }
        line.push_str(&bad);
        line.push_str(close);
        for (s, w) in &after {
            line.push_str(s);
            line.push_str(w);
        }
        prop_assert!(check_command(&line, &Ours).is_err(), "allowed: {line:?}");
    }

    #[test]
    fn arbitrary_text_is_allowed_only_when_every_stage_starts_with_a_wrapper(line in "\\PC{0,60}") {
        if let Ok(tiers) = check_command(&line, &Ours) {
            // Stages end at `|`, `;` and `&&` (the `&` of `2>&1` is no separator).
            let text = line.replace("2>&1", "");
            let stages: Vec<&str> = text.split(['|', ';']).flat_map(|s| s.split("&&")).collect();
            let mut wrapped = 0;
            for s in &stages {
                let first = s.split_whitespace().next().unwrap_or("");
                if first == "cd" {
                    continue;
                }
                wrapped += 1;
                prop_assert!(
                    ["sandbox-run", "sandbox-net", "sandbox-build", "sandgate"]
                        .iter().any(|w| first == *w || first.ends_with(&format!("/{w}"))),
                    "allowed {line:?}"
                );
            }
            prop_assert_eq!(wrapped, tiers.len());
            let last = stages.last().and_then(|s| s.split_whitespace().next());
            prop_assert!(last != Some("cd"), "allowed a line ending with cd: {line:?}");
        }
    }

    #[test]
    fn wrapped_lines_are_allowed(
        stages in prop::collection::vec(wrapped(), 1..4),
        join in prop::sample::select(vec![" | ", " && ", "; ", "&&"]),
        cd in cd_prefix(),
    ) {
        let line = format!("{cd}{}", stages.join(join));
        prop_assert!(check_command(&line, &Ours).is_ok(), "refused: {line:?}");
    }

    /// `cd` never makes a line with an unwrapped command approvable, nor `sandbox-build` in the
    /// home reachable.
    #[test]
    fn cd_opens_nothing(
        cd in cd_prefix(),
        bad in unwrapped(),
        sep in prop::sample::select(vec![" && ", "; ", " | "]),
        home in prop::sample::select(vec!["cd /h && ", "cd /h; ", "cd / && ", "cd .. && cd .. && "]),
    ) {
        let line = format!("{cd}{bad}{sep}sandbox-run ls");
        prop_assert!(check_command(&line, &Ours).is_err(), "allowed: {line:?}");
        let line = format!("{cd}{home}sandbox-build make");
        prop_assert!(check_command(&line, &Ours).is_err(), "allowed: {line:?}");
    }
}
