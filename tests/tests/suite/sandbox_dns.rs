//! The DNS stub inside a `net` sandbox, against its own daemon whose host-side resolver is a
//! counting DNS server of this test (`SANDGATE_DNS_SERVER`): `getent hosts` and Python's
//! `getaddrinfo` get an address of the sandbox's own (198.18.0.0/15) for every name no deny rule
//! refuses, NXDOMAIN for denied names, DNS over TCP works, and the counting server proves that no
//! name is asked about on the host until a connection to it was decided.

use crate::support::daemon::*;
use crate::support::dns::counting_dns;
use sandgate_tests::skip_unless;

/// A DNS query over TCP to the stub, in Python (no dig here): prints rcode, answer count, and
/// the first answer's address.
const TCP_QUERY: &str = r#"
import socket, struct
name = b'allowed.sgtest'
q = struct.pack('>HHHHHH', 0x4242, 0x0100, 1, 0, 0, 0)
q += b''.join(bytes([len(l)]) + l for l in name.split(b'.')) + b'\0' + struct.pack('>HH', 1, 1)
s = socket.create_connection(('127.0.0.1', 53), timeout=10)
s.sendall(struct.pack('>H', len(q)) + q)
n = struct.unpack('>H', s.recv(2))[0]
r = b''
while len(r) < n:
    r += s.recv(n - len(r))
print('tcp id=%x rcode=%d answers=%d ip=%s' % (struct.unpack('>H', r[:2])[0], r[3] & 15, struct.unpack('>H', r[6:8])[0], socket.inet_ntoa(r[-4:])))
"#;

#[test]
fn the_dns_stub_answers_with_addresses_of_its_own_and_asks_the_host_nothing() {
    if skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    let (port, asked) = counting_dns();
    let mut t = DaemonEnv::new("");
    t.vars.push(("SANDGATE_DNS_SERVER".into(), Some(format!("127.0.0.1:{port}"))));
    start_daemon(&t);
    let script = "cat /etc/resolv.conf; \
         for n in allowed.sgtest denied.sgtest c2VjcmV0.unknown.sgtest loop.sgtest; do \
           getent hosts $n; echo \"$n rc=$?\"; done; \
         python3 -c 'import socket; print(\"py\", sorted({a[4][0] for a in socket.getaddrinfo(\"allowed.sgtest\", 443)}))'; \
         python3 -c 'import socket\ntry:\n socket.getaddrinfo(\"denied.sgtest\", 443)\nexcept socket.gaierror as e: print(\"py denied\", e.errno == socket.EAI_NONAME)'; \
         python3 -c \"$TCPQ\"";
    let mut run = t.cmd();
    run.env("TCPQ", TCP_QUERY);
    let child = run
        .args(["net", "--allow", "allowed.sgtest", "--deny", "denied.sgtest"])
        .args(["--", "sh", "-c", script])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (code, stdout, stderr) = finish(child);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("nameserver 127.0.0.1"), "{stdout}\n{stderr}");
    // Every name no deny rule refuses has an address of the block, one per name.
    let given = |name: &str| -> String {
        let line = stdout
            .lines()
            .find(|l| l.ends_with(&format!(" {name}")) || l.split_whitespace().nth(1) == Some(name))
            .unwrap_or_else(|| panic!("no answer for {name}:\n{stdout}\n{stderr}"));
        let ip = line.split_whitespace().next().unwrap().to_owned();
        assert!(ip.starts_with("198.18.") || ip.starts_with("198.19."), "{name}: {line}");
        ip
    };
    let addresses = ["allowed.sgtest", "c2VjcmV0.unknown.sgtest", "loop.sgtest"].map(given);
    assert!(
        addresses[0] != addresses[1]
            && addresses[1] != addresses[2]
            && addresses[0] != addresses[2],
        "{addresses:?}"
    );
    for name in ["allowed.sgtest", "c2VjcmV0.unknown.sgtest", "loop.sgtest"] {
        assert!(stdout.contains(&format!("{name} rc=0")), "{name}\n{stdout}\n{stderr}");
    }
    // getent: 2 = not found.
    assert!(stdout.contains("denied.sgtest rc=2"), "{stdout}\n{stderr}");
    // IPv4 only, the same address as `getent` was given.
    assert!(stdout.contains(&format!("py ['{}']", addresses[0])), "{stdout}\n{stderr}");
    assert!(stdout.contains("py denied True"), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!("tcp id=4242 rcode=0 answers=1 ip={}", addresses[0])),
        "{stdout}\n{stderr}"
    );

    // Nothing reached the host's resolver: no connection was made.
    assert!(asked.lock().unwrap().is_empty(), "{:?}", asked.lock().unwrap());
    // Refusals are events: `sandgate log` shows them.
    let log = t.json_lines(&["log", "--json"]);
    let denied = log
        .iter()
        .find(|e| e["method"] == "DNS" && e["host"] == "denied.sgtest")
        .unwrap_or_else(|| panic!("no DNS event for denied.sgtest: {log:#?}"));
    assert_eq!(denied["decision"], "deny");
    assert!(denied["rule"].as_str().unwrap().contains("denied.sgtest"));
    let text = String::from_utf8_lossy(&t.sg(&["log"]).stdout).into_owned();
    let line = text.lines().find(|l| l.contains("denied.sgtest")).unwrap_or_default();
    assert!(line.contains("DNS") && !line.contains("denied.sgtest:0"), "{text}");
    assert!(pending_is_empty(&t), "a lookup must not ask a person");
    // The command's stderr says why, once per name (not once per A and AAAA query).
    let notice = "sandgate: DNS: no answer for denied.sgtest";
    assert_eq!(stderr.matches(notice).count(), 1, "{stderr}");
}

/// A name no rule allows resolves at once (to an address of the sandbox's own); the connection
/// to it is held until a person answers, and only then is the name looked up on the host.
#[test]
fn a_name_is_looked_up_on_the_host_only_once_a_person_allowed_the_connection() {
    if skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    let (port, asked) = counting_dns();
    let mut t = DaemonEnv::new("");
    t.vars.push(("SANDGATE_DNS_SERVER".into(), Some(format!("127.0.0.1:{port}"))));
    start_daemon(&t);
    // The service: on the host's loopback, where `loop.sgtest` resolves.
    let service = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let service_port = service.local_addr().unwrap().port();
    std::thread::spawn(move || {
        use std::io::Write as _;
        if let Ok((mut s, _)) = service.accept() {
            let _ = s.write_all(b"hello\n");
        }
    });
    let script = format!(
        "getent hosts loop.sgtest; echo first rc=$?; \
         python3 -c 'import socket; s = socket.create_connection((\"loop.sgtest\", {service_port}), timeout=60); s.settimeout(60); print(\"got\", s.recv(16))'"
    );
    let mut child = t.spawn_net(&["--allow", "127.0.0.1"], &["sh", "-c", &script]);
    let lines = lines_of(child.stdout.take().unwrap());
    let first = expect_line(&lines, std::time::Duration::from_secs(30), |l| l.contains("rc="));
    assert_eq!(first, "first rc=0");
    let question = wait_for_question(&t);
    assert_eq!(
        (question["host"].as_str(), question["port"].as_u64(), question["method"].as_str()),
        (Some("loop.sgtest"), Some(u64::from(service_port)), Some("TCP")),
        "{question}"
    );
    assert!(asked.lock().unwrap().is_empty(), "looked up before anyone allowed it");
    let target = format!("loop.sgtest:{service_port}");
    let out = t.sg(&["allow", &target]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let got = expect_line(&lines, std::time::Duration::from_secs(30), |l| l.starts_with("got"));
    assert_eq!(got, "got b'hello\\n'");
    let _ = child.wait();
    assert!(asked.lock().unwrap().iter().any(|n| n == "loop.sgtest"));
}

fn pending_is_empty(t: &DaemonEnv) -> bool {
    t.json(&["pending", "--json"]).as_array().is_none_or(|a| a.is_empty())
}

/// 10,000 lookups of made-up names from inside a `net` sandbox, sent one after the other by
/// the command itself (UDP to the stub): 8,500 under one registrable domain (data smuggled out
/// in labels), 1,500 under as many registrable domains (names made up to fill the disk). The
/// store keeps a bounded number of rows for them: the first refusal per domain, one summary per
/// domain and minute, and, past the sandbox's cap on stored events (1,000 at once, then
/// `events_per_minute`), none but one `events_capped` row saying what was not stored. The
/// counts add up to every lookup (nothing vanished unreported). Control: with
/// `SANDGATE_TEST_CAP_OFF=1` (`events_per_minute = 100000`, the cap out of the way) the 1,500
/// domains leave 1,502 rows and the bound below fails.
#[test]
fn ten_thousand_made_up_names_leave_a_bounded_number_of_rows_whose_counts_add_up() {
    if skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    let t = DaemonEnv::new(&format!("[daemon]\nevents_per_minute = {}\n", cap_per_minute()));
    start_daemon(&t);
    let script = r#"
import socket, struct, hashlib
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(10)
s.connect(('127.0.0.1', 53))
nx = 0
for i in range(10000):
    label = hashlib.sha256(str(i).encode()).hexdigest()[:20]
    name = '%s.exfil.sgtest' % label if i >= 1500 else '%s.d%d.sgtest' % (label, i)
    q = struct.pack('>HHHHHH', i & 0xffff, 0x0100, 1, 0, 0, 0)
    q += b''.join(bytes([len(l)]) + l.encode() for l in name.split('.')) + b'\0'
    s.send(q + struct.pack('>HH', 1, 1))
    r = s.recv(2048)
    nx += (r[3] & 15) == 3
print('nxdomain', nx)
"#;
    let started = std::time::Instant::now();
    // Denied, so that every made-up name is a refusal (names no rule mentions get addresses).
    let (code, stdout, stderr) =
        finish(t.spawn_net(&["--deny", "*.sgtest"], &["python3", "-c", script]));
    let secs = started.elapsed().as_secs();
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("nxdomain 10000"), "{stdout}\n{stderr}");
    // `log` makes the daemon commit what it queued (all of it was, before the launcher ended).
    assert!(t.sg(&["log"]).status.success());
    let store = sandgate_store::Store::open(t.store_path()).unwrap();
    let all = store
        .recent_events(&sandgate_store::EventQuery { limit: 100_000, ..Default::default() })
        .unwrap();
    let dns: Vec<_> = all
        .iter()
        .map(|e| &e.event.details)
        .filter(|d| d["event"] == "request" && d["method"] == "DNS")
        .collect();
    let capped: Vec<_> =
        all.iter().map(|e| &e.event.details).filter(|d| d["event"] == "events_capped").collect();
    let stored: u64 = dns.iter().map(|d| d["count"].as_u64().unwrap_or(1)).sum();
    let not_stored: u64 = capped.iter().map(|d| d["standing_for"].as_u64().unwrap()).sum();
    eprintln!(
        "{} DNS rows, {} events_capped rows ({not_stored} lookups not stored), {secs} s",
        dns.len(),
        capped.len()
    );
    // The burst, what the rate refilled while it ran (1 a minute), and a summary or two.
    let bound = 1000 + secs / 60 + 3;
    assert!((dns.len() as u64) <= bound, "{} DNS rows over {secs} s (bound {bound})", dns.len());
    assert_eq!(stored + not_stored, 10_000, "stored {stored} + not stored {not_stored}");
    assert!(!capped.is_empty(), "no events_capped row");
    assert!(stderr.contains("traffic events"), "the cap is said on stderr: {stderr}");
}

/// `events_per_minute` for the test above: 1, unless `SANDGATE_TEST_CAP_OFF` is set (the
/// control: the cap out of the way, the bound must fail).
fn cap_per_minute() -> u32 {
    if std::env::var_os("SANDGATE_TEST_CAP_OFF").is_some() { 100_000 } else { 1 }
}
