//! The fake Telegram Bot API server of `sandgate-test-support` (shared with the end-to-end
//! tests), with the async start and waits these `#[tokio::test]`s use.

#![allow(dead_code)] // each test binary uses a different part

use std::ops::Deref;
use std::time::Duration;

use serde_json::Value;

#[allow(unused_imports)] // kept for tests that build their own updates
pub use sandgate_test_support::telegram::{Call, Failure, bot_user, message_json, text, user};

/// How long a wait for a call may take before the test fails.
const WAIT: Duration = Duration::from_secs(30);

/// The shared fake; its methods are reached through `Deref`.
pub struct FakeTelegram {
    /// `http://127.0.0.1:PORT/`.
    pub url: String,
    inner: sandgate_test_support::telegram::FakeTelegram,
}

impl Deref for FakeTelegram {
    type Target = sandgate_test_support::telegram::FakeTelegram;
    fn deref(&self) -> &Self::Target {
        &self.inner
    }
}

impl FakeTelegram {
    /// Starts the fake (it runs on its own threads, not on the test's runtime).
    pub async fn start() -> FakeTelegram {
        let inner = sandgate_test_support::telegram::FakeTelegram::start();
        FakeTelegram { url: format!("{}/", inner.url), inner }
    }

    /// Starts the fake of the bot with `token` and `@username` (one bot's view of Telegram).
    pub async fn start_bot(token: &str, username: &str) -> FakeTelegram {
        let inner = sandgate_test_support::telegram::FakeTelegram::start_bot(
            token,
            username,
            Duration::from_secs(3600),
        );
        FakeTelegram { url: format!("{}/", inner.url), inner }
    }

    /// Waits for the first call of `method` that matches `pred`.
    pub async fn wait_call(&self, method: &str, pred: impl Fn(&Value) -> bool) -> Call {
        self.inner.wait_nth_async(method, 1, WAIT, pred).await
    }

    /// Waits for the `n`-th call (1-based) of `method` that matches `pred`.
    pub async fn wait_nth_call(
        &self,
        method: &str,
        n: usize,
        pred: impl Fn(&Value) -> bool,
    ) -> Call {
        self.inner.wait_nth_async(method, n, WAIT, pred).await
    }
}
