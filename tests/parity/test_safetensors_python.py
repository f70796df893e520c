#!/usr/bin/python3
"""Interop of seqgrad's safetensors reader/writer with Hugging Face's Python `safetensors`.

scripts/setup.sh --tests installs the dependencies: numpy from Debian (python3-numpy), safetensors
(no Debian package) into the project's .venv, which the test runs with.
(tested with safetensors 0.8.0, numpy 1.24.2)

Usage: test_safetensors_python.py PATH/TO/safetensors_roundtrip
Prints one PASS/FAIL line per check; exit status 0 when all pass, 1 otherwise.
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

# Mirrors known_file() in safetensors_roundtrip.cpp.
F32 = np.finfo(np.float32)
KNOWN_METADATA = {"format": "np", "note": 'ünïcode "quoted" \\ and\ttab'}
KNOWN = {
    "f32": np.array([[0.5, -1.25, F32.max], [F32.smallest_subnormal, -0.0, np.inf]], np.float32),
    "f64": np.array([0.1, -np.finfo(np.float64).smallest_subnormal, 1e300, np.nan], np.float64),
    "i64": np.array([[-2**63, 2**63 - 1], [-1, 0]], np.int64),
    "i32": np.array([-2**31, 7, 2**31 - 1], np.int32),
    "i8": np.array([-128, 127], np.int8),
    "u8": np.array([0, 1, 128, 255], np.uint8),
    "bool": np.array([True, False, True]),
    "f16": np.array([1.0, -2.0], np.float16),
    "empty": np.zeros((0,), np.float32),
    "empty2d": np.zeros((2, 0), np.int32),
    "scalar": np.array(2.5, np.float64),
}

failures = []


def check(name, ok, detail=""):
    print(f"{'PASS' if ok else 'FAIL'}: {name}" + (f" ({detail})" if detail and not ok else ""))
    if not ok:
        failures.append(name)


def same_arrays(expected, actual):
    """Exact equality: same names, dtypes, shapes and bytes (so NaN, -0.0 and denormals count)."""
    if expected.keys() != actual.keys():
        return False, f"names {sorted(expected)} != {sorted(actual)}"
    for name, want in expected.items():
        got = actual[name]
        if got.dtype != want.dtype or got.shape != want.shape or got.tobytes() != want.tobytes():
            return False, f"{name}: {got.dtype}{got.shape} {got!r} != {want.dtype}{want.shape} {want!r}"
    return True, ""


def metadata_of(path):
    with safe_open(path, framework="np") as f:
        return f.metadata()


def run_tool(tool, *args):
    return subprocess.run([tool, *args], capture_output=True, text=True, timeout=60)


def check_seqgrad_to_python(tool, tmp):
    path = os.path.join(tmp, "from_seqgrad.safetensors")
    result = run_tool(tool, "--write", path)
    check("seqgrad --write exits 0", result.returncode == 0, result.stderr)
    if result.returncode != 0:
        return
    check("seqgrad file: exact values in safetensors.numpy.load_file", *same_arrays(KNOWN, load_file(path)))
    check("seqgrad file: metadata in safe_open", metadata_of(path) == KNOWN_METADATA, repr(metadata_of(path)))


def check_python_to_seqgrad(tool, tmp):
    source = os.path.join(tmp, "from_python.safetensors")
    copy = os.path.join(tmp, "resaved_by_seqgrad.safetensors")
    save_file(KNOWN, source, metadata=KNOWN_METADATA)
    result = run_tool(tool, source, copy)
    check("seqgrad loads the Python file (exit 0)", result.returncode == 0, result.stderr)
    if result.returncode != 0:
        return
    seen = json.loads(result.stdout)
    expected = {name: {"dtype": dtype_name(a), "shape": list(a.shape), "hex": a.tobytes().hex()}
                for name, a in KNOWN.items()}
    check("seqgrad sees the Python file's exact dtypes, shapes and bytes", seen["tensors"] == expected,
          f"{seen['tensors']} != {expected}")
    check("seqgrad sees the Python file's metadata", seen["metadata"] == KNOWN_METADATA, repr(seen["metadata"]))
    check("seqgrad's re-save loads in Python with exact values", *same_arrays(KNOWN, load_file(copy)))
    check("seqgrad's re-save keeps the metadata", metadata_of(copy) == KNOWN_METADATA)


def dtype_name(array):
    names = {"float16": "F16", "float32": "F32", "float64": "F64", "int8": "I8", "int32": "I32",
             "int64": "I64", "uint8": "U8", "bool": "BOOL"}
    return names[array.dtype.name]


def check_byte_identical(tool, tmp):
    # With at most one metadata key (Rust's HashMap order is arbitrary) both writers must agree on
    # every byte: same JSON, same tensor order (descending alignment, then name), same padding.
    source = os.path.join(tmp, "reference.safetensors")
    copy = os.path.join(tmp, "reference_resaved.safetensors")
    save_file(KNOWN, source, metadata={"format": "np"})
    result = run_tool(tool, source, copy)
    with open(source, "rb") as a, open(copy, "rb") as b:
        check("seqgrad re-save is byte-identical to the Python writer's file",
              result.returncode == 0 and a.read() == b.read(), result.stderr)


def check_corrupt_python_file(tool, tmp):
    source = os.path.join(tmp, "truncated.safetensors")
    save_file(KNOWN, source)
    with open(source, "r+b") as f:
        f.truncate(os.path.getsize(source) - 3)
    result = run_tool(tool, source, os.path.join(tmp, "never.safetensors"))
    check("seqgrad rejects a truncated Python file, naming it", result.returncode == 1 and source in result.stderr,
          f"rc={result.returncode} stderr={result.stderr!r}")
    check("nothing is written after a failed load", not os.path.exists(os.path.join(tmp, "never.safetensors")))


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    tool = os.path.abspath(sys.argv[1])
    with tempfile.TemporaryDirectory(prefix="seqgrad_safetensors_") as tmp:
        check_seqgrad_to_python(tool, tmp)
        check_python_to_seqgrad(tool, tmp)
        check_byte_identical(tool, tmp)
        check_corrupt_python_file(tool, tmp)
    print(f"{'FAIL' if failures else 'PASS'}: safetensors interop, {len(failures)} check(s) failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
