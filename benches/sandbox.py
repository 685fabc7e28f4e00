#!/usr/bin/env python3
"""What the sandbox of commands costs (issue 48, :h mia-sandbox).

Runs `bash -c true` N times (default 100) without the sandbox and under
mia-acp's supervisor with the policy mia gives the bash tool (the project
and a temporary directory writable, a deny rule inside the project, the
default credentials denied, network off), alternating the two, and prints
the median and the 90th percentile of each. Then the extra memory of one
sandboxed command: the supervisor's resident and proportional set size
(RSS, PSS) while its command sleeps.

    .venv/bin/python benches/sandbox.py [--runs 100]

Needs target/release/mia-acp (`cargo build --release`).
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / "target" / "release" / "mia-acp"
HOME = Path(os.environ.get("HOME", "/root"))
CREDENTIALS = [".ssh", ".gnupg", ".aws", ".azure", ".kube", ".docker", ".netrc", ".git-credentials",
               ".config/gcloud", ".config/gh", ".config/nvim"]


def policy(project, tmp):
    args = ["--sandbox-run", "--write", str(project), "--write", str(tmp),
            "--deny-read", str(project / "secrets")]
    for c in CREDENTIALS:
        args += ["--deny-read", str(HOME / c)]
    return args + ["--grace-ms", "1000", "--"]


def timed(argv, cwd):
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, check=True, stdin=subprocess.DEVNULL)
    return (time.perf_counter() - start) * 1000


def memory_of(pid):
    rss = pss = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            pss = int(line.split()[1])
    return rss, pss


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=100)
    a = ap.parse_args()
    if not BIN.exists():
        sys.exit(f"{BIN} is missing: cargo build --release")
    with tempfile.TemporaryDirectory() as d:
        project, tmp = Path(d) / "project", Path(d) / "tmp"
        (project / "secrets").mkdir(parents=True)
        (project / "secrets" / "k").write_text("key\n")
        for i in range(50):
            (project / f"f{i}.txt").write_text("x\n")
        tmp.mkdir()
        plain = ["bash", "-c", "true"]
        boxed = [str(BIN), *policy(project, tmp), "bash", "-c", "true"]
        for argv in (plain, boxed):  # warm the page cache
            timed(argv, project)
        without, within = [], []
        for _ in range(a.runs):
            without.append(timed(plain, project))
            within.append(timed(boxed, project))

        def line(name, xs):
            xs = sorted(xs)
            p90 = xs[int(len(xs) * 0.9) - 1]
            return f"{name:<22} median {statistics.median(xs):6.2f} ms   p90 {p90:6.2f} ms"
        print(f"`bash -c true`, {a.runs} runs each, alternating:")
        print(line("without the sandbox", without))
        print(line("in the sandbox", within))
        print(f"{'extra (medians)':<22} {statistics.median(within) - statistics.median(without):+6.2f} ms")

        p = subprocess.Popen([str(BIN), *policy(project, tmp), "sleep", "2"], cwd=project)
        time.sleep(0.5)
        rss, pss = memory_of(p.pid)
        p.wait()
        print(f"the supervisor (mia-acp) while its command runs: RSS {rss} kB, PSS {pss} kB "
              "(the command itself is what it would be without the sandbox)")


if __name__ == "__main__":
    main()
