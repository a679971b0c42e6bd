//! What `sandgate config check` says about the Telegram bot's token: a token written in the
//! config file, a token file others can read, chats without any token; and a group chat where
//! nobody may answer (no `users`).

use sandgate_config::Config;

use super::{BotToken, CONFIG_TOKEN_WARNING, TOKEN_ENV};

/// The warnings about `config`'s `[telegram]` section (none without one). The environment's
/// `SANDGATE_TELEGRAM_TOKEN` counts as a token, as it does for the daemon.
pub fn config_warnings(config: &Config) -> Vec<String> {
    let Some(t) = config.telegram_settings() else { return Vec::new() };
    let mut out = Vec::new();
    if t.token.is_some() {
        let file =
            config.global.as_ref().map_or("config.toml".into(), |f| f.path.display().to_string());
        out.push(format!("{file}: {CONFIG_TOKEN_WARNING}"));
    }
    match BotToken::from_sources(t.token_file.as_deref(), t.token.as_deref()) {
        Err(e) => out.push(e.to_string()),
        Ok(None) if !t.chats.is_empty() => out.push(format!(
            "[telegram] chats are configured but there is no token: the bot stays off; set \
             {TOKEN_ENV} for the daemon or `token_file`"
        )),
        Ok(_) => {}
    }
    // Group and channel ids are negative; a private chat's id is its user's.
    let groups: Vec<String> = t.chats.iter().filter(|&&c| c < 0).map(i64::to_string).collect();
    if !groups.is_empty() && t.users.is_empty() {
        out.push(format!(
            "[telegram] chats has group chat(s) {} but `users` is empty: nobody may answer there; \
             add `users = [ID, ...]` (the Telegram user ids of those who may)",
            groups.join(", ")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use sandgate_config::ConfigPaths;

    use super::*;

    fn warnings(dir: &std::path::Path, global: &str) -> Vec<String> {
        let paths = ConfigPaths {
            dir: dir.to_owned(),
            global: dir.join("config.toml"),
            project: dir.join("p.toml"),
            project_dir: dir.to_owned(),
            project_root: dir.to_owned(),
            home: None,
        };
        std::fs::write(&paths.global, global).unwrap();
        config_warnings(&Config::load(paths).unwrap())
    }

    #[test]
    fn each_weak_token_source_is_named() {
        if std::env::var_os(TOKEN_ENV).is_some() {
            // The environment's token would decide instead of the files this test writes.
            println!("SKIPPED each_weak_token_source_is_named: {TOKEN_ENV} is set");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        assert!(warnings(dir.path(), "").is_empty());
        assert!(warnings(dir.path(), "[telegram]\n").is_empty(), "no chats, no token: quiet");
        let w = warnings(dir.path(), "[telegram]\nchats = [5]\n");
        assert!(w.len() == 1 && w[0].contains("no token"), "{w:?}");
        let w = warnings(dir.path(), "[telegram]\ntoken = \"1:abc\"\nchats = [5]\n");
        assert!(w.len() == 1 && w[0].contains("config.toml: the Telegram bot token"), "{w:?}");
        let file = dir.path().join("token");
        std::fs::write(&file, "1:abc\n").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let w = warnings(
            dir.path(),
            &format!("[telegram]\ntoken_file = {:?}\n", file.display().to_string()),
        );
        assert_eq!(w.len(), 1, "{w:?}");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let w = warnings(
            dir.path(),
            &format!("[telegram]\ntoken_file = {:?}\n", file.display().to_string()),
        );
        assert!(w.is_empty(), "{w:?}");
    }

    #[test]
    fn a_group_chat_without_users_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let group = "[telegram]\ntoken_file = \"/nonexistent\"\nchats = [5, -100]\n";
        let w = warnings(dir.path(), group);
        assert!(w.iter().any(|w| w.contains("group chat(s) -100")), "{w:?}");
        let w = warnings(dir.path(), &format!("{group}users = [5]\n"));
        assert!(!w.iter().any(|w| w.contains("group chat")), "{w:?}");
    }
}
