"""`pip install ./python` into a fresh venv beside Debian's torch (issue 53):
offline (--no-index, --no-build-isolation: Debian's setuptools), the
module built by the project's CMake in the suite's build tree
(RECKON_BUILD_DIR, so nothing is compiled again), and the venv's Python
imports reckon.torch from the venv and trains a peer with it.

Run by ctest with RECKON_BUILD_DIR set to the build tree."""
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")

PEER = """
import torch, reckon, reckon.torch
torch.manual_seed(0)
model = torch.nn.Linear(4, 2)
peer = reckon.torch.Peer(model, node_id="v0", listen="127.0.0.1:0", peers=[], bootstrap=True,
                         threshold=1e-3, failure_timeout_s=2.0, quiesce_timeout_s=30)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(5):
    opt.zero_grad()
    model(torch.ones(8, 4)).pow(2).mean().backward()
    opt.step()
    peer.step()
peer.finish()
print(reckon.__file__)
print(peer.steps, peer.updates_sent)
"""


class VenvInstall(unittest.TestCase):
    def test_pip_installs_reckon_into_a_fresh_venv_offline(self):
        build = os.environ.get("RECKON_BUILD_DIR")
        self.assertTrue(build, "RECKON_BUILD_DIR (the CMake build tree) is not set")
        venv = os.path.join(tempfile.mkdtemp(prefix="reckon-venv-"), "venv")
        subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", venv],
                       check=True)
        pip = subprocess.run([os.path.join(venv, "bin", "pip"), "install", "--no-build-isolation",
                              "--no-index", os.path.join(ROOT, "python")],
                             capture_output=True, text=True, timeout=900,
                             env=dict(os.environ, RECKON_BUILD_DIR=build))
        self.assertEqual(pip.returncode, 0, pip.stdout[-3000:] + pip.stderr[-3000:])
        self.assertIn("Successfully installed reckon", pip.stdout)
        ran = subprocess.run([os.path.join(venv, "bin", "python"), "-c", PEER],
                             capture_output=True, text=True, timeout=120,
                             cwd=tempfile.gettempdir(),
                             env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
        self.assertEqual(ran.returncode, 0, ran.stderr[-3000:])
        where, counts = ran.stdout.strip().splitlines()[-2:]
        self.assertTrue(where.startswith(os.path.realpath(venv)) or where.startswith(venv), where)
        steps, updates = map(int, counts.split())
        self.assertEqual(steps, 5)
        self.assertGreater(updates, 0)


if __name__ == "__main__":
    unittest.main()
