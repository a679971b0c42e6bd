#!/usr/bin/env python3
"""Wall time of launches taken in turn: one `true`, one bwrap, one bwrap --unshare-net and one of
each tier (and of each tier of OLD_BINARY, when given), round after round, then the medians. On a
machine whose load changes during a run, hyperfine's one-command-after-the-other order lets the
load decide the ratios; in turn, every row sees the same load. Each round takes the rows in a new
random order (seeded): a launch right after another of its kind finds the daemon refilling its
networks, and a fixed order gave whichever row came second that cost. (Times include Python's
fork+exec, ~1 ms.) `sandbox-TIER` rows run the small launcher (`sandgate-launch`, what the
`sandbox-*` links point at), `sandgate TIER` rows the big binary; OLD_BINARY's rows use the
launcher next to it when there is one. Both builds run from copies in the bench's directory (see
`installed`), each served by a daemon of its own build (see `environment`). Release build of this tree unless SANDGATE_BIN names a
binary.

Usage: bench/launch-interleaved.py [ROUNDS] [OLD_BINARY]
"""
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
new = os.environ.get("SANDGATE_BIN")
if not new:
    subprocess.run(["cargo", "build", "--release", "--bins"], cwd=root, check=True,
                   stdout=subprocess.DEVNULL)
    new = os.path.join(root, "target/release/sandgate")
new = os.path.realpath(new)
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 150
old = os.path.realpath(sys.argv[2]) if len(sys.argv) > 2 else None

d = tempfile.mkdtemp(dir="/var/tmp", prefix="sandgate-bench.")

def installed(binary, name):
    """A copy of `binary` (and the launcher next to it), as `cargo install` puts them: a file the
    linker wrote in small pieces is cached in small pages and costs each launch ~20 more page
    faults (~0.1 ms here) than the same bytes copied, so both builds are measured as copies."""
    dest = os.path.join(d, "bin-" + name)
    os.makedirs(dest)
    copy = os.path.join(dest, os.path.basename(binary))
    shutil.copy(binary, copy)
    launcher = os.path.join(os.path.dirname(binary), "sandgate-launch")
    if os.access(launcher, os.X_OK):
        shutil.copy(launcher, os.path.join(dest, "sandgate-launch"))
    return copy

new = installed(new, "new")
old = installed(old, "old") if old else None

def environment(name):
    """XDG directories of the build `name`: each build is served by a daemon of its own (a
    daemon serves launchers of its own protocol only)."""
    e = dict(os.environ)
    e.pop("RUST_BACKTRACE", None)  # a developer's shell setting, not a user's
    for k, var in (("run", "XDG_RUNTIME_DIR"), ("data", "XDG_DATA_HOME"),
                   ("config", "XDG_CONFIG_HOME")):
        e[var] = os.path.join(d, f"{name}-{k}")
        os.makedirs(e[var])
    return e

builds = {"new": (new, environment("new"))}
if old:
    builds["old"] = (old, environment("old"))
daemons = [subprocess.Popen([b, "daemon"], env=e, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL) for b, e in builds.values()]
env = builds["new"][1]
try:
    for b, e in builds.values():
        for _ in range(100):
            if subprocess.run([b, "status"], env=e, capture_output=True).returncode == 0:
                break
            time.sleep(0.05)
    bwrap = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    cmds = {"true": ["true"], "bwrap": bwrap + ["true"],
            "bwrap --unshare-net": bwrap + ["--unshare-net", "true"]}
    env_of = {}
    def launcher(binary, name, tier):
        """The `sandbox-TIER` link to the launcher next to `binary`, or None without one."""
        exe = os.path.join(os.path.dirname(binary), "sandgate-launch")
        if not os.access(exe, os.X_OK):
            return None
        os.makedirs(os.path.join(d, name), exist_ok=True)
        link = os.path.join(d, name, f"sandbox-{tier}")
        os.symlink(exe, link)
        return link
    for tier in ("run", "net", "build"):
        if old:
            link = launcher(old, "old", tier)
            cmds[f"old sandbox-{tier} true"] = [link, "true"] if link else [old, tier, "--", "true"]
            env_of[f"old sandbox-{tier} true"] = builds["old"][1]
        cmds[f"sandbox-{tier} true"] = [launcher(new, "new", tier), "true"]
        cmds[f"sandgate {tier} true"] = [new, tier, "--", "true"]
    times = {k: [] for k in cmds}
    order = list(cmds)
    shuffle = random.Random(19).shuffle
    for i in range(rounds + 10):  # the first 10 rounds warm up
        shuffle(order)
        for k in order:
            c = cmds[k]
            t0 = time.perf_counter()
            subprocess.run(c, env=env_of.get(k, env), cwd=d, stdout=subprocess.DEVNULL)
            if i >= 10:
                times[k].append(time.perf_counter() - t0)
finally:
    for (b, e), daemon in zip(builds.values(), daemons):
        subprocess.run([b, "stop"], env=e, capture_output=True)
        daemon.wait()
    shutil.rmtree(d, ignore_errors=True)

med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
print(f"| command | median of {rounds} [ms] | ratio to its bwrap |")
print("|:---|---:|---:|")
for k in cmds:
    ref = "bwrap" if "run" in k else "bwrap --unshare-net"
    ratio = f"{med[k] / med[ref]:.2f}x `{ref}`" if "sand" in k else ""
    print(f"| `{k}` | {med[k]:.2f} | {ratio} |")
