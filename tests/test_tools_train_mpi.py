"""`mpirun -np 2 seqgrad train` against one rank (meson test --suite dist): the d2l preset for one
epoch on 2 ranks gives the 1-rank run's losses and weights (float32 summation order apart: dropout
off, so both runs compute the same function), only rank 0 writes, and a checkpoint that 2 ranks
saved mid-epoch resumes on 1 rank to the same end point; token batches (--batch-tokens) small enough
that many batches leave a rank without rows train as on 1 rank; `seqgrad bench ddp_default` reports
from rank 0 alone, with the word-level default preset's gradient bytes, and refuses to run on one rank.
Usage: test_tools_train_mpi.py MPIRUN SEQGRAD DATA_DIR"""
import array
import json
import os
import struct
import subprocess
import sys
import tempfile

mpirun, seqgrad, data_dir = sys.argv[1:4]
env = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive", SEQGRAD_DIST_TIMEOUT="120")
common = ["train", "--preset", "d2l", "--epochs", "1", "--dropout", "0", "--data-dir", data_dir,
          "--threads", "1"]  # not --quiet: the test reads the data-parallel line
failures = []


def run(ranks, out, *extra, expect=0):
    command = [seqgrad] + common + ["--out", out] + list(extra)
    if ranks > 1:
        command = [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", str(ranks)] + command
    p = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    if p.returncode != expect:
        failures.append(f"{' '.join(command)}: exit {p.returncode}, expected {expect}\n{p.stdout}\n{p.stderr}")
    return p.stdout + p.stderr


def tensors(path):  # safetensors: u64 header size, JSON header, then the data
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    header, data = json.loads(blob[8:8 + n]), blob[8 + n:]
    out = {}
    for name, v in header.items():
        if name != "__metadata__" and v["dtype"] in ("F32", "F64"):
            begin, end = v["data_offsets"]
            out[name] = array.array("f" if v["dtype"] == "F32" else "d", data[begin:end])
    return out


def compare_weights(what, a_path, b_path, tolerance):
    a, b = tensors(a_path), tensors(b_path)
    if set(a) != set(b):
        failures.append(f"{what}: different tensors: {sorted(set(a) ^ set(b))}")
        return
    worst = max((abs(x - y), name) for name in a if name.startswith("model.") for x, y in zip(a[name], b[name]))
    print(f"{what}: largest weight difference {worst[0]:.3g} ({worst[1]})")
    if worst[0] > tolerance:
        failures.append(f"{what}: weight {worst[1]} differs by {worst[0]:.3g} > {tolerance}")


def metrics(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


with tempfile.TemporaryDirectory() as tmp:
    one, two, resumed = (os.path.join(tmp, name) for name in ("one", "two", "resumed"))
    run(1, one)
    log = run(2, two)
    if log.count("data-parallel: 2 ranks (mpi)") != 1:
        failures.append(f"2 ranks: expected one 'data-parallel: 2 ranks (mpi)' line (rank 0 prints):\n{log}")
    m1, m2 = metrics(one), metrics(two)
    for key in ("train_loss", "valid_loss"):
        if abs(m1[0][key] - m2[0][key]) > 1e-5 * abs(m1[0][key]):
            failures.append(f"{key}: 1 rank {m1[0][key]} vs 2 ranks {m2[0][key]}")
    compare_weights("1 rank vs 2 ranks", os.path.join(one, "last.safetensors"), os.path.join(two, "last.safetensors"),
                    1e-4)
    stray = [f for f in os.listdir(tmp) if f not in ("one", "two")]
    if stray:
        failures.append(f"files written outside the run folders: {stray}")

    # 2 ranks stop after 4 of the epoch's 10 steps (as Ctrl-C: exit 130, last.safetensors saved),
    # then 1 rank resumes the run and finishes the epoch.
    run(2, resumed, "--stop-after-steps", "4", expect=130)
    run(1, resumed, "--resume")
    compare_weights("2 ranks to step 4, resumed on 1 rank", os.path.join(one, "last.safetensors"),
                    os.path.join(resumed, "last.safetensors"), 1e-4)
    if metrics(resumed)[0]["step"] != m1[0]["step"]:
        failures.append(f"resumed run: step {metrics(resumed)[0]['step']} != {m1[0]['step']}")

    # token batches of 12 tokens: pairs of up to 11 ids, so many batches hold one pair and rank 0's
    # shard of them is empty; the 2 ranks still train as 1 does (on 60 pairs: float32 summation
    # differences grow with the steps under Adam, and 600 pairs take 263 of them)
    tokens_one, tokens_two = os.path.join(tmp, "tokens_one"), os.path.join(tmp, "tokens_two")
    run(1, tokens_one, "--batch-tokens", "12", "--subset", "60")
    run(2, tokens_two, "--batch-tokens", "12", "--subset", "60")
    t1, t2 = metrics(tokens_one), metrics(tokens_two)
    if t1[0]["step"] == m1[0]["step"] or t1[0]["step"] != t2[0]["step"]:
        failures.append(f"--batch-tokens 12: steps {t1[0]['step']} (1 rank), {t2[0]['step']} (2 ranks), "
                        f"sentence batches {m1[0]['step']}")
    if abs(t1[0]["train_loss"] - t2[0]["train_loss"]) > 1e-5 * abs(t1[0]["train_loss"]):
        failures.append(f"--batch-tokens 12: train_loss 1 rank {t1[0]['train_loss']} vs 2 ranks {t2[0]['train_loss']}")
    compare_weights("--batch-tokens 12, 1 rank vs 2 ranks", os.path.join(tokens_one, "last.safetensors"),
                    os.path.join(tokens_two, "last.safetensors"), 1e-4)

# the communication benchmark: 7,002,220 float32 gradients of the word-level default preset per step,
# each mode reported once (by rank 0), the exposed time and the allreduce time alone measured
bench = [seqgrad, "bench", "ddp_default", "--threads", "1", "--quick", "--json", "--data-dir", data_dir]
p = subprocess.run([mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2"] + bench, capture_output=True,
                   text=True, timeout=600, env=env)
lines = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
if p.returncode != 0 or [j["workload"] for j in lines] != ["ddp_default_hooks_only", "ddp_default_progress"]:
    failures.append(f"bench ddp_default on 2 ranks: exit {p.returncode}, results {lines}\n{p.stderr}")
for j in lines:
    if abs(j["mb_per_step"] - 7002220 * 4 / 1e6) > 1e-9 or j["ranks"] != 2:
        failures.append(f"bench {j['workload']}: {j['mb_per_step']} MB per step on {j['ranks']} ranks, "
                        f"expected 28.00888 on 2")
    if not (j["allreduce_alone_ms"] > 0 and j["median"] >= 0 and j["backward_ms"] > 0):
        failures.append(f"bench {j['workload']}: times not measured: {j}")
p = subprocess.run(bench, capture_output=True, text=True, timeout=600, env=env)
if p.returncode == 0 or "run it on several ranks, e.g. mpirun -np 2" not in p.stderr:
    failures.append(f"bench ddp_default on 1 rank: exit {p.returncode}, expected a refusal\n{p.stderr}")

for f in failures:
    print("FAIL:", f)
print("ok" if not failures else f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
