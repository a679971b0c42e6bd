#!/bin/sh
# How long a new dot-entry planted at the top of a writable directory stays in place before the
# warden takes it away (the window docs/threat-model/writable-directories.md names). Run from any scratch
# directory outside /tmp: `bench/top-level-window.sh [path/to/sandgate]`.
set -e
SANDGATE=${1:-target/debug/sandgate}
dir=$(mktemp -d /var/tmp/sandgate-window.XXXXXX)
cat > "$dir/window.py" <<'PY'
import os, statistics, time
ts = []
for i in range(50):
    n = f".planted-{i}"
    t = time.perf_counter()
    os.mkdir(n)
    while os.path.lexists(n) and time.perf_counter() - t < 5:
        pass
    ts.append((time.perf_counter() - t) * 1000)
ts.sort()
print(f"window ms over 50: median {statistics.median(ts):.2f} p90 {ts[44]:.2f} max {ts[-1]:.2f}")
PY
sandgate=$(realpath "$SANDGATE")
(cd "$dir" && "$sandgate" build -- python3 window.py 2>/dev/null)
rm -rf "$dir"
