//! Property: no command line that contains an unwrapped command is ever allowed.

use std::io;
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use sandgate_hook::{FileInfo, Filesystem, check_command};

/// Every wrapper name resolves to "our" binary; nothing else exists.
struct Ours;

impl Filesystem for Ours {
    fn canonicalize(&self, p: &Path) -> io::Result<PathBuf> {
        Ok(p.to_owned())
    }
    fn symlink_metadata(&self, _: &Path) -> io::Result<FileInfo> {
        Err(io::ErrorKind::NotFound.into())
    }
    fn lookup_command(&self, name: &str) -> Option<PathBuf> {
        Some(Path::new("/opt/bin").join(name))
    }
    fn is_sandgate(&self, p: &Path) -> bool {
        p.starts_with("/opt/bin")
    }
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
            let stages: Vec<&str> = line.split('|').collect();
            prop_assert_eq!(stages.len(), tiers.len());
            for s in stages {
                let first = s.split_whitespace().next().unwrap_or("");
                prop_assert!(
                    ["sandbox-run", "sandbox-net", "sandbox-build", "sandgate"]
                        .iter().any(|w| first == *w || first.ends_with(&format!("/{w}"))),
                    "allowed {line:?}"
                );
            }
        }
    }

    #[test]
    fn wrapped_lines_are_allowed(stages in prop::collection::vec(wrapped(), 1..4)) {
        let line = stages.join(" | ");
        prop_assert!(check_command(&line, &Ours).is_ok(), "refused: {line:?}");
    }
}
