//! `kill -9` at random moments while a process writes: the file stays sound and everything that
//! was reported committed is there.
//!
//! The writer is this test binary re-invoked with `SANDGATE_STORE_KILL9_CHILD` set: it runs the
//! same test function, which then writes forever and prints one line per committed change.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sandgate_store::{
    Effect, EventKind, EventWriter, EventWriterConfig, GrantId, GrantList, GrantScope, GrantTarget,
    NewEvent, NewGrant, NewSandbox, Store, Timestamp,
};

const CHILD_ENV: &str = "SANDGATE_STORE_KILL9_CHILD";
const ROUND_ENV: &str = "SANDGATE_STORE_KILL9_ROUND";
const TEST_NAME: &str = "kill9_at_random_moments_keeps_committed_grants";
const ROUNDS: u32 = 20;

#[test]
fn kill9_at_random_moments_keeps_committed_grants() {
    if let Some(path) = std::env::var_os(CHILD_ENV) {
        let round = std::env::var(ROUND_ENV).ok().and_then(|r| r.parse().ok()).unwrap_or(0);
        child_writes_forever(Path::new(&path), round);
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sandgate/sandgate.db");
    let exe = std::env::current_exe().unwrap();
    let mut rng = XorShift::seeded();
    println!("kill9 seed {}", rng.0);
    let mut granted: Vec<(GrantId, String)> = Vec::new();
    let mut taken: Vec<GrantId> = Vec::new();

    for round in 0..ROUNDS {
        let mut child = Command::new(&exe)
            .args(["--exact", TEST_NAME, "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, &path)
            .env(ROUND_ENV, round.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel::<String>();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        // Kill after a random number of commits (0 = possibly during open and migration), plus
        // a random sub-millisecond-to-few-millisecond delay so the kill lands mid-transaction.
        let wait_for = rng.below(40);
        let mut seen = Vec::new();
        while seen.iter().filter(|l: &&String| l.starts_with("grant ")).count() < wait_for as usize
        {
            match rx.recv_timeout(Duration::from_secs(60)) {
                Ok(line) => seen.push(line),
                Err(e) => panic!("round {round}: child stopped reporting ({e}); lines {seen:?}"),
            }
        }
        std::thread::sleep(Duration::from_micros(rng.below(5000)));
        child.kill().unwrap(); // SIGKILL
        let status = child.wait().unwrap();
        assert!(!status.success(), "round {round}: the child must die by the signal");
        reader.join().unwrap();
        seen.extend(rx.try_iter());

        for line in &seen {
            let mut parts = line.split_whitespace();
            match (parts.next(), parts.next().and_then(|id| id.parse().ok()), parts.next()) {
                (Some("grant"), Some(id), Some(pattern)) => {
                    granted.push((GrantId(id), pattern.to_string()));
                }
                (Some("took"), Some(id), None) => taken.push(GrantId(id)),
                _ => {} // libtest's own lines
            }
        }

        let store = Store::open(&path).unwrap();
        let problems = store.integrity_check().unwrap();
        assert!(problems.is_empty(), "round {round}: integrity_check: {problems:?}");
        for (id, pattern) in &granted {
            let g = store.grant(*id).unwrap();
            let g = g.unwrap_or_else(|| panic!("round {round}: committed grant {id} lost"));
            assert_eq!(&g.grant.pattern, pattern, "round {round}: grant {id}");
        }
        for id in &taken {
            assert!(store.grant(*id).unwrap().unwrap().used.is_some(), "round {round}: {id}");
        }
    }
    let store = Store::open(&path).unwrap();
    let all = store.list_grants(GrantList::All).unwrap();
    println!(
        "kill9: {ROUNDS} kills, {} grants reported committed ({} in the file), {} once grants taken",
        granted.len(),
        all.len(),
        taken.len()
    );
    assert!(granted.len() >= 40, "too few commits to mean anything: {}", granted.len());
}

/// The child: register a sandbox, then add grants, consume some, record events, revoke some,
/// printing each committed change. Never returns; the parent kills it.
fn child_writes_forever(path: &Path, round: u32) -> ! {
    let store = Store::open(path).unwrap();
    let sandbox = format!("kill9-{round}");
    store
        .register_sandbox(&NewSandbox {
            id: sandbox.clone(),
            tier: "net".into(),
            command: vec!["agent".into()],
            cwd: PathBuf::from("/p"),
            project: Some("p".into()),
            uid: 1000,
            pid: std::process::id(),
            started: Timestamp::now(),
        })
        .unwrap();
    let writer = EventWriter::start(&store, EventWriterConfig::default()).unwrap();
    let mut out = std::io::stdout().lock();
    for i in 0u64.. {
        let now = Timestamp::now();
        let scope = match i % 4 {
            0 => GrantScope::Once,
            1 => GrantScope::Session,
            2 => GrantScope::Until(now.plus(Duration::from_secs(3600))),
            _ => GrantScope::Always,
        };
        let target = match scope {
            GrantScope::Always => GrantTarget::Project("p".into()),
            _ => GrantTarget::Sandbox(sandbox.clone()),
        };
        let g = store
            .add_grant(&NewGrant {
                pattern: format!("r{round}-g{i}.example"),
                port: Some(443),
                effect: Effect::Allow,
                scope,
                target,
                approved_by: "@kill9".into(),
                channel: "cli".into(),
                created: now,
            })
            .unwrap();
        writeln!(out, "grant {} {}", g.id, g.grant.pattern).unwrap();
        out.flush().unwrap();
        for _ in 0..20 {
            writer.send(NewEvent {
                time: now,
                sandbox: Some(sandbox.clone()),
                kind: EventKind::Decision,
                details: serde_json::json!({ "host": g.grant.pattern, "i": i }),
            });
        }
        if scope == GrantScope::Once && store.take_once(g.id, now).unwrap() {
            writeln!(out, "took {}", g.id).unwrap();
            out.flush().unwrap();
        }
        if i % 7 == 0 {
            store.meta_set("kill9.last", &i.to_string(), now).unwrap();
        }
        if i % 50 == 49 {
            store.prune_events(now.minus(Duration::from_millis(5))).unwrap();
        }
    }
    unreachable!("the loop above never ends")
}

/// A tiny PRNG so the test needs no dependency; the seed is printed for reproduction.
struct XorShift(u64);

impl XorShift {
    fn seeded() -> Self {
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().subsec_nanos();
        XorShift(u64::from(nanos) | 1)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}
