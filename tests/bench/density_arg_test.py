#!/usr/bin/env python3
"""The Rice bench programs (tests/bench/rice_chains.cc, rice_streams.cc) take
one argument, the density of updates: anything that is not a number in
[1e-6, 1] (the generator draws in millionths) is refused by name, exit 2,
before any work; with none they run at 0.003. Usage: density_arg_test.py BIN..."""
import subprocess
import sys
import unittest

BINARIES = sys.argv[1:]


class DensityArgument(unittest.TestCase):
    def test_a_density_outside_the_range_or_not_a_number_is_refused_by_name(self):
        for binary in BINARIES:
            for arg in ["abc", "0", "-1", "2", "1e-9", "0.01x", "nan", ""]:
                with self.subTest(binary=binary, arg=arg):
                    out = subprocess.run([binary, arg], capture_output=True, text=True,
                                         timeout=60)
                    self.assertEqual(out.returncode, 2, out.stdout + out.stderr)
                    self.assertIn(f"density '{arg}': a number from 1e-06 to 1", out.stderr)
                    self.assertEqual(out.stdout, "")

    def test_two_arguments_are_refused(self):
        for binary in BINARIES:
            with self.subTest(binary=binary):
                out = subprocess.run([binary, "0.01", "0.02"], capture_output=True, text=True,
                                     timeout=60)
                self.assertEqual(out.returncode, 2, out.stdout + out.stderr)
                self.assertIn("usage:", out.stderr)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
