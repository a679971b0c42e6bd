"""CPU time (user + system, from wait4's rusage) and wall time of one `sandgate hook claude` per
input file: the hook process alone, without a shell. Usage: hook_rusage.py BIN RUNS FILE..."""
import os, subprocess, sys, time

bin_, runs = sys.argv[1], int(sys.argv[2])
print("| input | median wall [ms] | median CPU user+sys [ms] |")
print("|---|---:|---:|")
for path in ["--version"] + sys.argv[3:]:
    # `sandgate --version` first: the cost of starting the binary at all, for comparison.
    data = b"" if path == "--version" else open(path, "rb").read()
    walls, cpus = [], []
    for _ in range(runs):
        r, w = os.pipe()
        t = time.perf_counter()
        args = [bin_, "--version"] if path == "--version" else [bin_, "hook", "claude"]
        p = subprocess.Popen(args, stdin=r, stdout=subprocess.DEVNULL)
        os.close(r)
        os.write(w, data)
        os.close(w)
        _, _, ru = os.wait4(p.pid, 0)
        walls.append(time.perf_counter() - t)
        cpus.append(ru.ru_utime + ru.ru_stime)
        p.returncode = 0
    walls.sort(); cpus.sort()
    name = "sandgate --version (start-up alone)" if path == "--version" else os.path.basename(path)
    print(f"| {name} | {walls[runs // 2] * 1e3:.2f} | {cpus[runs // 2] * 1e3:.2f} |")
