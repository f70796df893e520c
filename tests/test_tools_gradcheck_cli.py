#!/usr/bin/python3
"""End-to-end tests of `seqgrad gradcheck`: exit statuses (0 pass, 1 a failing row, 2 usage),
options, --json, --list, and --plugin with the example plugin (tests/test_tools_gradcheck_plugin.cpp),
a missing file and a library without the entry point.

    /usr/bin/python3 tests/test_tools_gradcheck_cli.py BUILD/tools/seqgrad BUILD/tests/libgradcheck_plugin.so

Registered in tests/meson.build (suite 'tools_gradcheck').
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

SEQGRAD = None
PLUGIN = None


def gradcheck(*args):
    return subprocess.run([SEQGRAD, "gradcheck", "--threads", "1", *args], capture_output=True, text=True,
                          timeout=300)


class GradcheckCli(unittest.TestCase):
    def assertStatus(self, p, status):
        self.assertEqual(p.returncode, status, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}")

    def test_in_tree_rows_pass_with_every_check(self):
        p = gradcheck("softmax", "relu")
        self.assertStatus(p, 0)
        self.assertRegex(p.stdout, r"ok\s+softmax/last\s+max abs .* 2nd order: max abs .* float32: ok")
        self.assertRegex(p.stdout, r"ok\s+relu/undefined\s+error row")
        self.assertIn("rows passed (full mode", p.stdout)

    def test_modes_and_tolerances(self):
        for extra in (["--fast"], ["--compress"], ["--eps", "1e-5", "--atol", "1e-4", "--rtol", "1e-2", "--seed", "9"]):
            self.assertStatus(gradcheck("log_softmax", *extra), 0)
        p = gradcheck("exp", "--dtype", "float32", "--no-second-order")
        self.assertStatus(p, 0)
        self.assertIn("float32: skipped", p.stdout)

    def test_usage_errors_exit_2(self):
        for args, words in [(["--fast", "--compress"], "exclude each other"), (["--dtype", "float16"], "--dtype must be"),
                            (["--eps", "0"], "--eps must be positive"), (["--atol", "x"], "expects a finite number"),
                            (["softsign"], "no op or row named 'softsign' in the in-tree table"),
                            (["--bogus"], "unknown option --bogus")]:
            p = gradcheck(*args)
            self.assertStatus(p, 2)
            self.assertIn(words, p.stderr)

    def test_json(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "out.json")
            self.assertStatus(gradcheck("tanh", "--fast", "--out-file", path), 0)
            with open(path) as f:
                doc = json.load(f)
        self.assertEqual(doc["mode"], "fast")
        self.assertEqual(doc["failed"], 0)
        row = next(r for r in doc["rows"] if r["name"] == "tanh")
        checks = [c["name"] for c in row["first_order"]["checks"]]
        self.assertIn("zero grad_output gives zero gradients", checks)
        self.assertIn("inputs unchanged by forward and backward", checks)
        self.assertEqual(row["first_order"]["inputs"][0]["method"], "fast")
        self.assertTrue(row["float32"]["ok"] and row["float32"]["ran"])
        p = gradcheck("tanh", "--json")
        self.assertStatus(p, 0)
        self.assertTrue(json.loads(p.stdout)["rows"])

    def test_plugin_rows(self):
        p = gradcheck("--plugin", PLUGIN, "--list")
        self.assertStatus(p, 0)
        self.assertIn("cubic/transposed  (elementwise)", p.stdout)
        p = gradcheck("--plugin", PLUGIN, "cubic", "scaled_rows")
        self.assertStatus(p, 0)
        self.assertRegex(p.stdout, r"ok\s+scaled_rows\s+max abs")
        self.assertRegex(p.stdout, r"ok\s+cubic/integer\s+error row")
        self.assertRegex(p.stdout, r"ok\s+cubic/values\s+golden row")
        self.assertStatus(gradcheck("--plugin", PLUGIN, "--compress", "cubic"), 0)

    def test_plugin_failing_row_exits_1_with_the_report(self):
        for mode in ([], ["--fast"], ["--compress"]):
            p = gradcheck("--plugin", PLUGIN, "cubic_wrong", *mode)
            self.assertStatus(p, 1)
            self.assertIn("FAIL  cubic_wrong", p.stdout)
            self.assertIn("FAIL  jacobian", p.stdout)
        self.assertIn("3 of 3 gradient elements differ", gradcheck("--plugin", PLUGIN, "cubic_wrong").stdout)

    def test_plugin_errors(self):
        p = gradcheck("--plugin", "/nonexistent/libmyops.so")
        self.assertStatus(p, 1)
        self.assertIn("plugin '/nonexistent/libmyops.so': no such file", p.stderr)
        libm = "/lib/x86_64-linux-gnu/libm.so.6"  # a shared library that is not a plugin
        if os.path.exists(libm):
            p = gradcheck("--plugin", libm)
            self.assertStatus(p, 1)
            self.assertIn("no function seqgrad_register_op_cases", p.stderr)
        with tempfile.NamedTemporaryFile(suffix=".so") as f:
            f.write(b"not a library")
            f.flush()
            p = gradcheck("--plugin", f.name)
            self.assertStatus(p, 1)
            self.assertIn("cannot load it", p.stderr)
        p = gradcheck("--plugin", PLUGIN, "softsign")
        self.assertStatus(p, 2)
        self.assertIn("no op or row named 'softsign' in plugin", p.stderr)


if __name__ == "__main__":
    SEQGRAD, PLUGIN = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    unittest.main(argv=[sys.argv[0]] + sys.argv[3:])
