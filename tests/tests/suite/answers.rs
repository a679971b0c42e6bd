//! Answers end to end: what each answer does to the held request and to later ones (deny and
//! allow grants of every scope), the time-out's 403, which channel an answer is recorded under,
//! and what the launcher's terminal and `sandgate watch` show.
//!
//! Every test has its own `Env`, so its own daemon (stopped by `Env`'s drop). Origins are
//! in-process servers on 127.0.0.1.

use std::io::Write as _;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::support::daemon::*;
use sandgate_tests::{origin, skip_unless};
use serde_json::Value;

/// curl printing the response body, then a line `code=NNN` (a 403's body says why).
fn curl_body_sh(url: &str) -> String {
    let words =
        ["curl", "-sS", "--max-time", "20", "--noproxy", "", "-w", "\\ncode=%{http_code}\\n", url];
    words.iter().map(|w| format!("'{}'", w.replace('\'', r"'\''"))).collect::<Vec<_>>().join(" ")
}

/// The responses printed by [`curl_body_sh`] commands, in order: (status, body).
fn responses(stdout: &str) -> Vec<(u16, String)> {
    let mut out = Vec::new();
    let mut body = String::new();
    for l in stdout.lines() {
        match l.strip_prefix("code=") {
            Some(c) => out.push((c.parse().unwrap(), std::mem::take(&mut body))),
            None => {
                body.push_str(l);
                body.push('\n');
            }
        }
    }
    out
}

/// A sandboxed `sh -c` that makes a request, waits for the file `name` in the project, then
/// makes it again.
fn twice(url: &str, name: &str) -> String {
    let c = curl_body_sh(url);
    format!("{c}; while [ ! -e {name} ]; do sleep 0.02; done; {c}")
}

/// `sandgate watch --json` and its lines; killed on drop.
struct WatchJson {
    child: Child,
    events: mpsc::Receiver<String>,
}

impl Drop for WatchJson {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A daemon whose questions wait 30 s, the URL of an origin answering `hello`, and
/// `sandgate watch --json` started before any sandbox.
fn watched() -> (DaemonEnv, String, WatchJson) {
    let t = DaemonEnv::new("[daemon]\nask_timeout = \"30s\"\n");
    let url = format!("http://127.0.0.1:{}/", origin("hello"));
    start_daemon(&t);
    let mut child = t.cmd().args(["watch", "--json"]).stdout(Stdio::piped()).spawn().unwrap();
    let events = lines_of(child.stdout.take().unwrap());
    (t, url, WatchJson { child, events })
}

/// The events seen until `sandbox` ended, parsed; panics if it does not end in time.
fn events_until_end(rx: &mpsc::Receiver<String>, sandbox: &str) -> Vec<Value> {
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let l = rx.recv_timeout(left).unwrap_or_else(|e| panic!("{e}; saw {seen:#?}"));
        let v: Value = serde_json::from_str(&l).unwrap();
        let end = v["event"] == "sandbox_ended" && v["sandbox"] == sandbox;
        seen.push(v);
        if end {
            return seen;
        }
    }
}

/// The id of the sandbox recorded after `first` (`ls --all`).
fn other_sandbox(t: &DaemonEnv, first: &str) -> String {
    let all = t.json(&["ls", "--all", "--json"]);
    let ids: Vec<String> =
        all.as_array().unwrap().iter().map(|s| s["id"].as_str().unwrap().to_owned()).collect();
    ids.into_iter().find(|id| id != first).unwrap_or_else(|| panic!("one sandbox only: {all:#}"))
}

fn asked(events: &[Value]) -> usize {
    events.iter().filter(|e| e["event"] == "asked").count()
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

fn ok(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "{:?}\nstdout {}\nstderr {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_session_deny_refuses_the_held_request_and_later_ones_without_asking() {
    if skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    let (t, url, watch) = watched();
    let events = &watch.events;
    let run = t.spawn_net(&[], &["sh", "-c", &twice(&url, "again")]);
    let q = wait_for_question(&t);
    let sandbox = q["sandbox"].as_str().unwrap().to_owned();

    let said = ok(&t.sg(&["deny", "127.0.0.1"]));
    assert!(said.contains("denied 127.0.0.1 for this session"), "{said}");
    std::fs::write(t.proj.join("again"), "").unwrap();
    let started = Instant::now();
    let (code, stdout, stderr) = finish(run);
    let r = responses(&stdout);
    assert_eq!((code, r.len()), (0, 2), "{stdout}\n{stderr}");
    // The held request: refused by a person, and the body says so.
    assert_eq!(r[0].0, 403, "{stdout}");
    assert!(r[0].1.contains("denied for this session in the CLI by"), "{}", r[0].1);
    assert!(r[0].1.contains("A person denied it"), "{}", r[0].1);
    assert!(r[0].1.contains("Do not retry"), "{}", r[0].1);
    // The later one: refused at once (the question time-out is 30 s), never asked again.
    assert_eq!(r[1].0, 403, "{stdout}");
    assert!(r[1].1.contains("A person denied it"), "{}", r[1].1);
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
    let seen = events_until_end(events, &sandbox);
    assert_eq!(asked(&seen), 1, "{seen:#?}");
    assert!(pending(&t).is_empty());
}

#[test]
fn a_project_deny_refuses_the_held_request_and_a_new_sandbox_without_asking() {
    if skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    for scope in [&["--always"][..], &["--for", "1h"]] {
        let (t, url, watch) = watched();
        let events = &watch.events;
        let run = t.spawn_net(&[], &["sh", "-c", &curl_body_sh(&url)]);
        let q = wait_for_question(&t);
        let first = q["sandbox"].as_str().unwrap().to_owned();
        let mut args = vec!["deny", "127.0.0.1", "--sandbox", &first];
        args.extend(scope);
        ok(&t.sg(&args));
        let (_, stdout, stderr) = finish(run);
        let r = responses(&stdout);
        assert_eq!(r.len(), 1, "{scope:?}: {stdout}\n{stderr}");
        assert_eq!(r[0].0, 403, "{scope:?}");
        assert!(r[0].1.contains("A person denied it"), "{}", r[0].1);
        assert!(r[0].1.contains("in the CLI by"), "{}", r[0].1);
        assert_eq!(asked(&events_until_end(events, &first)), 1);

        // A new sandbox of the same project: refused at once, no question.
        let started = Instant::now();
        let (_, stdout, stderr) = finish(t.spawn_net(&[], &["sh", "-c", &curl_body_sh(&url)]));
        let r = responses(&stdout);
        assert_eq!(r.len(), 1, "{scope:?}: {stdout}\n{stderr}");
        assert_eq!(r[0].0, 403, "{scope:?}: {}", r[0].1);
        assert!(r[0].1.contains("A person denied it"), "{}", r[0].1);
        assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
        let second = other_sandbox(&t, &first);
        let seen = events_until_end(events, &second);
        assert_eq!(asked(&seen), 0, "{scope:?}: {seen:#?}");
        assert!(pending(&t).is_empty());
        let rules = t.json(&["rules", "--json"]);
        assert_eq!(rules.as_array().unwrap().len(), 1, "{rules:#}");
        assert_eq!(rules[0]["effect"], "deny", "{rules:#}");
        assert!(rules[0]["target"]["project"].is_string(), "{rules:#}");
    }
}

#[test]
fn an_allow_for_an_hour_covers_a_new_sandbox_of_the_project_and_says_until_when() {
    if skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    let (t, url, watch) = watched();
    let events = &watch.events;
    let run = t.spawn_net(&[], &["sh", "-c", &curl_body_sh(&url)]);
    let first = wait_for_question(&t)["sandbox"].as_str().unwrap().to_owned();
    let before = now_ms();
    let said = ok(&t.sg(&["allow", "127.0.0.1", "--for", "1h"]));
    assert!(said.contains("allowed 127.0.0.1 for 1h"), "{said}");
    let after = now_ms();
    let (_, stdout, stderr) = finish(run);
    assert_eq!(responses(&stdout), vec![(200, "hello\n".to_owned())], "{stderr}");
    assert_eq!(asked(&events_until_end(events, &first)), 1);

    let rules = t.json(&["rules", "--json"]);
    assert_eq!(rules.as_array().unwrap().len(), 1, "{rules:#}");
    let g = &rules[0];
    assert_eq!(
        (&g["effect"], &g["pattern"], &g["channel"]),
        (&"allow".into(), &"127.0.0.1".into(), &"cli".into())
    );
    assert!(g["target"]["project"].is_string(), "{g:#}");
    let created = g["created"].as_i64().unwrap();
    assert!((before - 1000..=after + 1000).contains(&created), "{g:#}");
    let until = g["scope"]["until"].as_i64().unwrap_or_else(|| panic!("{g:#}"));
    assert!((created + 3_599_000..=created + 3_601_000).contains(&until), "{g:#}");
    let text = ok(&t.sg(&["rules"]));
    assert!(text.contains("allow 127.0.0.1"), "{text}");
    assert!(text.contains("59m") || text.contains("1h"), "expiry in: {text}");
    let given = text.split(", given ").nth(1).unwrap_or_else(|| panic!("no time given: {text}"));
    assert!(given.trim_end().ends_with("s ago"), "given seconds ago: {text}");

    // A new sandbox of the same project passes, without a question.
    let (_, stdout, stderr) = finish(t.spawn_net(&[], &["sh", "-c", &curl_body_sh(&url)]));
    assert_eq!(responses(&stdout), vec![(200, "hello\n".to_owned())], "{stderr}");
    let second = other_sandbox(&t, &first);
    assert_eq!(asked(&events_until_end(events, &second)), 0);
}

#[test]
fn an_unanswered_question_is_a_403_that_says_it_timed_out_and_how_to_ask_again() {
    if skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    let t = DaemonEnv::new("[daemon]\nask_timeout = \"1s\"\n");
    let url = format!("http://127.0.0.1:{}/", origin("hello"));
    let started = Instant::now();
    let (code, stdout, stderr) = finish(t.spawn_net(&[], &["sh", "-c", &curl_body_sh(&url)]));
    let r = responses(&stdout);
    assert_eq!((code, r.len()), (0, 1), "{stdout}\n{stderr}");
    assert_eq!(r[0].0, 403, "{}", r[0].1);
    let body = &r[0].1;
    assert!(body.contains("nobody approved it within 1s (the request timed out)"), "{body}");
    // The port asked (a bare host would grant 443), and no promise that a retry is refused:
    // a retry asks again (issue 17).
    let port = url.trim_end_matches('/').rsplit(':').next().unwrap();
    assert!(body.contains(&format!("`sandgate allow 127.0.0.1:{port}`")), "{body}");
    assert!(!body.contains("refused the same way"), "{body}");
    assert!(body.contains("A retry puts the question to them again"), "{body}");
    assert!(started.elapsed() < Duration::from_secs(15), "{:?}", started.elapsed());
    assert!(pending(&t).is_empty());
    // Without a terminal the command's stderr (what an agent reads) said it was held, for how
    // long, and that nobody answered.
    let port = url.trim_end_matches('/').rsplit(':').next().unwrap();
    assert!(
        stderr.contains(&format!("sandgate: waiting for approval of 127.0.0.1:{port} (1 s)")),
        "{stderr}"
    );
    assert!(stderr.contains("cargo 30 s, pip 15 s"), "{stderr}");
    assert!(stderr.contains(&format!("nobody answered about 127.0.0.1:{port}")), "{stderr}");
}

#[test]
fn a_refused_request_is_said_on_the_commands_stderr_unless_quiet() {
    if skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    let t = DaemonEnv::new("[daemon]\nask_timeout = \"30s\"\n");
    let port = origin("hello");
    let url = format!("http://127.0.0.1:{port}/");
    let deny = format!("--deny=127.0.0.1:{port}");
    let (code, stdout, stderr) = finish(t.spawn_net(&[&deny], &["sh", "-c", &curl_body_sh(&url)]));
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert_eq!(responses(&stdout)[0].0, 403, "{stdout}");
    let line = format!("sandgate: denied 127.0.0.1:{port} (");
    assert!(stderr.contains(&line) && stderr.contains("sandgate check"), "{stderr}");
    // The 403 lists the grants in force with the policy's patterns (issue 32).
    ok(&t.sg(&["allow", "granted.example:443", "--always", "--global"]));
    let (_, stdout, _) = finish(t.spawn_net(&[&deny], &["sh", "-c", &curl_body_sh(&url)]));
    assert!(stdout.contains("Allowed destinations: granted.example:443 (granted)."), "{stdout}");
    let (_, _, stderr) =
        finish(t.spawn_net(&[&deny, "--quiet"], &["sh", "-c", &curl_body_sh(&url)]));
    assert!(!stderr.contains(&line), "{stderr}");
}

/// A sandboxed `sh -c` that writes the start of a line to stderr (`printf c`, as curl writes
/// `c` then `url: (56) …`), makes a request to `url`, waits for the file `go` in the project,
/// then ends its line.
fn half_line_then_request(url: &str) -> String {
    format!(
        "printf c >&2; {} >/dev/null; while [ ! -e go ]; do sleep 0.02; done; \
         echo 'url: (22) the rest of the line' >&2",
        curl_sh(url)
    )
}

/// Issue 32, part 3: the launcher's notices go between the command's lines, never inside one
/// (it was `csandgate: … denied …url: (56)`). The command's line stays open while the refusal's
/// notice comes (it waits for `go`, which the test writes only once the notice is out): the
/// notice waits, then ends the command's line first, and the command's rest follows on a line
/// of its own.
#[test]
fn a_notice_waits_for_the_end_of_the_commands_line() {
    if skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    let t = DaemonEnv::new("");
    let port = origin("hello");
    let url = format!("http://127.0.0.1:{port}/");
    let deny = format!("--deny=127.0.0.1:{port}");
    let mut run = t.spawn_net(&[&deny], &["sh", "-c", &half_line_then_request(&url)]);
    let stderr = lines_of(run.stderr.take().unwrap());
    let notice = format!("sandgate: denied 127.0.0.1:{port} (");
    let line = expect_line(&stderr, Duration::from_secs(20), |l| l.contains(&notice));
    assert!(line.starts_with(&notice), "inside the command's line: {line:?}");
    std::fs::write(t.proj.join("go"), "").unwrap();
    let mut rest = Vec::new();
    while let Ok(l) = stderr.recv_timeout(Duration::from_secs(20)) {
        rest.push(l);
    }
    assert!(run.wait().unwrap().success());
    assert_eq!(
        rest.first().map(String::as_str),
        Some("url: (22) the rest of the line"),
        "{rest:?}"
    );
}

/// The same on the launcher's terminal (`script`), where the terminal is in raw mode while the
/// command runs: the notice's line ends with `\r\n` (a bare `\n` would leave the next line
/// starting under the notice's end), and it starts on a line of its own.
#[test]
fn on_a_raw_terminal_a_notice_ends_with_cr_lf() {
    if skip_unless(can_sandbox() && has_script(), "root, curl, python3 and script (util-linux)") {
        return;
    }
    let t = DaemonEnv::new("");
    let port = origin("hello");
    let url = format!("http://127.0.0.1:{port}/");
    let deny = format!("--deny=127.0.0.1:{port}");
    let mut run = t.on_terminal(&["net", &deny, "--", "sh", "-c", &half_line_then_request(&url)]);
    let _keep_stdin_open = run.stdin.take();
    // The terminal's bytes as they come (`lines()` would hide the `\r`).
    let (tx, chunks) = mpsc::channel::<Vec<u8>>();
    let mut out = run.stdout.take().unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = std::io::Read::read(&mut out, &mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                return;
            }
        }
    });
    let mut screen = Vec::new();
    let notice = format!("sandgate: denied 127.0.0.1:{port} (");
    let explains = format!("`sandgate check 127.0.0.1:{port}` explains)");
    while !String::from_utf8_lossy(&screen).contains(&explains) {
        match chunks.recv_timeout(Duration::from_secs(20)) {
            Ok(c) => screen.extend(c),
            Err(e) => panic!("no notice ({e}): {:?}", String::from_utf8_lossy(&screen)),
        }
    }
    std::fs::write(t.proj.join("go"), "").unwrap();
    while let Ok(c) = chunks.recv_timeout(Duration::from_secs(20)) {
        screen.extend(c);
    }
    assert!(run.wait().unwrap().success());
    let screen = String::from_utf8_lossy(&screen);
    let want = format!("c\r\n{notice}");
    assert!(screen.contains(&want), "not on a line of its own: {screen:?}");
    let want = format!("{explains}\r\nurl: (22) the rest of the line\r\n");
    assert!(screen.contains(&want), "not \\r\\n in raw mode: {screen:?}");
}

#[test]
fn without_ask_timeout_the_daemon_waits_60_s_for_an_answer() {
    if skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    let t = DaemonEnv::new("");
    let url = format!("http://127.0.0.1:{}/", origin("hello"));
    let run = t.spawn_net(&[], &["sh", "-c", &curl_body_sh(&url)]);
    let q = wait_for_question(&t);
    // Instants are epoch milliseconds in every JSON document.
    let secs = |v: &Value| v.as_i64().unwrap() as f64 / 1e3;
    let wait = secs(&q["deadline"]) - secs(&q["first_asked"]);
    assert!((wait - 60.0).abs() < 0.01, "question open for {wait} s: {q:#}");
    ok(&t.sg(&["deny", q["id"].as_str().unwrap(), "--once"]));
    let (_, stdout, _) = finish(run);
    assert_eq!(responses(&stdout)[0].0, 403, "{stdout}");
}

#[test]
fn a_key_pressed_in_watch_is_recorded_as_the_terminal_channel() {
    if skip_unless(can_sandbox() && has_script(), "root, curl, python3 and script (util-linux)") {
        return;
    }
    let (t, url, json) = watched();
    let events = &json.events;
    let mut watch = t.on_terminal(&["watch"]);
    let mut keys = watch.stdin.take().unwrap();
    let screen = lines_of(watch.stdout.take().unwrap());
    expect_line(&screen, Duration::from_secs(10), |l| l.contains("keys answer"));
    let run = t.spawn_net(&[], &["sh", "-c", &curl_body_sh(&url)]);
    expect_line(&screen, Duration::from_secs(20), |l| l.contains("wants 127.0.0.1:"));
    keys.write_all(b"s").unwrap();
    keys.flush().unwrap();
    let (_, stdout, stderr) = finish(run);
    assert_eq!(responses(&stdout), vec![(200, "hello\n".to_owned())], "{stderr}");
    let line = expect_line(&screen, Duration::from_secs(5), |l| {
        l.contains("127.0.0.1:")
            && l.contains("allowed for this session")
            && !l.contains("answering")
    });
    assert!(line.contains("in the terminal by"), "{line}");
    let answered = expect_line(events, Duration::from_secs(5), |l| l.contains(r#""answered""#));
    let answered: Value = serde_json::from_str(&answered).unwrap();
    assert_eq!(answered["by"]["channel"], "terminal", "{answered:#}");
    let rules = t.json(&["rules", "--all", "--json"]);
    assert_eq!(rules.as_array().unwrap().len(), 1, "{rules:#}");
    assert_eq!((&rules[0]["channel"], &rules[0]["scope"]), (&"terminal".into(), &"session".into()));

    // A client may say it relays a terminal key, never that it speaks for Telegram.
    let mut c = std::os::unix::net::UnixStream::connect(t.socket()).unwrap();
    let mut r = std::io::BufReader::new(c.try_clone().unwrap());
    let mut answer = |channel: &str| {
        let line = format!(
            r#"{{"id":1,"op":"answer","target":{{"host":{{"pattern":"x.example"}}}},"answer":{{"allow":{{"for":60}}}},"channel":"{channel}"}}"#
        );
        request(&mut c, &mut r, &line)
    };
    let reply = answer("telegram");
    assert_eq!(reply["ok"], false, "{reply}");
    assert_eq!(reply["error"]["code"], "bad_request", "{reply}");
    assert_eq!(t.json(&["rules", "--all", "--json"]).as_array().unwrap().len(), 1);
    // The same request with a channel it may claim is taken: the channel alone was refused.
    let reply = answer("terminal");
    assert_eq!(reply["ok"], true, "{reply}");
    let rules = t.json(&["rules", "--all", "--json"]);
    assert_eq!(rules.as_array().unwrap().len(), 2, "{rules:#}");

    keys.write_all(b"q").unwrap();
    let _ = keys.flush();
    wait_until("watch to quit on q", Duration::from_secs(5), || {
        watch.try_wait().unwrap().is_some()
    });
}

#[test]
fn conflicting_scope_flags_are_refused_before_anything_is_asked() {
    let t = DaemonEnv::new("");
    let rows: &[&[&str]] = &[
        &["allow", "x.example", "--once", "--always"],
        &["deny", "x.example", "--session", "--for", "1h"],
        &["allow", "x.example", "--once", "--session"],
        &["deny", "x.example", "--for", "1h", "--always"],
    ];
    for args in rows {
        let out = t.sg(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("cannot be used with"), "{args:?}: {err}");
    }
    // Refused by the parser: no daemon was started to hear them.
    assert!(!t.socket().exists());
}

#[test]
fn the_launchers_terminal_shows_the_answer_to_its_question() {
    if skip_unless(can_sandbox() && has_script(), "root, curl, python3 and script (util-linux)") {
        return;
    }
    let t = DaemonEnv::new("[daemon]\nask_timeout = \"30s\"\n");
    let port = origin("hello");
    let url = format!("http://127.0.0.1:{port}/");
    // The command outlives the answer (it waits for `done`), so the sandbox's event stream is
    // still open when the answer is published: no race with the command's end.
    let script = format!("{}; while [ ! -e done ]; do sleep 0.02; done", curl_body_sh(&url));
    let mut run = t.on_terminal(&["net", "--", "sh", "-c", &script]);
    let _keep_stdin_open = run.stdin.take();
    let screen = lines_of(run.stdout.take().unwrap());
    let prompt = expect_line(&screen, Duration::from_secs(60), |l| {
        l.contains(&format!("wants 127.0.0.1:{port}"))
    });
    assert!(prompt.contains("sandgate allow 127.0.0.1"), "{prompt}");
    let said = ok(&t.sg(&["allow", "127.0.0.1", "--once"]));
    // On a loaded machine the answer can take a while to come round: wait long, and when it does
    // not come, say what the daemon knew (a silent timeout here once cost a CI run).
    let mut after = Vec::new();
    let answer_text = format!("127.0.0.1:{port} allowed once in the CLI by ");
    let deadline = std::time::Instant::now() + Duration::from_secs(40);
    let (mut answer, mut code) = (None, false);
    while answer.is_none() || !code {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match screen.recv_timeout(left) {
            Ok(l) => {
                if l.contains(&answer_text) {
                    answer = Some(l.clone());
                }
                code |= l.trim() == "code=200";
                after.push(l);
            }
            Err(e) => {
                let pending = t.sg(&["pending", "--json"]);
                let log =
                    std::fs::read_to_string(t.env.root.path().join("run/sandgate/daemon.log"))
                        .unwrap_or_default();
                panic!(
                    "the answer ({answer:?}) or code=200 ({code}) did not reach the terminal \
                     ({e}); `allow` said {said:?}; the screen after the prompt:\n{}\npending: \
                     {}\ndaemon log:\n{log}",
                    after.join("\n"),
                    String::from_utf8_lossy(&pending.stdout),
                );
            }
        }
    }
    let answer = answer.unwrap();
    assert!(answer.trim_end().ends_with(&who_am_i()), "{answer}");
    std::fs::write(t.proj.join("done"), "").unwrap();
    wait_until("the launcher to exit", Duration::from_secs(10), || {
        run.try_wait().unwrap().is_some()
    });
}

fn who_am_i() -> String {
    let out = std::process::Command::new("id").arg("-un").output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn the_launchers_prompt_goes_to_the_terminal_never_into_the_commands_output() {
    if skip_unless(can_sandbox() && has_script(), "root, curl, python3 and script (util-linux)") {
        return;
    }
    let t = DaemonEnv::new("[daemon]\nask_timeout = \"30s\"\n");
    let (p1, p2) = (origin("one"), origin("two"));
    // Build tier: the project is writable. One request with stdout and stderr redirected to
    // files, one piped into a file; two questions, each answered once.
    let script = format!(
        "{} >out.txt 2>err.txt; {} 2>&1 | cat >piped.txt; echo finished",
        curl_body_sh(&format!("http://127.0.0.1:{p1}/")),
        curl_body_sh(&format!("http://127.0.0.1:{p2}/")),
    );
    let mut run = t.on_terminal(&["build", "--", "sh", "-c", &script]);
    let _keep_stdin_open = run.stdin.take();
    let screen = lines_of(run.stdout.take().unwrap());
    let mut shown = Vec::new();
    for port in [p1, p2] {
        shown.push(expect_line(&screen, Duration::from_secs(20), |l| {
            l.contains(&format!("wants 127.0.0.1:{port}"))
        }));
        ok(&t.sg(&["allow", "127.0.0.1", "--once"]));
    }
    expect_line(&screen, Duration::from_secs(20), |l| l.trim() == "finished");
    wait_until("the launcher to exit", Duration::from_secs(10), || {
        run.try_wait().unwrap().is_some()
    });
    assert!(shown.iter().all(|l| l.contains("sandgate: ")), "{shown:?}");
    let read = |name: &str| std::fs::read_to_string(t.proj.join(name)).unwrap();
    let (out, err, piped) = (read("out.txt"), read("err.txt"), read("piped.txt"));
    assert_eq!(out, "one\ncode=200\n");
    assert_eq!(err, "");
    assert_eq!(piped, "two\ncode=200\n");
}

/// A daemon with `config`, started with a stand-in `notify-send` first on its PATH that records
/// its arguments, one per line, in the returned file; and that PATH, for the launchers.
fn with_fake_notify_send(config: &str) -> (DaemonEnv, String, std::path::PathBuf) {
    let t = DaemonEnv::new(config);
    let bin = t.env.root.path().join("fakebin");
    std::fs::create_dir_all(&bin).unwrap();
    let log = t.env.root.path().join("notified");
    let script = bin.join("notify-send");
    std::fs::write(&script, format!("#!/bin/sh\nprintf '%s\\n' \"$@\" >> '{}'\n", log.display()))
        .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    // The daemon inherits the PATH of the command that starts it.
    ok(&t.cmd().env("PATH", &path).arg("rules").output().unwrap());
    (t, path, log)
}

/// A sandboxed curl of `url` held on its question; the question.
fn held_with_path(t: &DaemonEnv, path: &str, url: &str) -> (Child, Value) {
    let run = t
        .cmd()
        .env("PATH", path)
        .args(["net", "--", "sh", "-c", &curl_body_sh(url)])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    (run, wait_for_question(t))
}

#[test]
fn a_question_raises_a_desktop_notification_when_configured() {
    if skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    let url = format!("http://127.0.0.1:{}/", origin("hello"));
    let config = "[daemon]\nask_timeout = \"30s\"\n";
    let (t, path, log) = with_fake_notify_send(&format!("{config}desktop_notifications = true\n"));
    let (run, q) = held_with_path(&t, &path, &url);
    let sandbox = q["sandbox"].as_str().unwrap().to_owned();
    let mut said = String::new();
    wait_until("the notification", Duration::from_secs(10), || {
        said = std::fs::read_to_string(&log).unwrap_or_default();
        said.contains("sandgate allow 127.0.0.1")
    });
    assert!(said.contains("sandgate: approval needed"), "{said}");
    assert!(said.contains("wants 127.0.0.1:"), "{said}");
    // The sandbox's own text comes after the host and the answer, quoted.
    assert!(said.contains(&format!("— sandbox \"{sandbox}\"")), "{said}");
    ok(&t.sg(&["allow", q["id"].as_str().unwrap(), "--once"]));
    let (_, stdout, stderr) = finish(run);
    assert_eq!(responses(&stdout)[0].0, 200, "{stdout}\n{stderr}");
    // One question, one notification.
    assert_eq!(said.matches("approval needed").count(), 1, "{said}");

    // Off by default: the same question without the setting notifies nobody.
    let (t, path, log) = with_fake_notify_send(config);
    let (run, q) = held_with_path(&t, &path, &url);
    ok(&t.sg(&["deny", q["id"].as_str().unwrap(), "--once"]));
    let (_, stdout, _) = finish(run);
    assert_eq!(responses(&stdout)[0].0, 403, "{stdout}");
    assert!(!log.exists(), "notified without desktop_notifications");
}

/// What a person reads (issue 14.7): a request path full of C1 controls (CSI is U+009B), bidi
/// overrides and isolates, zero-width and line-separator characters reaches `pending`, `status`
/// and `watch` only through the sanitiser — every such character shows as `?`.
#[test]
fn pending_status_and_watch_show_no_raw_control_or_bidi_from_a_sandbox() {
    if skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    let t = DaemonEnv::new("[daemon]\nask_timeout = \"30s\"\n");
    let port = origin("hello");
    start_daemon(&t);
    let mut watch = t.cmd().args(["watch"]).stdout(Stdio::piped()).spawn().unwrap();
    let screen = lines_of(watch.stdout.take().unwrap());
    // A raw request: curl would percent-encode the path, an attacker does not.
    let py = format!(
        r#"import base64, os, socket, urllib.parse
p = urllib.parse.urlparse(os.environ["HTTP_PROXY"])
s = socket.create_connection((p.hostname, p.port))
path = "/a\u009b31m\u202egpj.exe\u2066x\u200b\u2028y\u009d0;t\u009c".encode()
auth = b""
if p.password:
    tok = base64.b64encode(f"{{p.username}}:{{p.password}}".encode())
    auth = b"Proxy-Authorization: Basic " + tok + b"\r\n"
s.sendall(b"GET http://127.0.0.1:{port}" + path + b" HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n" + auth + b"\r\n")
print(s.recv(200))
"#
    );
    let run = t.spawn_net(&[], &["python3", "-c", &py]);
    let q = wait_for_question(&t);
    let raw_path = q["path"].as_str().unwrap_or_default().to_owned();
    assert!(raw_path.contains('\u{9b}') && raw_path.contains('\u{202e}'), "{q:#}");
    let clean = |what: &str, text: &str| {
        let hostile = |c: char| {
            (c.is_control() && c != '\n')
                || matches!(c, '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
        };
        let bad: Vec<char> = text.chars().filter(|&c| hostile(c)).collect();
        assert!(bad.is_empty(), "{what} shows raw {bad:?}:\n{text}");
    };
    let pending = ok(&t.sg(&["pending"]));
    clean("pending", &pending);
    assert!(pending.contains("GET /a?31m?gpj.exe?x??y?0;t?"), "{pending}");
    clean("status", &ok(&t.sg(&["status"])));
    let line = expect_line(&screen, Duration::from_secs(20), |l| l.contains("wants 127.0.0.1:"));
    clean("watch", &line);
    assert!(line.contains("?31m?gpj.exe"), "{line}");
    ok(&t.sg(&["deny", "127.0.0.1"]));
    let _ = finish(run);
    let _ = watch.kill();
    let _ = watch.wait();
}
