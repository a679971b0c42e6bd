//! Red team of the daemon's index of the writable trees (issue 31, part 3): who can talk to
//! `tree.sock`, and what they learn. (The index's own staleness cases are the sandbox crate's
//! tests, `tree::index`.)

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::support::daemon::*;
use sandgate_tests::skip_unless;

/// Asks `tree.sock` (argv 1) about the tree at argv 2, as a launcher would (empty rule, framed),
/// and prints `refused ERRNO`, or `answer TAG` (0: none, 1: a scan) and the answer's length.
const ASK: &str = r#"
import socket, struct, sys
def field(b): return struct.pack('<I', len(b)) + b
ask = (b'sandgate-tree-ask 2\n' + struct.pack('<I', 1) + field(sys.argv[2].encode())
       + struct.pack('<I', 0) * 5 + struct.pack('<Q', 0) + field(b''))
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1])
except OSError as e:
    print('refused', e.errno); sys.exit(0)
try:
    s.sendall(struct.pack('<I', len(ask)) + ask)
except OSError:
    pass  # the daemon may have answered and closed already
data = b''
while len(data) < 4 or len(data) < 4 + struct.unpack('<I', data[:4])[0]:
    try:
        c = s.recv(65536)
    except ConnectionResetError:
        break  # answered without reading the question (refused): the rest was the answer
    if not c: break
    data += c
data = data[4:]
head = b'sandgate-tree-answer 4\n'
tag = data[len(head)] if data.startswith(head) and len(data) > len(head) else 'bad'
print('answer', tag, len(data))
"#;

fn tree_socket(t: &DaemonEnv) -> PathBuf {
    t.socket().parent().unwrap().join("tree.sock")
}

/// A project with some directories (names only: what another user must not learn).
fn project(t: &DaemonEnv) -> PathBuf {
    for d in ["secret-client-name/src", "b/c/d", "e/f"] {
        std::fs::create_dir_all(t.proj.join(d)).unwrap();
    }
    t.proj.canonicalize().unwrap()
}

/// The owner's question, polled until the index answers it with a scan (it is built on a
/// thread of the daemon after the first question).
fn owner_gets_a_scan(sock: &Path, proj: &Path) {
    wait_until("the daemon's index to answer", Duration::from_secs(10), || {
        let out = Command::new("python3").args(["-c", ASK]).arg(sock).arg(proj).output().unwrap();
        String::from_utf8_lossy(&out.stdout).starts_with("answer 1 ")
    });
}

/// From inside every tier, `tree.sock` is not reachable, even with its path allowed to unix
/// sockets by config (the runtime directory is hidden; a peer in a sandbox's pid namespace
/// would be answered "none" anyway). Control: the same probe from the host gets a scan.
#[test]
fn nothing_inside_a_sandbox_reaches_the_tree_socket() {
    if skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    let t = DaemonEnv::new("");
    start_daemon(&t);
    let sock = tree_socket(&t);
    assert!(sock.exists(), "the daemon binds tree.sock");
    let proj = project(&t);
    owner_gets_a_scan(&sock, &proj);
    let cfg = format!("[filesystem]\nunix_sockets = [{:?}]\n", sock.display().to_string());
    std::fs::write(t.env.config_home().join("sandgate/config.toml"), cfg).unwrap();
    let (sock_arg, proj_arg) = (sock.display().to_string(), proj.display().to_string());
    for tier in ["run", "net", "build"] {
        let out = t.sg(&[tier, "--", "python3", "-c", ASK, &sock_arg, &proj_arg]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.starts_with("refused"),
            "{tier}: {text} {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Another uid learns nothing of the owner's trees from `tree.sock`: the directory and the
/// socket keep it out, and with both opened up the daemon answers "none" (no names). Control:
/// the owner, asking the same question, gets a scan.
#[test]
fn another_uid_learns_no_names_from_the_tree_socket() {
    let root = sandgate_tests::is_root();
    if skip_unless(
        root && Path::new("/usr/bin/setpriv").exists() && Path::new("/usr/bin/python3").exists(),
        "root, setpriv and /usr/bin/python3",
    ) {
        return;
    }
    let t = DaemonEnv::new("");
    start_daemon(&t);
    let sock = tree_socket(&t);
    let proj = project(&t);
    owner_gets_a_scan(&sock, &proj);
    let as_nobody = || {
        let out = Command::new("setpriv")
            .args(["--reuid", "65534", "--regid", "65534", "--clear-groups", "--"])
            .args(["/usr/bin/python3", "-c", ASK])
            .arg(&sock)
            .arg(&proj)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        assert!(!text.is_empty(), "the probe failed: {}", String::from_utf8_lossy(&out.stderr));
        text
    };
    assert_eq!(as_nobody(), "refused 13", "EACCES");
    use std::os::unix::fs::PermissionsExt as _;
    let dir = sock.parent().unwrap().to_path_buf();
    for d in [t.env.root.path(), dir.parent().unwrap(), &dir] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o777)).unwrap();
    let head = "sandgate-tree-answer 4\n".len();
    assert_eq!(as_nobody(), format!("answer 0 {}", head + 1), "none: no names");
}
