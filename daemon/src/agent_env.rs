//! What an interactive shell inside a sandbox shows: a prompt marker naming the tier.

use std::ffi::OsString;

/// Turns the marker off when set to `0` in the launcher's environment.
pub const MARKER_ENV: &str = "SANDGATE_PROMPT_MARKER";

/// Adds `[sandgate:TIER] ` in front of the prompt of an interactive shell: `PS1` for shells that
/// take it from the environment (sh, dash, zsh without a theme, bash without a `PS1` in its rc
/// files), and `PROMPT_COMMAND` for bash, whose rc files usually set `PS1` after reading the
/// environment (it runs before each prompt and adds the marker once). Unless
/// `SANDGATE_PROMPT_MARKER=0` (the configuration's `[shell] prompt_marker = false` is checked by
/// the caller).
pub fn prompt_marker(env: &mut Vec<(OsString, OsString)>, tier: &str) {
    if env.iter().any(|(k, v)| k == MARKER_ENV && v == "0") {
        return;
    }
    // Tier names come from config: keep only characters no shell expands inside a prompt.
    let tier: String = tier
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .collect();
    let marker = format!("[sandgate:{tier}] ");
    let ps1 = match env.iter().position(|(k, _)| k == "PS1") {
        Some(i) => {
            let (_, old) = env.remove(i);
            format!("{marker}{}", old.to_string_lossy())
        }
        None => format!("{marker}\\u@\\h:\\w\\$ "),
    };
    env.push(("PS1".into(), ps1.into()));
    let hook = format!("case \"$PS1\" in \"{marker}\"*) ;; *) PS1=\"{marker}$PS1\" ;; esac");
    let prompt_command = match env.iter().position(|(k, _)| k == "PROMPT_COMMAND") {
        Some(i) => {
            let (_, old) = env.remove(i);
            format!("{hook}; {}", old.to_string_lossy())
        }
        None => hook,
    };
    env.push(("PROMPT_COMMAND".into(), prompt_command.into()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marker_is_added_once_and_can_be_turned_off() {
        let mut env = vec![("PS1".into(), "$ ".into())];
        prompt_marker(&mut env, "net");
        assert!(env.contains(&("PS1".into(), "[sandgate:net] $ ".into())));
        assert_eq!(env.iter().filter(|(k, _)| k == "PS1").count(), 1);
        let mut off = vec![(MARKER_ENV.into(), "0".into())];
        prompt_marker(&mut off, "net");
        assert_eq!(off.len(), 1);
        let mut odd = Vec::new();
        prompt_marker(&mut odd, "x$(id)`y`");
        assert!(odd.iter().all(|(_, v)| !v.to_string_lossy().contains("$(id)")));
    }
}
