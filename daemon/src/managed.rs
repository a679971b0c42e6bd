//! The managed layer in the daemon: every allow answer, from every channel (the terminal,
//! `sandgate allow`, `watch`, Telegram), is screened against `/etc/sandgate/managed.toml` before
//! it is claimed or stored ([`ManagedScreen`]); policies carry the rest (see
//! `sandgate_config::Managed`).

use std::path::PathBuf;

use sandgate_approvals::{AnswerScreen, GrantRequest};
use sandgate_config::{DomainPattern, Effect, MANAGED_FILE, Managed, PatternUse};

/// [`AnswerScreen`] over the managed file, read again for every answer: a file an administrator
/// installs while the daemon runs holds from the next answer on, and a file that cannot be read
/// or trusted refuses every allow answer (fail closed).
pub struct ManagedScreen {
    path: PathBuf,
    home: Option<PathBuf>,
}

impl ManagedScreen {
    /// The screen of the system's managed file.
    pub fn system() -> ManagedScreen {
        ManagedScreen {
            path: sandgate_config::system_dir().join(MANAGED_FILE),
            home: std::env::var_os("HOME").map(PathBuf::from).filter(|p| p.is_absolute()),
        }
    }
}

impl AnswerScreen for ManagedScreen {
    fn screen(&self, g: &GrantRequest) -> Result<(), String> {
        if g.effect == Effect::Deny {
            return Ok(()); // a deny only narrows
        }
        let managed = match Managed::load(&self.path, self.home.as_deref()) {
            Ok(Some(m)) => m,
            Ok(None) => return Ok(()),
            Err(e) => {
                return Err(format!(
                    "your organisation's policy cannot be read, so nothing is allowed: {e}"
                ));
            }
        };
        screen(&managed, g)
    }
}

/// What `config check` says about the managed layer: what it enforces, and each rule of the
/// user's files that its allow ceiling sets aside.
pub fn check_lines(config: &sandgate_config::Config) -> Vec<String> {
    let Some(m) = &config.managed else { return Vec::new() };
    let mut out = vec![format!(
        "managed: your organisation's policy applies ({}): {} allowed, {} denied{}{}",
        m.path.display(),
        m.allow.len(),
        m.deny.len(),
        if m.allow_only_managed { ", nothing else may be allowed" } else { "" },
        if m.fs_locked { ", filesystem walls locked" } else { "" },
    )];
    for r in config.set_aside_by_managed() {
        out.push(format!(
            "warning: allow {r} has no effect: blocked by your organisation's policy \
             (allow_only_managed in {})",
            m.path.display()
        ));
    }
    out
}

/// Whether the managed layer lets `g` be granted (pure: the file is already read).
fn screen(managed: &Managed, g: &GrantRequest) -> Result<(), String> {
    let text = match g.port {
        Some(port) => format!("{}:{port}", g.pattern),
        None => g.pattern.clone(),
    };
    let pattern = DomainPattern::parse(&text, PatternUse::Allow).map_err(|e| e.to_string())?;
    let what = format!("allowing {text}");
    managed.screen_allow(&pattern, &what).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::SystemTime;

    use sandgate_approvals::{Channel, GrantTarget, Responder, Scope};

    use super::*;

    fn grant(pattern: &str, port: Option<u16>, effect: Effect) -> GrantRequest {
        GrantRequest {
            pattern: pattern.into(),
            port,
            effect,
            scope: Scope::Always { global: true },
            target: GrantTarget::Global,
            expires: None,
            by: Responder::new(Channel::Cli, "alice"),
            at: SystemTime::now(),
        }
    }

    #[test]
    fn grants_past_the_ceiling_are_refused_with_the_organisations_words() {
        let m = Managed::parse(
            Path::new("/etc/sandgate/managed.toml"),
            "[network]\nallow = [\"*.corp.example\"]\ndeny = [\"leak.example\"]\n\
             allow_only_managed = true\n",
            None,
        )
        .unwrap();
        // (pattern, port, effect, refused)
        for (p, port, effect, refused) in [
            ("a.corp.example", Some(443), Effect::Allow, false),
            ("*.corp.example", None, Effect::Allow, false),
            ("other.example", Some(443), Effect::Allow, true),
            ("leak.example", Some(443), Effect::Allow, true),
            ("other.example", Some(443), Effect::Deny, false),
        ] {
            let g = grant(p, port, effect);
            let r = if effect == Effect::Deny { Ok(()) } else { screen(&m, &g) };
            assert_eq!(r.is_err(), refused, "{p}: {r:?}");
            if let Err(e) = r {
                assert!(e.contains("blocked by your organisation's policy"), "{e}");
            }
        }
    }
}
