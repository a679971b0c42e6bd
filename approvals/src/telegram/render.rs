//! Pure pieces of the bot: message texts, buttons, callback data, command parsing.
//!
//! Messages are plain text (no parse mode), so nothing a sandbox puts in a host or a path can
//! be interpreted as markup.

use std::time::{Duration, SystemTime};

use teloxide_core::types::{InlineKeyboardButton, InlineKeyboardMarkup};

use crate::broker::{BrokerEvent, PendingQuestion, QuestionId};
use crate::scope::{Answer, DurationError, Scope, format_duration, parse_duration};
use crate::terminal::{parse_reply, sanitize, shorten};

/// A command from a chat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BotCommand {
    /// `/allow DOMAIN [scope]`.
    Allow {
        /// Host or `*.domain` pattern.
        pattern: String,
        /// Allow with the scope given (default: session).
        answer: Answer,
    },
    /// `/deny DOMAIN [scope]`.
    Deny {
        /// Host or `*.domain` pattern.
        pattern: String,
        /// Deny with the scope given (default: session).
        answer: Answer,
    },
    /// `/pending`.
    Pending,
    /// `/rules`.
    Rules,
    /// `/revoke ID`.
    Revoke(String),
    /// `/status`.
    Status,
    /// `/help`, `/start`, or plain text.
    Help,
}

/// A command that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    /// Not a command the bot knows.
    #[error("unknown command {0}; send /help")]
    Unknown(String),
    /// Missing or extra arguments.
    #[error("usage: {0}")]
    Usage(&'static str),
    /// A bad duration.
    #[error(transparent)]
    Duration(#[from] DurationError),
}

const ALLOW_USAGE: &str = "/allow DOMAIN[:PORT] [15m|1h|2d|once|session|always|global]";
const DENY_USAGE: &str = "/deny DOMAIN[:PORT] [15m|1h|2d|once|session|always|global]";

/// Reads a message text: `/cmd` or `/cmd@botname`, then arguments.
pub fn parse_command(text: &str) -> Result<BotCommand, CommandError> {
    let mut words = text.split_whitespace();
    let Some(first) = words.next() else { return Ok(BotCommand::Help) };
    let Some(cmd) = first.strip_prefix('/') else { return Ok(BotCommand::Help) };
    let cmd = cmd.split('@').next().unwrap_or(cmd).to_ascii_lowercase();
    let args: Vec<&str> = words.collect();
    let scoped = |usage, allow: bool| -> Result<(String, Answer), CommandError> {
        let (pattern, scope) = match args.as_slice() {
            [p] => (p, Scope::Session),
            [p, s] => (p, parse_scope(s)?),
            _ => return Err(CommandError::Usage(usage)),
        };
        let answer = if allow { Answer::Allow(scope) } else { Answer::Deny(scope) };
        Ok((pattern.to_string(), answer))
    };
    let none = |c: BotCommand, usage| {
        if args.is_empty() { Ok(c) } else { Err(CommandError::Usage(usage)) }
    };
    match cmd.as_str() {
        "allow" => {
            scoped(ALLOW_USAGE, true).map(|(pattern, answer)| BotCommand::Allow { pattern, answer })
        }
        "deny" => {
            scoped(DENY_USAGE, false).map(|(pattern, answer)| BotCommand::Deny { pattern, answer })
        }
        "pending" => none(BotCommand::Pending, "/pending"),
        "rules" => none(BotCommand::Rules, "/rules"),
        "status" => none(BotCommand::Status, "/status"),
        "revoke" => match args.as_slice() {
            [id] => Ok(BotCommand::Revoke(id.to_string())),
            _ => Err(CommandError::Usage("/revoke ID (see /rules)")),
        },
        "help" | "start" => Ok(BotCommand::Help),
        _ => Err(CommandError::Unknown(format!("/{}", shorten(&sanitize(&cmd), 32)))),
    }
}

fn parse_scope(s: &str) -> Result<Scope, CommandError> {
    Ok(match s.to_ascii_lowercase().as_str() {
        "once" => Scope::Once,
        "session" => Scope::Session,
        "always" => Scope::Always { global: false },
        "global" => Scope::Always { global: true },
        _ => Scope::For(parse_duration(s)?),
    })
}

/// Whom a message typed in a group chat is for (see [`addressee`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Addressee {
    /// `/cmd@thisbot`, or a command without a name sent as a reply to this bot's message.
    Me,
    /// `/cmd@otherbot`: another machine's bot.
    Other,
    /// A command that names no bot and replies to none of this bot's messages: in a chat that
    /// several machines share, it does not say which one it is for.
    Nobody,
    /// Not a command.
    Chatter,
}

/// Whom `text`, typed in a group chat, is for. `me` is this bot's username (without `@`;
/// `None` while unknown, when no `@name` is this bot's); `replies_to_me` says the message
/// replies to one of this bot's messages. A name written in the command wins over the reply.
pub fn addressee(text: &str, me: Option<&str>, replies_to_me: bool) -> Addressee {
    let Some(first) = text.split_whitespace().next() else { return Addressee::Chatter };
    let Some(cmd) = first.strip_prefix('/') else { return Addressee::Chatter };
    match cmd.split_once('@') {
        Some((_, name)) => match me {
            Some(me) if name.eq_ignore_ascii_case(me) => Addressee::Me,
            Some(_) | None => Addressee::Other,
        },
        None if replies_to_me => Addressee::Me,
        None => Addressee::Nobody,
    }
}

/// Why a person's answer is refused (see [`may_answer`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotAllowed {
    /// A group chat, and `[telegram] users` names nobody.
    #[error(
        "nobody may answer in a group chat until `[telegram] users` lists who may (their \
         Telegram user ids); nothing was answered"
    )]
    NoUsersForGroup,
    /// The sender is not in `[telegram] users`.
    #[error("Telegram user {0} may not answer: not in `[telegram] users`; nothing was answered")]
    NotListed(u64),
    /// The message is not a person's own: no sender, or sent as a chat (an anonymous admin, a
    /// channel), by a bot, forwarded, or via an inline bot.
    #[error(
        "only a listed person's own message can answer (not one sent anonymously or as a \
         channel, by a bot, forwarded, or via an inline bot); nothing was answered"
    )]
    Anonymous,
}

/// Whether `sender` may answer in a chat (`private_chat`: a one-to-one chat with the bot, whose
/// only user is its owner), given `[telegram] users`: in a private chat anyone the list names
/// (its owner when the list is empty); in a group only those the list names.
pub fn may_answer(
    private_chat: bool,
    sender: Option<u64>,
    users: &[i64],
) -> Result<(), NotAllowed> {
    let Some(sender) = sender else { return Err(NotAllowed::Anonymous) };
    let listed = users.iter().any(|&u| u64::try_from(u).is_ok_and(|u| u == sender));
    match (private_chat, users.is_empty(), listed) {
        (_, _, true) | (true, true, _) => Ok(()),
        (false, true, false) => Err(NotAllowed::NoUsersForGroup),
        (_, false, false) => Err(NotAllowed::NotListed(sender)),
    }
}

/// `text` as this daemon posts it: after `[name] ` when a name is configured.
pub fn tagged(name: &str, text: &str) -> String {
    if name.is_empty() { text.to_owned() } else { format!("[{}] {text}", sanitize(name)) }
}

/// The reply to a command in a group chat that names no bot.
pub(crate) fn unaddressed_text(me: Option<&str>) -> String {
    let at = me.map_or_else(|| "@thisbot".to_owned(), |m| format!("@{}", sanitize(m)));
    format!(
        "several machines may share this chat, so a command must say which one it is for: \
         /allow{at} DOMAIN, or reply to this machine's question"
    )
}

/// The help text.
pub(crate) fn help_text() -> String {
    format!(
        "sandgate asks here when a sandbox wants a host its allowlist does not cover.\n\
         Buttons: Allow once (the waiting requests) · This session (the sandbox) · 1 hour · \
         Always (this project) · Deny (this session).\n\
         Commands:\n{ALLOW_USAGE}\n{DENY_USAGE}\n/pending\n/rules\n/revoke ID\n/status"
    )
}

/// Callback data of a button: `q12.<run id in hex>:o`. Question ids restart at `q1` with each
/// daemon; the broker's random run id makes a button from before a restart recognisable.
pub fn callback_data(run: u64, id: QuestionId, key: char) -> String {
    format!("{id}.{run:016x}:{key}")
}

/// A button's callback data, read back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Callback {
    /// A button of this run's question `id`.
    Current(QuestionId, Answer),
    /// A sandgate button of another daemon run (or an older sandgate): its question is gone.
    Stale,
}

/// Reads a button's callback data back; `None` when it is not sandgate's.
pub fn parse_callback(run: u64, data: &str) -> Option<Callback> {
    let (id, key) = data.split_once(':')?;
    // Exactly the one key a button carries (parse_reply is lenient with what a person types).
    if key.len() != 1 {
        return None;
    }
    let answer = parse_reply(key).ok()?;
    let id = id.strip_prefix('q')?;
    let (id, from) = match id.split_once('.') {
        Some((id, from)) => (id, Some(from)),
        None => (id, None),
    };
    let id: u64 = id.parse().ok()?;
    let from = from.map(|f| u64::from_str_radix(f, 16)).transpose().ok()?;
    Some(match from {
        Some(r) if r == run => Callback::Current(QuestionId(id), answer),
        Some(_) | None => Callback::Stale,
    })
}

/// The inline buttons under a question.
pub(crate) fn keyboard(run: u64, id: QuestionId) -> InlineKeyboardMarkup {
    let b = |label: &str, key| InlineKeyboardButton::callback(label, callback_data(run, id, key));
    InlineKeyboardMarkup::new(vec![
        vec![b("Allow once", 'o'), b("This session", 's'), b("1 hour", 'h')],
        vec![b("Always", 'a'), b("Deny", 'd')],
    ])
}

/// The text of a question message.
pub(crate) fn question_text(q: &PendingQuestion) -> String {
    let x = &q.question;
    let mut s = format!("🔒 {} wants {}:{}", sanitize(&x.sandbox), sanitize(&x.host), x.port);
    // The process on a line of its own, first: "`cargo` (pid 412) wants index.crates.io:443".
    if let Some(p) = &x.process {
        s.push_str(&format!("\n{p} wants {}:{}", sanitize(&x.host), x.port));
    }
    if let Some(m) = &x.method {
        s.push_str(&format!(
            "\n{} {}",
            sanitize(m),
            sanitize(&shorten(x.path.as_deref().unwrap_or(""), 200))
        ));
    }
    if let Some(p) = &x.process {
        let (command, exe) = (shorten(&p.command, 200), shorten(&p.exe, 200));
        s.push_str(&format!("\nprocess: {} ({})", sanitize(&command), sanitize(&exe)));
    }
    s.push_str(&format!("\ncommand: {}", sanitize(&shorten(&x.command.join(" "), 200))));
    if let Some(cwd) = &x.cwd {
        s.push_str(&format!("\ncwd: {}", sanitize(&shorten(&cwd.to_string_lossy(), 200))));
    }
    let timeout = q.deadline.duration_since(q.first_asked).unwrap_or(Duration::ZERO);
    s.push_str(&format!(
        "\nquestion {} · denied in {} without an answer · or /allow {}",
        q.id,
        format_duration(timeout),
        sanitize(&x.host)
    ));
    s
}

/// The text a question message is edited to once it ends.
pub(crate) fn closed_text(ev: &BrokerEvent) -> Option<(QuestionId, String)> {
    match ev {
        BrokerEvent::Asked(_) | BrokerEvent::OverBudget { .. } => None,
        BrokerEvent::Withdrawn(question) => {
            let q = &question.question;
            Some((
                question.id,
                format!(
                    "⏹ {}:{} not answered: its sandbox ended (sandbox {})",
                    sanitize(&q.host),
                    q.port,
                    sanitize(&q.sandbox)
                ),
            ))
        }
        BrokerEvent::Answered { question, answer, by, pattern } => {
            let mark = if answer.allows() { "✅" } else { "⛔" };
            let q = &question.question;
            let via = if pattern != &q.host {
                format!(" (as {})", sanitize(pattern))
            } else {
                String::new()
            };
            Some((
                question.id,
                format!(
                    "{mark} {}:{} {answer}{via} {} (sandbox {})",
                    sanitize(&q.host),
                    q.port,
                    sanitize(&by.to_string()),
                    sanitize(&q.sandbox)
                ),
            ))
        }
        BrokerEvent::TimedOut(question) => {
            let q = &question.question;
            Some((
                question.id,
                format!(
                    "⌛ {}:{} denied: nobody answered in time (sandbox {})",
                    sanitize(&q.host),
                    q.port,
                    sanitize(&q.sandbox)
                ),
            ))
        }
    }
}

/// The one message of a sandbox that went past its question budget in a window.
pub(crate) fn over_budget_text(ev: &BrokerEvent) -> Option<String> {
    match ev {
        BrokerEvent::OverBudget { sandbox, refused, limit, window } => Some(format!(
            "🛑 sandbox {} asked more than {limit} questions in {}: and {refused} more were \
             denied without asking (see `sandgate status`)",
            sanitize(sandbox),
            format_duration(*window)
        )),
        BrokerEvent::Asked(_)
        | BrokerEvent::Answered { .. }
        | BrokerEvent::TimedOut(_)
        | BrokerEvent::Withdrawn(_) => None,
    }
}

/// The reply to `/pending`.
pub(crate) fn pending_text(pending: &[PendingQuestion], now: SystemTime) -> String {
    if pending.is_empty() {
        return "Nothing pending.".into();
    }
    let mut s = format!("{} pending:", pending.len());
    for q in pending {
        let left = q.deadline.duration_since(now).unwrap_or(Duration::ZERO);
        let by = q.question.process.as_ref().map(|p| format!(" · by {p}")).unwrap_or_default();
        s.push_str(&format!(
            "\n{} · {} wants {}:{} · {} waiting · {} left{by}",
            q.id,
            sanitize(&q.question.sandbox),
            sanitize(&q.question.host),
            q.question.port,
            q.waiters,
            format_duration(Duration::from_secs(left.as_secs().max(1)))
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_parse() {
        let hour = Scope::For(Duration::from_secs(3600));
        let rows: Vec<(&str, Result<BotCommand, CommandError>)> = vec![
            (
                "/allow crates.io",
                Ok(BotCommand::Allow {
                    pattern: "crates.io".into(),
                    answer: Answer::Allow(Scope::Session),
                }),
            ),
            (
                "/allow@sandgate_bot *.example.com 1h",
                Ok(BotCommand::Allow {
                    pattern: "*.example.com".into(),
                    answer: Answer::Allow(hour),
                }),
            ),
            (
                "/ALLOW x.io global",
                Ok(BotCommand::Allow {
                    pattern: "x.io".into(),
                    answer: Answer::Allow(Scope::Always { global: true }),
                }),
            ),
            (
                "/deny evil.example",
                Ok(BotCommand::Deny {
                    pattern: "evil.example".into(),
                    answer: Answer::Deny(Scope::Session),
                }),
            ),
            (
                "/deny evil.example always",
                Ok(BotCommand::Deny {
                    pattern: "evil.example".into(),
                    answer: Answer::Deny(Scope::Always { global: false }),
                }),
            ),
            ("/pending", Ok(BotCommand::Pending)),
            ("/rules", Ok(BotCommand::Rules)),
            ("/status", Ok(BotCommand::Status)),
            ("/revoke 12", Ok(BotCommand::Revoke("12".into()))),
            ("/start", Ok(BotCommand::Help)),
            ("hello", Ok(BotCommand::Help)),
            ("", Ok(BotCommand::Help)),
            ("/allow", Err(CommandError::Usage(ALLOW_USAGE))),
            ("/allow a b c", Err(CommandError::Usage(ALLOW_USAGE))),
            ("/revoke", Err(CommandError::Usage("/revoke ID (see /rules)"))),
            ("/pending now", Err(CommandError::Usage("/pending"))),
            ("/rm -rf", Err(CommandError::Unknown("/rm".into()))),
        ];
        for (text, want) in rows {
            assert_eq!(parse_command(text), want, "{text:?}");
        }
        assert!(matches!(parse_command("/allow x.io 3y"), Err(CommandError::Duration(_))));
    }

    #[test]
    fn commands_in_a_group_are_for_the_bot_they_name_or_reply_to() {
        use Addressee::{Chatter, Me, Nobody, Other};
        let me = Some("laptop_bot");
        // (text, this bot's username, replies to this bot, for)
        let rows: [(&str, Option<&str>, bool, Addressee); 10] = [
            ("/allow@laptop_bot x.io", me, false, Me),
            ("/allow@LAPTOP_bot x.io", me, false, Me),
            ("/allow@ci_bot x.io", me, false, Other),
            ("/allow@ci_bot x.io", me, true, Other),
            ("/allow@laptop_bot x.io", None, false, Other),
            ("/allow x.io", me, true, Me),
            ("/allow x.io", me, false, Nobody),
            ("/pending", None, false, Nobody),
            ("allow x.io", me, true, Chatter),
            ("", me, true, Chatter),
        ];
        for (text, me, reply, want) in rows {
            assert_eq!(addressee(text, me, reply), want, "{text:?} {me:?} {reply}");
        }
    }

    #[test]
    fn who_may_answer() {
        /// (private chat, sender, `users`, verdict)
        type Row = (bool, Option<u64>, &'static [i64], Result<(), NotAllowed>);
        let none: &[i64] = &[];
        let rows: [Row; 8] = [
            (true, Some(7), none, Ok(())),
            (true, Some(7), &[7], Ok(())),
            (true, Some(7), &[8], Err(NotAllowed::NotListed(7))),
            (false, Some(7), none, Err(NotAllowed::NoUsersForGroup)),
            (false, Some(7), &[8, 7], Ok(())),
            (false, Some(9), &[8, 7], Err(NotAllowed::NotListed(9))),
            (false, None, &[8], Err(NotAllowed::Anonymous)),
            (false, Some(u64::MAX), &[-1], Err(NotAllowed::NotListed(u64::MAX))),
        ];
        for (private, sender, users, want) in rows {
            assert_eq!(may_answer(private, sender, users), want, "{private} {sender:?} {users:?}");
        }
    }

    #[test]
    fn messages_name_the_machine() {
        assert_eq!(tagged("", "🔒 q"), "🔒 q");
        assert_eq!(tagged("alice@laptop", "🔒 q"), "[alice@laptop] 🔒 q");
        assert_eq!(tagged("a\x1b[2Jb", "q"), "[a?[2Jb] q");
    }

    #[test]
    fn callbacks_round_trip() {
        let run = u64::MAX - 7;
        for key in ['o', 's', 'h', 'a', 'd'] {
            let data = callback_data(run, QuestionId(42), key);
            assert!(data.len() <= 64, "Telegram's limit");
            let Some(Callback::Current(id, answer)) = parse_callback(run, &data) else {
                panic!("{data}")
            };
            assert_eq!((id, Ok(answer)), (QuestionId(42), parse_reply(&key.to_string())));
        }
        for bad in ["", "q1", "x1:o", "q1:z", "q:o", "qq1:o", "q1.zz:o", "q1.:o"] {
            assert_eq!(parse_callback(run, bad), None, "{bad:?}");
        }
        // Forged or mangled data never answers a question of this run unless it names this
        // run's id (the value, whatever its spelling) and a valid key.
        let hostile = [
            format!("q1.{run:x}:o:x"),
            format!("q1.{run:x}:o\n"),
            format!("q99999999999999999999.{run:x}:o"),
            format!("q1.{:x}:o", run.wrapping_add(1)),
            format!("q1.{run:x}0:o"),
            format!(" q1.{run:x}:o"),
            format!("q-1.{run:x}:o"),
        ];
        for data in &hostile {
            assert!(!matches!(parse_callback(run, data), Some(Callback::Current(..))), "{data:?}");
        }
        // Another run's button, or an older sandgate's (no run id): stale, never another q1.
        for stale in [callback_data(run - 1, QuestionId(1), 'o'), "q1:o".to_owned()] {
            assert_eq!(parse_callback(run, &stale), Some(Callback::Stale), "{stale}");
        }
    }

    #[test]
    fn a_question_names_the_process_that_asked() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let mut q = PendingQuestion {
            id: QuestionId(3),
            question: crate::broker::Question {
                sandbox: "sg-1".into(),
                host: "index.crates.io".into(),
                port: 443,
                method: None,
                path: None,
                command: vec!["sh".into()],
                cwd: None,
                project: None,
                process: None,
            },
            first_asked: t,
            deadline: t + Duration::from_secs(60),
            waiters: 1,
        };
        let without = question_text(&q);
        assert!(
            without.starts_with("🔒 sg-1 wants index.crates.io:443\ncommand: sh\n"),
            "{without}"
        );
        q.question.process = Some(sandgate_config::ProcessInfo {
            pid: 412,
            exe: "/usr/bin/cargo".into(),
            command: "cargo fetch\x1b[2J".into(),
        });
        let with = question_text(&q);
        assert!(
            with.starts_with(
                "🔒 sg-1 wants index.crates.io:443\n`cargo` (pid 412) wants index.crates.io:443\n\
                 process: cargo fetch?[2J (/usr/bin/cargo)\ncommand: sh\n"
            ),
            "{with}"
        );
        let list = pending_text(&[q], t);
        assert!(list.ends_with(" · 1 waiting · 1m left · by `cargo` (pid 412)"), "{list}");
    }
}
