"""reckon.torch sees a model's tensors as torch does (issue 53): every tensor
that affects the output agrees (BatchNorm's running statistics travel with
the replica), a non-finite value is refused naming the tensor and the
element, Parameters that share storage stay tied, a Parameter listed twice
counts once, half-precision parameters are refused saying what to do, and
torch.autocast works with float32 parameters.

Run by ctest with PYTHONPATH set to the build's python/ folder."""
import unittest

import torch

import reckon.torch
from torch_peers_test import run_two


def alone(module, node_id="solo", **options):
    """A peer that is a cluster of one (nothing to wait for)."""
    return reckon.torch.Peer(module, node_id=node_id, listen="127.0.0.1:0", peers=[],
                             bootstrap=True, threshold=options.pop("threshold", 1e-3),
                             failure_timeout_s=2.0, quiesce_timeout_s=30, **options)


def sgd_step(model, opt, x, y):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss


class ModelTensors(unittest.TestCase):
    def test_a_non_finite_value_is_refused_naming_the_tensor_and_the_element(self):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.ReLU(), torch.nn.Linear(6, 3))
        peer = alone(model)
        with torch.no_grad():
            model[2].weight[1, 4] = float("nan")
        before = [p.detach().clone() for p in model.parameters()]
        with self.assertRaises(ValueError) as refused:
            peer.step()
        self.assertIn("2.weight[1, 4] is nan", str(refused.exception))
        self.assertEqual(peer.steps, 0)  # nothing published
        for p, b in zip(model.parameters(), before):
            self.assertTrue(torch.equal(p.nan_to_num(7.0), b.nan_to_num(7.0)))
        with torch.no_grad():
            model[0].bias[5] = float("inf")
            model[2].weight[1, 4] = 0.0
        with self.assertRaises(ValueError) as refused:
            peer.step()
        self.assertIn("0.bias[5] is inf", str(refused.exception))
        with torch.no_grad():
            model[0].bias[5] = 0.0
        peer.step()
        self.assertEqual(peer.steps, 1)

    def test_parameters_that_share_storage_stay_tied(self):
        class Tied(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.embed = torch.nn.Embedding(10, 4)
                self.head = torch.nn.Linear(4, 10, bias=False)
                # Two distinct Parameters over one storage (as a model that
                # ties an embedding to its output layer by storage).
                self.head.weight = torch.nn.Parameter(self.embed.weight.data)

            def forward(self, t):
                return self.head(self.embed(t))

        torch.manual_seed(0)
        model = Tied()
        self.assertIsNot(model.embed.weight, model.head.weight)
        peer = alone(model, threshold=1e-4)
        self.assertEqual(peer.param_count, 40)  # the shared storage once
        self.assertIn("head.weight=embed.weight", peer.layout)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        t = torch.randint(0, 10, (32,), generator=torch.Generator().manual_seed(1))
        for _ in range(10):
            sgd_step(model, opt, t, t)
            peer.step()
            self.assertTrue(torch.equal(model.embed.weight, model.head.weight))
            self.assertEqual(model.embed.weight.data_ptr(), model.head.weight.data_ptr())
        peer.finish()

    def test_storage_shared_in_part_is_refused_naming_both(self):
        base = torch.nn.Parameter(torch.zeros(4, 4))
        part = torch.nn.Parameter(base.data[1:3])
        with self.assertRaises(ValueError) as refused:
            alone([("base", base), ("part", part)])
        self.assertIn("'part' and 'base'", str(refused.exception))
        self.assertIn("overlap", str(refused.exception))

    def test_a_parameter_listed_twice_counts_once(self):
        torch.manual_seed(0)
        model = torch.nn.Linear(3, 2)
        named = list(model.named_parameters())
        peer = alone(named + [("again", model.weight)])
        self.assertEqual(peer.param_count, 8)
        self.assertEqual(peer.layout, "weight:2x3;bias:2")

    def test_half_precision_parameters_are_refused_saying_what_to_do(self):
        for dtype in (torch.bfloat16, torch.float16):
            model = torch.nn.Linear(3, 2).to(dtype)
            with self.assertRaises(ValueError) as refused:
                alone(model)
            message = str(refused.exception)
            self.assertIn(f"weight is {dtype}", message)
            self.assertIn("torch.autocast", message)

    def test_autocast_with_float32_parameters_steps(self):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                    torch.nn.Linear(16, 4))
        peer = alone(model, threshold=1e-4)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        g = torch.Generator().manual_seed(0)
        x, y = torch.randn(64, 8, generator=g), torch.randint(0, 4, (64,), generator=g)
        losses = []
        for _ in range(30):
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                logits = model(x)
            self.assertEqual(logits.dtype, torch.bfloat16)
            loss = torch.nn.functional.cross_entropy(logits.float(), y)
            loss.backward()
            opt.step()
            peer.step()
            losses.append(float(loss))
        self.assertTrue(all(p.dtype == torch.float32 for p in model.parameters()))
        self.assertLess(losses[-1], losses[0])
        self.assertGreater(peer.updates_sent, 0)
        peer.finish()

    def test_batchnorm_running_statistics_travel_with_the_replica(self):
        # A cluster of one: the buffers are in the layout, and what the
        # training steps do to them is in the replica.
        def train(with_peer):
            torch.manual_seed(0)
            model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
            peer = alone(model, threshold=1e-4) if with_peer else None
            opt = torch.optim.SGD(model.parameters(), lr=0.01)
            x = 3 * torch.randn(32, 4, generator=torch.Generator().manual_seed(0)) + 5
            for _ in range(5):
                opt.zero_grad()
                model(x).pow(2).mean().backward()
                opt.step()
                if peer:
                    peer.step()
            return model, peer

        model, peer = train(True)
        self.assertEqual(peer.layout,
                         "0.weight:3x4;0.bias:3;1.weight:3;1.bias:3;"
                         "1.running_mean:3;1.running_var:3")
        plain, _ = train(False)
        # The statistics are in the replica and move as every value of it
        # does: towards where plain torch's went, by at most one +-tau a
        # step (docs/pytorch.md "Buffers").
        for name, start in (("running_mean", 0.0), ("running_var", 1.0)):
            got, want = getattr(model[1], name) - start, getattr(plain[1], name) - start
            self.assertGreater(float(want.abs().min()), 5 * 1e-4, (name, want))
            self.assertTrue(torch.equal(got.sign(), want.sign()), (name, got, want))
            self.assertTrue(torch.allclose(got.abs(), torch.full_like(got, 5 * peer.threshold),
                                           rtol=1e-4, atol=0), (name, got))
        peer.finish()

    def test_a_torchrun_environment_that_is_not_one_is_refused_by_name(self):
        env = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": "29500"}
        for change, why in (({"RANK": None}, "RANK unset"),
                            ({"RECKON_PORT": "seventy"}, "RECKON_PORT='seventy' is not a number"),
                            ({"RECKON_PORT": "70000"}, "RECKON_PORT 70000 + LOCAL_RANK 0")):
            given = {k: v for k, v in {**env, **change}.items() if v is not None}
            with self.assertRaises(ValueError) as refused:
                reckon.torch.from_torchrun(given)
            self.assertIn(why, str(refused.exception))

    def test_buffers_a_model_rebuilds_stay_out_and_a_non_finite_buffer_is_named(self):
        class Masked(torch.nn.Module):
            def __init__(self, persistent):
                super().__init__()
                self.linear = torch.nn.Linear(4, 4)
                # A causal mask (-inf above the diagonal), as a transformer
                # registers one: derived, not state, unless persistent.
                self.register_buffer("mask", torch.full((4, 4), float("-inf")).triu(1),
                                     persistent=persistent)

        peer = alone(Masked(persistent=False))
        self.assertEqual(peer.layout, "linear.weight:4x4;linear.bias:4")
        peer.step()
        with self.assertRaises(ValueError) as refused:
            alone(Masked(persistent=True), node_id="solo2")
        self.assertIn("mask[0, 1] is -inf", str(refused.exception))

    def test_a_batchnorm_with_a_cumulative_average_is_refused(self):
        model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3, momentum=None))
        with self.assertRaises(ValueError) as refused:
            alone(model)
        self.assertIn("1 (BatchNorm1d) has momentum=None", str(refused.exception))

    def test_two_batchnorm_peers_end_with_identical_eval_mode_outputs(self):
        results = run_two(["--model", "bn"])
        a, b = results
        self.assertEqual(a["weight_hash"], b["weight_hash"])
        self.assertGreater(a["accuracy"], 0.6, a)
        self.assertEqual(a["predictions"], b["predictions"])
        self.assertEqual(a["logits_sum"], b["logits_sum"])
        print(f"FIGURES batchnorm peers: accuracy {a['accuracy']:.4f} and {b['accuracy']:.4f}, "
              f"eval-mode outputs identical")


if __name__ == "__main__":
    unittest.main()
