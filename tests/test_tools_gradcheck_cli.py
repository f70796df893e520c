#!/usr/bin/python3
"""End-to-end tests of `seqgrad gradcheck`: exit statuses (0 pass, 1 a failing row, 2 usage),
options, --json, --list (in-tree and plugin rows), float32 and bf16, kinks (--move-kinks), RNG
replay, the failure report's rerun command, and --plugin with the example plugin
(tests/test_tools_gradcheck_plugin.cpp), a missing file and a library without the entry point.

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

    def test_precisions_report_their_step_and_tolerances(self):
        p = gradcheck("softmax", "relu", "--dtype", "bf16")
        self.assertStatus(p, 0)
        self.assertIn("(full mode, bf16: eps 0.125, atol 0.01, rtol 0.01 or the row's where looser", p.stdout)
        p = gradcheck("logsumexp/large_values", "--dtype", "bf16")
        self.assertStatus(p, 0)
        self.assertRegex(p.stdout, r"skip\s+logsumexp/large_values\s+the row opts out of bf16")
        p = gradcheck("exp", "--dtype", "float32", "--rtol", "0.02")
        self.assertIn("float32: eps 0.01, atol 0.001, rtol 0.02", p.stdout)

    def test_usage_errors_exit_2(self):
        for args, words in [(["--fast", "--compress"], "exclude each other"),
                            (["--dtype", "float16"], "--dtype must be float64, float32 or bf16, got 'float16'"),
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

    def test_list_names_every_row_in_tree_and_plugin(self):
        p = gradcheck("--plugin", PLUGIN, "--list")
        self.assertStatus(p, 0)
        in_tree, plugin = p.stdout.split(f"plugin '{PLUGIN}': ")
        self.assertTrue(in_tree.startswith("the in-tree table: "))
        self.assertIn("  softmax/last  (rowwise, dim -1)\n", in_tree)
        self.assertIn("  relu/undefined\n", in_tree)
        self.assertIn("  cubic/transposed  (elementwise)\n", plugin)
        self.assertIn("  cubic/values\n", plugin)
        self.assertNotIn("cubic", in_tree)

    def test_failure_report_names_the_element_and_the_command_to_rerun(self):
        p = gradcheck("--plugin", PLUGIN, "--fast", "--no-float32", "cubic_wrong", "cubic")
        self.assertStatus(p, 1)
        self.assertRegex(p.stdout, r"worst at \(\d,\): numerical")
        self.assertRegex(p.stdout, r"tolerance [0-9.e-]+, input value ")
        rerun = f"rerun: seqgrad gradcheck --plugin {PLUGIN} --fast --no-float32 cubic_wrong\n"
        self.assertIn(rerun, p.stdout)
        # the command reruns that row alone, with the same result
        args = rerun.split()[3:]
        again = gradcheck(*args)
        self.assertStatus(again, 1)
        self.assertEqual([l for l in again.stdout.splitlines() if l.startswith(("ok", "FAIL"))][0].split()[:2],
                         ["FAIL", "cubic_wrong"])
        self.assertIn("0 of 1 rows passed", again.stdout)

    def test_kinks_reported_or_moved_and_random_ops_replayed(self):
        p = gradcheck("--plugin", PLUGIN, "relu_at_zero", "dropout")
        self.assertStatus(p, 0)
        # relu at 0, once in the first order and once in the second (the gradient jumps there too)
        self.assertRegex(p.stdout, r"ok\s+relu_at_zero\s+max abs .* 2 at kinks")
        self.assertRegex(p.stdout, r"ok\s+dropout\s+max abs")
        p = gradcheck("--plugin", PLUGIN, "relu_at_zero", "--move-kinks", "--json")
        self.assertStatus(p, 0)
        first = json.loads(p.stdout)["rows"][0]["first_order"]
        self.assertEqual(first["moved"], ["input 0 (1,): 0 -> 0.1"])
        self.assertEqual(first["inputs"][0]["kinks"], [])

    def test_undeclared_kink_fails_named_and_passes_moved(self):
        p = gradcheck("--plugin", PLUGIN, "relu_kink_undeclared")
        self.assertStatus(p, 1)
        self.assertRegex(p.stdout, r"FAIL\s+relu_kink_undeclared\s+first order: FAILED jacobian: input 0: a kink at "
                                   r"\(1,\) \(value 0\) that the op does not declare")
        self.assertIn("--move-kinks", p.stdout)
        self.assertStatus(gradcheck("--plugin", PLUGIN, "relu_kink_undeclared", "--move-kinks"), 0)

    def test_headline_names_the_failed_check_and_its_cause(self):
        # a backward that forgot sum_to on a broadcast weight: the shapes check, not a zero error
        p = gradcheck("--plugin", PLUGIN, "bias_wrong")
        self.assertStatus(p, 1)
        self.assertRegex(p.stdout, r"FAIL\s+bias_wrong\s+first order: FAILED gradient shapes and dtypes equal the "
                                   r"inputs': the backward gives a gradient of the wrong shape: bias_wrong backward: "
                                   r"gradient for input 1 has shape \(2, 3\), expected \(3,\)")
        self.assertIn("sum_to(g, x.shape())", p.stdout)
        self.assertNotIn("max abs 0.00e+00", p.stdout)
        doc = json.loads(gradcheck("--plugin", PLUGIN, "bias_wrong", "--json").stdout)
        self.assertTrue(doc["rows"][0]["first_order"]["headline"].startswith("FAILED gradient shapes"))

    def test_fast_mode_reports_its_projections(self):
        p = gradcheck("--plugin", PLUGIN, "cubic_wrong", "--fast", "--no-second-order", "--json")
        self.assertStatus(p, 1)
        inputs = json.loads(p.stdout)["rows"][0]["first_order"]["inputs"]
        # 3 elements: as few as the projections the miss rate needs, so checked in full
        self.assertEqual(inputs[0]["method"], "full")

    def test_plugin_rows(self):
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
