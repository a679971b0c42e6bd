//! Telegram channel (in progress).
