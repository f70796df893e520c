"""A rank that dies or stops calling collectives takes a 2-rank job down with a message, quickly,
instead of leaving the other rank blocked: test_dist_failures.py MPIRUN TEST_DIST."""
import os
import subprocess
import sys
import time

mpirun, test_dist = sys.argv[1], sys.argv[2]


def run(mode, timeout_seconds):
    env = dict(os.environ, SEQGRAD_DIST_TIMEOUT=str(timeout_seconds), OMP_NUM_THREADS="1")
    command = [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2", test_dist, mode]
    start = time.monotonic()
    p = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    return p.returncode, p.stdout + p.stderr, time.monotonic() - start


failures = []
code, output, seconds = run("--silent-rank", 2)
if code == 0 or "a rank has probably died or stopped calling the same collectives" not in output:
    failures.append(f"silent rank: exit {code}, no timeout message:\n{output}")
elif seconds > 45:  # 2 s timeout, then the abort; rank 1 would sleep 60 s
    failures.append(f"silent rank: the job took {seconds:.0f} s to end")

code, output, seconds = run("--dead-rank", 60)
if code == 0:
    failures.append(f"dead rank: exit 0:\n{output}")
elif seconds > 45:
    failures.append(f"dead rank: the job took {seconds:.0f} s to end (the timeout was 60 s)")

for f in failures:
    print("FAIL:", f)
print("ok" if not failures else f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
