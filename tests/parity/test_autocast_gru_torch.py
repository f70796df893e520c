#!/usr/bin/python3
"""What PyTorch 1.13's CPU autocast does to a GRU's recurrence (the claim in ops/ops.h,
recurrent_product): it does NOT keep h · W_hhᵀ in float32. nn.GRUCell under
torch.autocast("cpu", dtype=torch.bfloat16), with bf16-exact weights and input and a float32 state
h that bf16 cannot hold, equals bit for bit ATen's gru_cell (aten/src/ATen/native/RNN.cpp) written
out with h rounded to bf16 before the recurrent product, and differs from the same step with h
kept in float32. seqgrad keeps the recurrence in float32 for reasons of its own (ops.h says which).

    /usr/bin/python3 tests/parity/test_autocast_gru_torch.py
"""
import unittest

import torch

BF16 = torch.bfloat16


def bf(t):
    return t.to(BF16).to(torch.float32)


class AutocastGru(unittest.TestCase):
    def test_cpu_autocast_rounds_the_state_before_the_recurrent_product(self):
        torch.manual_seed(0)
        cell = torch.nn.GRUCell(16, 32)
        with torch.no_grad():
            for p in cell.parameters():
                p.copy_(bf(p))
        x = bf(torch.randn(4, 16))
        h = torch.randn(4, 32) * 0.7
        self.assertFalse(torch.equal(bf(h), h))  # the rounding of h is visible
        with torch.no_grad(), torch.autocast("cpu", dtype=BF16):
            got = cell(x, h)

        def gru_cell(hh):  # ATen's gru_cell under autocast: linear in bf16 (float32 sums), gates in bf16
            with torch.no_grad():
                gi = (x @ cell.weight_ih.t() + cell.bias_ih).to(BF16)
                gh = (hh @ cell.weight_hh.t() + cell.bias_hh).to(BF16)
                ir, iz, i_n = gi.chunk(3, 1)
                hr, hz, h_n = gh.chunk(3, 1)
                r, z = (hr + ir).sigmoid(), (hz + iz).sigmoid()
                n = (i_n + h_n * r).tanh()
                return (h - n) * z + n  # the float32 h promotes the last ops

        self.assertEqual(got.dtype, torch.float32)
        self.assertTrue(torch.equal(got, gru_cell(bf(h))))
        self.assertFalse(torch.equal(got, gru_cell(h)))


if __name__ == "__main__":
    unittest.main()
