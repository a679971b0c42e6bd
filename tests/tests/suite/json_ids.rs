//! Every id in every `--json` output is a string (issue 17, item 13): questions `"q12"`, grants
//! `"g12"`, sandboxes `"sg-…"`. One run that makes a question, answers it into a grant, revokes
//! it and ends the sandbox, walking each command's JSON (and `watch --json`'s events) for keys
//! that name an id; the printed forms are then fed back to the commands that take ids.

use std::process::Stdio;
use std::time::Duration;

use crate::support::daemon::*;
use sandgate_tests::{origin, skip_unless};
use serde_json::{Value, json};

/// Keys whose value is an id wherever they appear (an object under such a key, like an event's
/// `question`, is walked instead). `pid`/`uid` are the kernel's numbers, not sandgate's ids.
fn is_id_key(key: &str) -> bool {
    key == "id"
        || key.ends_with("_id")
        || matches!(key, "question" | "grant" | "sandbox" | "registered" | "unregistered")
}

/// Keys holding a list of ids.
fn is_id_list_key(key: &str) -> bool {
    matches!(key, "grants" | "questions" | "sandboxes_ids")
}

/// Every id that is not a string, as `path: value`; and the ids seen, by key.
fn walk(v: &Value, path: &str, bad: &mut Vec<String>, seen: &mut Vec<(String, String)>) {
    match v {
        Value::Object(m) => {
            for (k, val) in m {
                let p = format!("{path}.{k}");
                match val {
                    Value::Object(_) => walk(val, &p, bad, seen),
                    Value::Array(a) if is_id_list_key(k) => {
                        for (i, x) in a.iter().enumerate() {
                            match x {
                                Value::String(s) => seen.push((k.clone(), s.clone())),
                                other => bad.push(format!("{p}[{i}]: {other}")),
                            }
                        }
                    }
                    Value::Array(_) => walk(val, &p, bad, seen),
                    Value::String(s) if is_id_key(k) => seen.push((k.clone(), s.clone())),
                    Value::Null => {}
                    other if is_id_key(k) => bad.push(format!("{p}: {other}")),
                    _ => {}
                }
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                walk(x, &format!("{path}[{i}]"), bad, seen);
            }
        }
        _ => {}
    }
}

fn non_string_ids(v: &Value) -> Vec<String> {
    let mut bad = Vec::new();
    walk(v, "", &mut bad, &mut Vec::new());
    bad
}

/// The walker itself: the shapes sandgate printed before ids were strings are caught.
#[test]
fn the_walker_catches_numeric_ids() {
    let old = json!([
        {"id": 3, "sandbox": "sg-1", "host": "a.test"},
        {"event": "asked", "question": {"id": 4, "sandbox": "sg-1"}},
        {"released": [{"id": 5}], "grants": [12]},
        {"grant": 12, "line": "#12 ..."},
        {"target": {"sandbox": 7}, "chat_id": 9},
    ]);
    let bad = non_string_ids(&old);
    assert_eq!(
        bad,
        [
            "[0].id: 3",
            "[1].question.id: 4",
            "[2].grants[0]: 12",
            "[2].released[0].id: 5",
            "[3].grant: 12",
            "[4].chat_id: 9",
            "[4].target.sandbox: 7",
        ],
    );
    let new = json!([{"id": "q3", "sandbox": "sg-1", "pid": 7, "uid": 0}, {"grants": ["g12"]}]);
    assert!(non_string_ids(&new).is_empty());
}

#[test]
fn every_id_in_every_json_output_is_a_string() {
    if skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    let t = DaemonEnv::new("[daemon]\nask_timeout = \"60s\"\n");
    let port = origin("ids");
    let url = format!("http://127.0.0.1:{port}/");
    let mut outputs: Vec<(String, Value)> = Vec::new();
    let mut run = |args: &[&str]| -> Value {
        let out = t.sg(args);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        // Most print one document; `log --json` prints one object per line.
        let docs: Vec<Value> = match serde_json::from_str(&text) {
            Ok(v) => vec![v],
            Err(_) => text
                .lines()
                .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{args:?}: {e}: {l}")))
                .collect(),
        };
        for d in &docs {
            outputs.push((args.join(" "), d.clone()));
        }
        docs.into_iter().next().unwrap_or(Value::Null)
    };
    start_daemon(&t);
    let mut watch = t.cmd().args(["watch", "--json"]).stdout(Stdio::piped()).spawn().unwrap();
    let events = lines_of(watch.stdout.take().unwrap());

    // A sandbox that asks, and waits for a file before it ends.
    let script = format!("{}; while [ ! -e done ]; do sleep 0.05; done", curl_sh(&url));
    let held = t.spawn_net(&[], &["sh", "-c", &script]);
    wait_until("one question", Duration::from_secs(20), || {
        t.json(&["pending", "--json"]).as_array().is_some_and(|p| p.len() == 1)
    });
    let pending = run(&["pending", "--json"]);
    let q = pending[0]["id"].as_str().expect("a question id is a string").to_owned();
    assert!(q.starts_with('q'), "{q}");
    run(&["status", "--json"]);
    run(&["ls", "--json"]);

    // The printed question id is what `allow` takes; the grant id it prints is what `revoke`
    // takes (and `#12`/`12` still work).
    let answered = run(&["allow", &q, "--for", "1h", "--json"]);
    let g = answered["grants"][0].as_str().expect("a grant id is a string").to_owned();
    assert!(g.starts_with('g'), "{answered}");
    assert_eq!(answered["released"][0]["id"], q.as_str(), "{answered}");
    let rules = run(&["rules", "--json"]);
    assert_eq!(rules[0]["id"], g.as_str(), "{rules}");
    run(&["check", "127.0.0.1", "--json"]);
    let revoked = run(&["revoke", &g, "--json"]);
    assert_eq!(revoked["grant"], g.as_str(), "{revoked}");
    assert!(revoked["revoked"].is_i64(), "when, in epoch ms: {revoked}");
    let denied = run(&["deny", "127.0.0.2", "--for", "1h", "--json"]);
    let g2 = denied["grants"][0].as_str().unwrap().to_owned();
    let hash = format!("#{}", g2.trim_start_matches('g'));
    run(&["revoke", &hash, "--json"]);
    // The bare number is a grant id too (here one revoked already: refused by the daemon, not
    // by the argument parser).
    let plain_form = t.sg(&["revoke", g2.trim_start_matches('g')]);
    let said = String::from_utf8_lossy(&plain_form.stderr);
    assert!(!plain_form.status.success() && said.contains("no active grant"), "{said}");
    let wrong = t.sg(&["revoke", &q]);
    assert!(String::from_utf8_lossy(&wrong.stderr).contains("not a grant id"), "{wrong:?}");
    run(&["rules", "--all", "--json"]);

    std::fs::write(t.proj.join("done"), "").unwrap();
    let (code, stdout, stderr) = finish(held);
    assert_eq!((code, stdout.as_str()), (0, "200\n"), "{stderr}");
    run(&["ls", "--all", "--json"]);
    run(&["pending", "--json"]);
    run(&["log", "--json"]);
    run(&["tiers", "--json"]);
    run(&["stop", "--json"]);
    let _ = watch.kill();
    let _ = watch.wait();
    while let Ok(l) = events.recv_timeout(Duration::from_millis(200)) {
        let v: Value = serde_json::from_str(&l).unwrap_or_else(|e| panic!("watch: {e}: {l}"));
        outputs.push(("watch --json".into(), v));
    }

    let mut bad = Vec::new();
    let mut seen = Vec::new();
    for (cmd, v) in &outputs {
        let mut b = Vec::new();
        walk(v, "", &mut b, &mut seen);
        bad.extend(b.into_iter().map(|b| format!("{cmd}: {b}")));
    }
    assert!(bad.is_empty(), "ids that are not strings:\n{}", bad.join("\n"));
    // Not vacuous: questions, grants and sandboxes were all seen, in their forms.
    let has = |f: &dyn Fn(&(String, String)) -> bool| seen.iter().any(f);
    assert!(has(&|(_, v)| v == &q), "no question id seen");
    assert!(has(&|(k, v)| k == "grants" && v == &g), "no grant id seen");
    assert!(has(&|(k, v)| k == "grant" && v == &g2), "no revoked grant id seen");
    assert!(has(&|(k, v)| k == "sandbox" && v.starts_with("sg-")), "no sandbox id seen");
    assert!(
        outputs.iter().any(|(c, v)| c == "watch --json" && v["event"] == "answered"),
        "watch saw no answer"
    );
}
