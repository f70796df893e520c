#!/usr/bin/python3
"""Runs a how-to document exactly as written, from an empty folder, so it cannot go stale.

    check_doc_commands.py DOC.md

Fenced blocks whose info string carries an attribute take part; the rest are prose:
  ```cpp file=softsign.cpp        the block is written to that file
  ```sh run                       the block runs in bash (set -euo pipefail); it must exit 0
  ```sh run status=1              ... it must exit with this status
  ```text sample                  output of the run block just above: each of its lines that starts
                                  with "ok", "FAIL" or "gradcheck " must appear in the real output
                                  with the same first two words (the numbers may differ)
  ```text sample=lines            output of the run block just above, excerpted: every non-blank line
                                  must match a line of the real output, in order, where "…" stands
                                  for any text and a run of spaces for any run of spaces
Called by tests/install/check_install.sh with the installed seqgrad on PATH and pkg-config
pointing at it. Run blocks see SEQGRAD_SOURCE, the source tree the document belongs to (its
parent's parent), for the steps that read the tree.
"""
import os
import re
import subprocess
import sys
import tempfile
import time

FENCE = re.compile(r"^```(\S*)(.*)$")


def blocks(text):
    """(language, attributes, body, line number) of each fenced block."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m or not m.group(1):
            i += 1
            continue
        start, body = i + 1, []
        i += 1
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        attrs = dict(a.split("=", 1) if "=" in a else (a, "") for a in m.group(2).split())
        yield m.group(1), attrs, "\n".join(body) + "\n", start
        i += 1


def key(line):
    return " ".join(line.split()[:2])


def excerpt_problem(sample, output):
    """None when every non-blank line of `sample` matches a line of `output` (after the line the
    previous one matched), else the first line that does not."""
    lines = [" ".join(l.split()) for l in output.splitlines()]
    at = 0
    for l in sample.splitlines():
        if not l.strip():
            continue
        pattern = re.compile(".*".join(re.escape(" ".join(part.split())) for part in l.split("…")))
        at = next((i + 1 for i in range(at, len(lines)) if pattern.fullmatch(lines[i])), None)
        if at is None:
            return l.strip()
    return None


def main(doc):
    with open(doc) as f:
        text = f.read()
    failures, ran = [], 0
    last_output = None
    env = dict(os.environ, SEQGRAD_SOURCE=os.path.dirname(os.path.dirname(os.path.realpath(doc))))
    with tempfile.TemporaryDirectory() as folder:
        for lang, attrs, body, line in blocks(text):
            where = f"{doc}:{line}"
            if "file" in attrs:
                path = os.path.join(folder, attrs["file"])
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w") as f:
                    f.write(body)
            elif "run" in attrs:
                want = int(attrs.get("status", "0"))
                started = time.monotonic()
                p = subprocess.run(["bash", "-euo", "pipefail", "-c", body], cwd=folder, env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, timeout=600)
                ran += 1
                last_output = p.stdout
                print(f"== {where}: {body.strip().splitlines()[0]} -> exit {p.returncode}, "
                      f"{time.monotonic() - started:.1f} s", flush=True)
                if p.returncode != want:
                    failures.append(f"{where}: exit status {p.returncode}, the doc says {want}\n{last_output}")
            elif "sample" in attrs:
                if last_output is None:
                    failures.append(f"{where}: a sample with no run block above it")
                    continue
                if attrs["sample"] not in ("", "lines"):
                    failures.append(f"{where}: unknown sample kind '{attrs['sample']}' (sample or sample=lines)")
                    continue
                if attrs["sample"] == "lines":
                    missing = excerpt_problem(body, last_output)
                    if missing is not None:
                        failures.append(f"{where}: the sample's line '{missing}' is not in the real output "
                                        f"(or not in this order):\n{last_output}")
                    continue
                seen = {key(l) for l in last_output.splitlines()}
                for l in body.splitlines():
                    if re.match(r"\s*(ok|FAIL|gradcheck )", l) and key(l) not in seen:
                        failures.append(f"{where}: the sample's line '{l.strip()}' is not in the real output:\n"
                                        f"{last_output}")
    for f in failures:
        print(f"FAIL {f}", file=sys.stderr)
    print(f"{doc}: {ran} command blocks run, {len(failures)} problems")
    return 1 if failures or ran == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
