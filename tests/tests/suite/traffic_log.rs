//! `sandgate log`: a sandbox's allowed and refused requests and its direct connection, each one
//! line, in text and JSON, with the bytes the origin sent; filters and bad input.

use crate::support::daemon::*;
use crate::support::sandbox::{HOST4, TestHost};
use sandgate_tests::{origin, skip_unless};
use serde_json::Value;

/// What `sandgate_tests::origin(BODY)` sends for one request.
fn response_len(body: &str) -> u64 {
    format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len())
        .len() as u64
}

#[test]
fn three_allowed_two_denied_and_one_direct_connection_are_six_lines() {
    if skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    let Some(_host) = TestHost::start() else { return };
    let t = DaemonEnv::new("[daemon]\nask_timeout = \"30s\"\n");
    let body = "logged body\n";
    let ok = origin(body);
    let no = origin("never\n");
    // CONNECT tunnels (-p): the byte counts are exactly what the origin sent.
    let get = |port: u16| {
        format!("curl -sS -p --noproxy '' -o /dev/null http://127.0.0.1:{port}/ || true")
    };
    // The direct attempt is a datagram: refused and reported by the sandbox's firewall (a TCP
    // connection would be captured into the proxy and be one of its decisions).
    let script = format!(
        "{a}; {a}; {a}; {d}; {d}; python3 -c \"import socket; s = socket.socket(socket.AF_INET, \
         socket.SOCK_DGRAM)\ntry: s.sendto(b'x', ('{HOST4}', 8080))\nexcept OSError: pass\"",
        a = get(ok),
        d = get(no)
    );
    let allow = format!("--allow=127.0.0.1:{ok}");
    let deny = format!("--deny=127.0.0.1:{no}");
    let (code, stdout, stderr) =
        finish(t.spawn_net(&[&allow, &deny, "--report-blocked"], &["sh", "-c", &script]));
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let sandbox = t.json(&["ls", "--all", "--json"])[0]["id"].as_str().unwrap().to_owned();

    let lines = t.json_lines(&["log", "--json"]);
    let of = |d: &str| lines.iter().filter(|l| l["decision"] == d).collect::<Vec<_>>();
    assert_eq!(lines.len(), 6, "{lines:#?}");
    assert_eq!((of("allow").len(), of("deny").len(), of("blocked").len()), (3, 2, 1));
    for l in of("allow") {
        assert_eq!(l["bytes_down"], response_len(body), "{l}");
        assert_eq!((l["host"].as_str(), l["port"].as_u64()), (Some("127.0.0.1"), Some(ok.into())));
        assert_eq!(l["sandbox"], sandbox.as_str());
        assert_eq!((&l["command"][0], &l["command"][1]), (&"sh".into(), &"-c".into()), "{l}");
        // Plain HTTP in a CONNECT tunnel: its one request is read (its `Host` pinned), so the
        // path is known.
        assert_eq!(l["path"], "/", "{l}");
    }
    assert!(of("deny").iter().all(|l| l["port"] == no && l["bytes_down"] == 0), "{lines:#?}");
    assert_eq!(of("blocked")[0]["host"], HOST4);
    assert!(lines.windows(2).all(|w| w[0]["time"].as_i64() <= w[1]["time"].as_i64()));

    // The same six as text, one line each.
    let text = String::from_utf8_lossy(&t.sg(&["log"]).stdout).into_owned();
    assert_eq!(text.lines().count(), 6, "{text}");
    assert_eq!(text.lines().filter(|l| l.contains(" allow ")).count(), 3, "{text}");
    assert!(text.contains(&format!("{HOST4}:8080 x1")), "{text}");
    // The process that opened a connection (issue 33.4) comes between the rule and the command.
    let last = |l: &str| l.contains("] \"sh -c curl") || l.contains(") \"sh -c curl");
    assert!(text.lines().all(last), "command last, quoted: {text}");
    // A connection of a few milliseconds may end before its lookup has run (the lookup never
    // holds a connection up; `suite::attribution` pins when it is waited for): some line names
    // `curl`, and no line names anything else.
    let named = text.lines().filter(|l| l.contains("] by `")).collect::<Vec<_>>();
    assert!(!named.is_empty(), "{text}");
    assert!(named.iter().all(|l| l.contains("] by `curl` (pid ")), "{text}");

    // Filters.
    assert_eq!(t.json_lines(&["log", "--json", "--decision", "deny"]).len(), 2);
    assert_eq!(t.json_lines(&["log", "--json", "--host", "127.0.0.0/8"]).len(), 5);
    assert_eq!(t.json_lines(&["log", "--json", "--sandbox", &sandbox, "--since", "10m"]).len(), 6);
    let summary = t.json_lines(&["log", "--summary", "--json"]);
    let local = summary.iter().find(|r| r["host"] == "127.0.0.1").unwrap();
    assert_eq!((local["connections"].as_u64(), local["allowed"].as_u64()), (Some(5), Some(3)));
    assert_eq!(local["bytes_down"], 3 * response_len(body));
}

#[test]
fn bad_input_gets_a_clear_error() {
    let t = DaemonEnv::new("");
    for (args, want) in [
        (&["log", "--since", "yesterday"][..], "--since \"yesterday\""),
        (&["log", "--sandbox", "sg-nope"][..], "no sandbox \"sg-nope\""),
        (&["log", "--host", "http://x"][..], "not a URL"),
        (&["log", "--follow"][..], "none is running"),
    ] {
        let out = t.sg(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

#[test]
fn follow_prints_a_connection_when_it_closes() {
    use std::io::BufRead as _;
    if skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    let t = DaemonEnv::new("");
    let port = origin("followed\n");
    let allow = format!("--allow=127.0.0.1:{port}");
    // A first launch starts the daemon; --follow then tails it.
    let (code, _, stderr) = finish(t.spawn_net(&[&allow], &["true"]));
    assert_eq!(code, 0, "{stderr}");
    let mut follow = t
        .cmd()
        .args(["log", "--follow", "--json", "--limit", "0"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = follow.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    // The live part starts after the stored lines; until it has subscribed a connection can be
    // missed, so launch again until one is seen (each launch is one allowed request).
    let url = format!("http://127.0.0.1:{port}/followed?x=1");
    let cmd = curl(&url);
    let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
    let mut line = None;
    for _ in 0..10 {
        let (code, stdout, stderr) = finish(t.spawn_net(&[&allow], &cmd));
        assert_eq!((code, stdout.as_str()), (0, "200\n"), "{stderr}");
        if let Ok(l) = rx.recv_timeout(std::time::Duration::from_secs(3)) {
            line = Some(l);
            break;
        }
    }
    let line = line.expect("a followed line");
    let _ = follow.kill();
    let _ = follow.wait();
    let v: Value = serde_json::from_str(&line).unwrap();
    assert_eq!((v["decision"].as_str(), v["port"].as_u64()), (Some("allow"), Some(port.into())));
    // A plain-HTTP request: its path is in the line, and the sandbox's command.
    assert_eq!(v["path"], "/followed?x=1", "{v}");
    assert_eq!(v["command"][0], "curl", "{v}");
}

#[test]
fn learn_proposes_a_wildcard_for_subdomains_and_writes_it() {
    if skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    let mut t = DaemonEnv::new("");
    // `check` below resolves the names it would let through; not the test's to resolve.
    t.vars.push(("SANDGATE_DNS_SERVER".into(), Some(crate::support::dns::no_dns())));
    let fetch = |h: &str| format!("curl -s -o /dev/null --max-time 5 http://{h}/ || true");
    let script =
        ["a.learn.test", "b.learn.test", "c.learn.test", "other.example"].map(fetch).join("; ");
    let out = t.cmd().args(["learn", "--write", "--", "sh", "-c", &script]).output().unwrap();
    let (stdout, stderr) =
        (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout
            .contains("  \"*.learn.test\",  # a.learn.test:80, b.learn.test:80, c.learn.test:80\n"),
        "{stdout}"
    );
    assert!(stdout.contains("  \"other.example\",  # other.example:80\n"), "{stdout}");
    assert!(stdout.contains("# added 2 to "), "{stdout}");
    // Written into this directory's file: it loads, and now decides.
    for args in [&["config", "check"][..], &["config", "list-paths"]] {
        let out = t.sg(args);
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    for host in ["z.learn.test", "other.example"] {
        assert_eq!(t.sg(&["check", host, "--tier", "net"]).status.code(), Some(0), "{host}");
    }
    assert_eq!(t.sg(&["check", "learn.test", "--tier", "net"]).status.code(), Some(3));
    // Nothing was asked of a person and nothing got through (deny-and-record).
    assert!(t.json(&["ls", "--all", "--json"]).as_array().is_none_or(|a| a.is_empty()));
}

/// Issue 32.4: `learn` needed a re-run of the command. `--from-log` proposes from what the
/// project's sandboxes already did: hosts whose questions timed out and hosts let through by a
/// flag (or an answer or a grant), not a host a deny rule refused; `--since` and `--sandbox`
/// narrow it; once written, nothing is left to propose.
#[test]
fn learn_from_the_log_proposes_what_was_wanted_without_a_rerun() {
    if skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    let t = DaemonEnv::new("[daemon]\nask_timeout = \"1s\"\n");
    let ok = origin("allowed by a flag\n");
    // Through the proxy even for loopback (NO_PROXY would send that one direct).
    let fetch =
        |h: &str| format!("curl -s --noproxy '' -o /dev/null --max-time 10 http://{h}/ || true");
    let script = format!(
        "{} & {} & {} & {}; wait",
        fetch("a.fromlog.test"),
        fetch("b.fromlog.test"),
        fetch("ruled.example"),
        fetch(&format!("127.0.0.1:{ok}"))
    );
    let allow = format!("--allow=127.0.0.1:{ok}");
    let (code, stdout, stderr) =
        finish(t.spawn_net(&[&allow, "--deny=ruled.example"], &["sh", "-c", &script]));
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let learn = |args: &[&str]| {
        let out = t.cmd().args(["learn", "--from-log"]).args(args).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        (out.status.code(), text, String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (code, text, stderr) = learn(&[]);
    assert_eq!(code, Some(0), "{text}\n{stderr}");
    let proj = t.proj.canonicalize().unwrap();
    assert!(
        text.starts_with(&format!(
            "# proposed by `sandgate learn --from-log` from the log of 1 sandbox(es) of {}\n",
            proj.display()
        )),
        "{text}"
    );
    assert!(
        text.contains("  \"*.fromlog.test\",  # a.fromlog.test:80, b.fromlog.test:80\n"),
        "{text}"
    );
    assert!(text.contains(&format!("  \"127.0.0.1:{ok}\",  # 127.0.0.1:{ok}\n")), "{text}");
    assert!(!text.contains("ruled.example"), "a deny rule refused it: {text}");
    // --since: nothing recorded in the last 0 s; --sandbox: the one sandbox gives the same.
    let (_, text, _) = learn(&["--since", "0s"]);
    assert!(text.starts_with("# nothing in the log of 1 sandbox(es)"), "{text}");
    let id = t.json(&["ls", "--all", "--json"])[0]["id"].as_str().unwrap().to_owned();
    let (_, text, _) = learn(&["--sandbox", &id]);
    assert!(text.contains("\"*.fromlog.test\""), "{text}");
    // Another project's log is not this one's.
    let other = t.env.root.path().join("elsewhere");
    std::fs::create_dir_all(&other).unwrap();
    let out = t.cmd().current_dir(&other).args(["learn", "--from-log"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("# nothing in the log of 0 sandbox(es)"), "{text}");
    // Bad input.
    for (args, want) in [
        (&["--since", "yesterday"][..], "--since \"yesterday\""),
        (&["--sandbox", "sg-nope"][..], "no sandbox \"sg-nope\""),
        (&["--", "true"][..], "cannot be used with"),
    ] {
        let (code, _, stderr) = learn(args);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
    }
    // Written into the project's file, it decides; the log then has nothing more to propose.
    let (code, text, stderr) = learn(&["--write"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(text.contains("# added 2 to "), "{text}");
    assert_eq!(t.sg(&["check", "c.fromlog.test", "--tier", "net"]).status.code(), Some(0));
    let (_, text, _) = learn(&[]);
    assert!(text.starts_with("# nothing in the log of 1 sandbox(es)"), "{text}");
}

/// `flush` answers only once every event the daemon took before it is in the store: 2,000 hook
/// events sent back to back (queued for the batched writer), then `flush`, then the store is read
/// at once. (With `list` in its place, the request the log used to send, the store held 1,784 of
/// the 2,000 in one of three runs: the writer usually, not always, keeps up.)
#[test]
fn flush_commits_every_event_taken_before_it() {
    use std::io::{BufRead as _, BufReader, Write as _};
    const N: usize = 2000;
    let t = DaemonEnv::new("");
    start_daemon(&t);
    let mut stream = std::os::unix::net::UnixStream::connect(t.socket()).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let hook = r#"{"op":"hook_decision","agent":"claude","tool":"Bash","decision":"none","reason":"flush test"}"#;
    let mut lines = format!("{hook}\n").repeat(N);
    lines.push_str(&format!("{{\"id\":{N},\"op\":\"flush\"}}\n"));
    stream.write_all(lines.as_bytes()).unwrap();
    let mut last = String::new();
    for _ in 0..=N {
        last.clear();
        reader.read_line(&mut last).unwrap();
    }
    let reply: Value = serde_json::from_str(&last).unwrap();
    assert_eq!(reply["id"], N, "{reply}");
    assert_eq!(reply["ok"], true, "{reply}");
    let store = sandgate_store::Store::open(t.store_path()).unwrap();
    let stored = store
        .recent_events(&sandgate_store::EventQuery {
            kind: Some(sandgate_store::EventKind::Decision),
            limit: 10 * N as u32,
            ..Default::default()
        })
        .unwrap()
        .into_iter()
        .filter(|e| e.event.details["reason"] == "flush test")
        .count();
    assert_eq!(stored, N);
}

/// `sandgate watch`'s traffic tail: off by default (a connection closes, nothing is printed
/// before its sandbox's end), `t` turns it on (the next connection is printed as `sandgate log`
/// prints it, with its bytes), `t` again turns it off.
#[test]
fn the_t_key_in_watch_tails_the_traffic() {
    use std::io::Write as _;
    use std::time::Duration;
    if skip_unless(
        can_sandbox() && sandgate_tests::has_script(),
        "root, curl, python3 and script (util-linux)",
    ) {
        return;
    }
    let t = DaemonEnv::new("");
    let port = origin("tailed\n");
    let allow = format!("--allow=127.0.0.1:{port}");
    let url = format!("http://127.0.0.1:{port}/");
    let cmd = curl(&url);
    let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
    start_daemon(&t);
    let mut watch = t.on_terminal(&["watch"]);
    let mut keys = watch.stdin.take().unwrap();
    let screen = lines_of(watch.stdout.take().unwrap());
    expect_line(&screen, Duration::from_secs(10), |l| l.contains("[t]raffic"));
    let target = format!("127.0.0.1:{port}");
    let run = |want_traffic: bool| {
        let (code, stdout, stderr) = finish(t.spawn_net(&[&allow], &cmd));
        assert_eq!((code, stdout.as_str()), (0, "200\n"), "{stderr}");
        // The request event is published when the connection closes, before the sandbox ends.
        let mut seen = Vec::new();
        loop {
            let l = screen.recv_timeout(Duration::from_secs(20)).unwrap_or_else(|e| {
                panic!("no end of the sandbox ({e}); saw:\n{}", seen.join("\n"))
            });
            if l.contains(" ended (exit") {
                break;
            }
            seen.push(l);
        }
        let tail: Vec<_> = seen.iter().filter(|l| l.contains("sandgate: traffic")).collect();
        if want_traffic {
            assert_eq!(tail.len(), 1, "{seen:#?}");
            assert!(tail[0].contains(" allow ") && tail[0].contains(&target), "{}", tail[0]);
            assert!(tail[0].contains(" ↑") && tail[0].contains(" ↓"), "bytes: {}", tail[0]);
        } else {
            assert!(tail.is_empty(), "{seen:#?}");
        }
    };
    run(false);
    let mut press = |k: &[u8], said: &str| {
        keys.write_all(k).unwrap();
        keys.flush().unwrap();
        expect_line(&screen, Duration::from_secs(10), |l| l.contains(said));
    };
    press(b"t", "traffic tail on");
    run(true);
    press(b"t", "traffic tail off");
    run(false);
    let _ = watch.kill();
    let _ = watch.wait();
}

/// `[daemon] event_retention`: the daemon prunes older traffic when it starts (and hourly), from
/// the lines and from the summary alike.
#[test]
fn retention_prunes_old_traffic_from_the_log_and_the_summary() {
    use sandgate_store::{EventKind, NewEvent, Store, Timestamp};
    let t = DaemonEnv::new("[daemon]\nevent_retention = \"1d\"\n");
    let store = Store::open(t.store_path()).unwrap();
    let now = Timestamp::now().as_millis();
    let line = |age_ms: i64, host: &str| NewEvent {
        time: Timestamp(now - age_ms),
        sandbox: Some("sg-old".into()),
        kind: EventKind::Decision,
        details: serde_json::json!({ "event": "request", "sandbox": "sg-old", "method": "CONNECT",
            "host": host, "port": 443, "decision": "allow", "rule": "allow: old.example",
            "bytes_up": 10, "bytes_down": 20, "ms": 1.0 }),
    };
    let day = 86_400_000;
    store
        .append_events(&[
            line(3 * day, "gone.example"),
            line(day + 60_000, "gone.example"),
            line(day - 3_600_000, "kept.example"),
            line(60_000, "kept.example"),
        ])
        .unwrap();
    let hosts = |args: &[&str]| -> Vec<String> {
        t.json_lines(args).iter().map(|l| l["host"].as_str().unwrap().to_owned()).collect()
    };
    assert_eq!(hosts(&["log", "--json"]).len(), 4, "before the daemon ran");
    drop(store);
    start_daemon(&t);
    assert_eq!(hosts(&["log", "--json"]), ["kept.example", "kept.example"]);
    let summary = t.json_lines(&["log", "--summary", "--json"]);
    assert_eq!(summary.len(), 1, "{summary:#?}");
    assert_eq!(
        (summary[0]["host"].as_str(), summary[0]["connections"].as_u64()),
        (Some("kept.example"), Some(2))
    );
    assert_eq!(summary[0]["bytes_down"], 40);
}

/// `--decision` and `--host` choose among every stored line, not among the newest `--limit`: one
/// denial older than 2,500 allowed connections (and hook decisions, which are not traffic) is
/// still found, across the store's pages.
#[test]
fn filters_apply_before_the_line_limit() {
    use sandgate_store::{EventKind, NewEvent, Store, Timestamp};
    let t = DaemonEnv::new("");
    let store = Store::open(t.store_path()).unwrap();
    let now = Timestamp::now().as_millis();
    let line = |i: i64, host: &str, decision: &str| NewEvent {
        time: Timestamp(now - 100_000 + i),
        sandbox: Some("sg-many".into()),
        kind: EventKind::Decision,
        details: serde_json::json!({ "event": "request", "sandbox": "sg-many", "method": "CONNECT",
            "host": host, "port": 443, "decision": decision, "rule": "r", "bytes_up": 1,
            "bytes_down": 2, "ms": 1.0 }),
    };
    let mut evs = vec![line(0, "old.example", "deny")];
    for i in 1..=2500 {
        evs.push(line(i, "new.example", "allow"));
        if i % 100 == 0 {
            evs.push(NewEvent {
                details: serde_json::json!({ "event": "hook", "agent": "claude", "tool": null,
                                             "decision": "none", "reason": "x" }),
                ..line(i, "", "")
            });
        }
    }
    store.append_events(&evs).unwrap();
    drop(store);
    let denied = t.json_lines(&["log", "--json", "--decision", "deny"]);
    assert_eq!(denied.len(), 1, "{denied:#?}");
    assert_eq!(denied[0]["host"], "old.example");
    assert_eq!(t.json_lines(&["log", "--json", "--host", "old.example"]).len(), 1);
    let newest = t.json_lines(&["log", "--json", "--limit", "3"]);
    let times: Vec<i64> = newest.iter().map(|l| l["time"].as_i64().unwrap()).collect();
    assert_eq!(times, [now - 100_000 + 2498, now - 100_000 + 2499, now - 100_000 + 2500]);
    assert_eq!(t.json_lines(&["log", "--json"]).len(), 1000, "the default limit");
    assert!(t.json_lines(&["log", "--json", "--limit", "0"]).is_empty());
}

/// An origin on 127.0.0.1 that reads each request whole (head and `Content-Length` body) and
/// keeps the bodies it received; answers 200. Returns its port and the bodies.
fn upload_origin() -> (u16, std::sync::Arc<std::sync::Mutex<Vec<Vec<u8>>>>) {
    use std::io::{BufRead as _, BufReader, Read as _, Write as _};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let bodies = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = bodies.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let kept = kept.clone();
            std::thread::spawn(move || {
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut len = 0usize;
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let lower = line.to_ascii_lowercase();
                    if let Some(v) = lower.strip_prefix("content-length:") {
                        len = v.trim().parse().unwrap_or(0);
                    }
                    if line == "\r\n" {
                        break;
                    }
                }
                let mut body = vec![0u8; len];
                if r.read_exact(&mut body).is_err() {
                    return;
                }
                kept.lock().unwrap().push(body);
                let _ = s.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n",
                );
            });
        }
    });
    (port, bodies)
}

/// The red team's finding, closed: a sandbox looks up 1,100 made-up names (each under a
/// registrable domain of its own, so each is a refusal event of its own), which uses up its
/// burst of 1,000 stored traffic events, then POSTs data to an allowed origin and makes 20 more
/// requests there. The POST reaches the origin, and `sandgate log` shows it (its path and
/// bytes), the 20 others counted into one line, and a `(not stored)` line for the refusals
/// past the cap, in text, `--json` and `--summary`; the refusals stored and not stored add up to
/// 1,100. `events_per_minute = 1` so that no token comes back while it runs (the red team's
/// POST got through at the default rate only because none had yet).
///
/// Control: before the fix (the cap dropped every event past the burst, allowed or not, and
/// stored its count as a `sandbox` event), this test fails at "the POST is in the log", after
/// "the flood went past the cap" passed (checked by hand once against that build).
#[test]
fn a_flood_of_refused_names_does_not_hide_a_later_allowed_post_from_the_log() {
    if skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    const NAMES: u64 = 1100;
    const MORE: u64 = 20;
    let t = DaemonEnv::new("[daemon]\nevents_per_minute = 1\n");
    let (port, bodies) = upload_origin();
    let flood = format!(
        r#"
import socket, struct, hashlib
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(10)
s.connect(('127.0.0.1', 53))
nx = 0
for i in range({NAMES}):
    name = '%s.d%d.sgtest' % (hashlib.sha256(str(i).encode()).hexdigest()[:16], i)
    q = struct.pack('>HHHHHH', i & 0xffff, 0x0100, 1, 0, 0, 0)
    q += b''.join(bytes([len(l)]) + l.encode() for l in name.split('.')) + b'\0'
    s.send(q + struct.pack('>HH', 1, 1))
    nx += (s.recv(2048)[3] & 15) == 3
print('nxdomain', nx)
"#
    );
    let url = format!("http://127.0.0.1:{port}");
    let secret = "secret=".to_owned() + &"4b1d".repeat(64);
    let script = format!(
        "python3 -c \"$FLOOD\" && \
         curl -sS --max-time 20 --noproxy '' -o /dev/null -w 'post %{{http_code}}\\n' \
           --data-binary '{secret}' {url}/upload && \
         for i in $(seq {MORE}); do \
           curl -sS --max-time 20 --noproxy '' -o /dev/null {url}/more || exit 1; done"
    );
    let allow = format!("--allow=127.0.0.1:{port}");
    let mut child = t.cmd();
    // Denied, so that every made-up name is a refusal (names no rule mentions get addresses).
    child
        .env("FLOOD", &flood)
        .args(["net", &allow, "--deny=*.sgtest", "--", "sh", "-c", &script])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let (code, stdout, stderr) = finish(child.spawn().unwrap());
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains(&format!("nxdomain {NAMES}\npost 200\n")), "{stdout}\n{stderr}");
    // The data reached the allowed origin: what the log must not hide.
    assert!(bodies.lock().unwrap().iter().any(|b| b == secret.as_bytes()), "not received");

    let lines = t.json_lines(&["log", "--json", "--limit", "5000"]);
    let dns: Vec<&Value> = lines.iter().filter(|l| l["method"] == "DNS").collect();
    let stored_refusals: u64 = dns.iter().map(|l| l["count"].as_u64().unwrap()).sum();
    // The flood went past the cap: some refusals were not stored (as before the fix).
    assert!(stored_refusals < NAMES, "{stored_refusals} of {NAMES} lookups stored: not capped");
    let post: Vec<&Value> =
        lines.iter().filter(|l| l["decision"] == "allow" && l["method"] == "POST").collect();
    let tail: Vec<String> = lines[lines.len().saturating_sub(5)..]
        .iter()
        .map(|l| format!("{} {} {} x{}", l["decision"], l["method"], l["host"], l["count"]))
        .collect();
    assert_eq!(post.len(), 1, "the POST is in the log; its last lines: {tail:#?}");
    let post = post[0];
    assert_eq!(
        (post["host"].as_str(), post["port"].as_u64()),
        (Some("127.0.0.1"), Some(port.into()))
    );
    assert_eq!(post["path"], "/upload", "{post}");
    assert!(post["bytes_up"].as_u64().unwrap() >= secret.len() as u64, "{post}");
    // Every allowed request is counted: the POST by itself, the 20 others in one line.
    let allowed: Vec<&Value> = lines.iter().filter(|l| l["decision"] == "allow").collect();
    assert_eq!(allowed.iter().map(|l| l["count"].as_u64().unwrap()).sum::<u64>(), 1 + MORE);
    assert_eq!(allowed.len(), 2, "one line for the 20: {allowed:#?}");
    // The refusals not stored are a line of the log, and the counts add up.
    let capped: Vec<&Value> = lines.iter().filter(|l| l["host"] == "(not stored)").collect();
    assert_eq!(capped.len(), 1, "{capped:#?}");
    assert_eq!(capped[0]["decision"], "deny", "{}", capped[0]);
    assert_eq!(stored_refusals + capped[0]["count"].as_u64().unwrap(), NAMES, "{}", capped[0]);

    // The same as text.
    let text = String::from_utf8_lossy(&t.sg(&["log", "--limit", "5000"]).stdout).into_owned();
    let target = format!("127.0.0.1:{port}");
    assert!(
        text.lines()
            .any(|l| l.contains(" allow ") && l.contains(&format!("POST    {target}/upload"))),
        "{}",
        text.lines().rev().take(5).collect::<Vec<_>>().join("\n")
    );
    assert!(
        text.lines().any(|l| l.contains(" allow ") && l.contains(&format!("{target} x{MORE} ↑"))),
        "{}",
        text.lines().rev().take(5).collect::<Vec<_>>().join("\n")
    );
    assert!(text.lines().any(|l| l.contains(" deny ") && l.contains("(not stored) x")), "{text}");
    // Filters keep them: by decision, and by host (the refusals not stored may be of any host).
    let only_allow = t.json_lines(&["log", "--json", "--decision", "allow"]);
    assert_eq!(only_allow.len(), 2, "{only_allow:#?}");
    let by_host = t.json_lines(&["log", "--json", "--host", "127.0.0.1"]);
    assert_eq!(by_host.len(), 3, "{by_host:#?}");

    // And in the summary.
    let summary = t.json_lines(&["log", "--summary", "--json"]);
    let row = |h: &str| {
        summary.iter().find(|r| r["host"] == h).unwrap_or_else(|| panic!("{h}: {summary:#?}"))
    };
    assert_eq!(row("127.0.0.1")["allowed"], 1 + MORE);
    assert!(row("127.0.0.1")["bytes_up"].as_u64().unwrap() >= secret.len() as u64);
    assert_eq!(row("(not stored)")["refused"], capped[0]["count"]);
}
