#!/usr/bin/env bash
# Telegram approval latency: from a blocked request to the question reaching a (fake) Bot API,
# and from the button press being delivered to the held request's response. Target: median
# <= 50 ms each. The figures come from two tests that print them (never assert them: a loaded
# machine is not a slow sandgate): the broker and bot alone, and the whole binary end to end.
#   bench/telegram-latency.sh          # needs root for the end-to-end half (a net sandbox)
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== broker + bot (approvals crate)"
cargo test -q -p sandgate-approvals --test telegram a_button_releases_the_held_request_and_latencies_are_printed -- --nocapture 2>&1 |
  grep -E "telegram latency" || true
echo "== end to end (sandgate net, daemon, fake Bot API)"
cargo build -q
cargo test -q -p sandgate-tests --test suite telegram::a_button_releases_a_held_request_and_the_latencies_are_printed -- --nocapture 2>&1 |
  grep -E "telegram e2e latency" || true
