//! sandgate's approvals: requests the policy does not cover are *held* while a person is asked,
//! on every channel at once, and the first answer releases them.
//!
//! - [`Broker`]: one open question per (sandbox, host, port) however many requests wait on it;
//!   every waiter gets the same [`Resolution`]; no answer within the timeout (60 s by default) is a
//!   denial whose [`Resolution::denial_reason`] the proxy puts in its 403 body. Answers
//!   ([`Answer`] = allow/deny × [`Scope`]) may name a question or a host pattern, including a
//!   wildcard that releases every open question it covers. Grants are persisted through the
//!   [`GrantWriter`] the daemon implements over the store.
//! - Channels: [`terminal`] (a prompt written to `/dev/tty`, never stdout, and the reply keys
//!   `o/s/h/a/d`) and [`telegram`] (a bot with inline buttons and commands, robust to the Bot API
//!   failing). The CLI channel is the daemon's control socket calling [`Broker::answer`].
//!
//! This crate does not decide policy, match allowlists or touch the store itself.
//!
//! # Why these choices
//!
//! - `teloxide-core`, not `teloxide`: the bot makes four Bot API calls (`getUpdates`,
//!   `sendMessage`, `editMessageText`, `answerCallbackQuery`) from its own three tasks (so one
//!   hung call holds up only its own question); `teloxide`'s dispatcher, `dptree` and macros were
//!   unused. Trimming it removed 9 crates from Cargo.lock (10 from the binary's tree).
//! - Not hand-written HTTP either: `teloxide-core` gives the typed `Update`/`Message`/
//!   `CallbackQuery` replies and tells API errors (another poller on the token, message not
//!   modified) from network ones, the parts most likely to be wrong when done by hand.

#![forbid(unsafe_code)]

mod broker;
pub mod epoch_ms;
mod pattern;
mod scope;
pub mod telegram;
pub mod terminal;

pub use broker::{
    AnswerError, AnswerScreen, AnswerTarget, Answered, Broker, BrokerConfig, BrokerEvent,
    BudgetStats, DEFAULT_PORT, DEFAULT_QUESTIONS_PER_MINUTE, DEFAULT_QUESTIONS_PER_MINUTE_TOTAL,
    Effect, GrantRequest, GrantTarget, GrantWriter, ONCE_WINDOW, PendingQuestion, Question,
    QuestionId, Resolution, SandboxRef,
};
pub use pattern::{AnswerPattern, PatternError};
pub use scope::{
    Answer, Channel, DurationError, MAX_DURATION, Responder, Scope, format_duration, parse_duration,
};
