"""The checker on verifiers written with torch: its global generator driven by the exact tier, a torch.Generator
handed in (`--rng torch`), tensors as inputs (`--arrays torch`), and torch reseeded from the checker's seed.

torch is not among the project's packages (the samplers and the model are NumPy), so these tests run where a user
has it installed and skip elsewhere, saying so.  They are exact checks: a correct verifier cannot fail them by
chance.  The inclusive coin `u <= ratio` must fail where the strict coin passes, and the unseeded verifier must
differ where the reseeded one repeats.
"""

import numpy as np
import pytest

from specref import mrs
from specref.proof import conform
from specref.proof.conform import globalrng
from specref.proof.vectors import ListedUniforms
from tests.proof.test_conform_globals import exact_tier

torch = pytest.importorskip("torch", reason="torch is not installed: the checker's torch paths are not tested here")
X, P, Q = np.array([1, 0]), np.full((2, 3), 1 / 3), np.array([[0.2, 0.3, 0.5]] * 3)  # two drafts, V = 3


def torch_global_chain(strict: bool):
    """A chain verifier in torch that draws from torch's global generator: coins from torch.rand, the residual's
    token and the bonus token from torch.multinomial, as many verifiers written for GPUs do."""
    def verify(x_draft, p, q):  # rng="none": it takes no generator
        x, p, q = torch.as_tensor(x_draft), torch.as_tensor(p), torch.as_tensor(q)
        for t in range(len(x)):
            u, ratio = torch.rand(1, dtype=torch.float64)[0], q[t, x[t]] / p[t, x[t]]
            if not (u < ratio if strict else u <= ratio):
                residual = torch.clamp(q[t] - p[t], min=0.0)
                w = residual if residual.sum() > 0 else q[t]
                return np.append(x_draft[:t], int(torch.multinomial(w / w.sum(), 1)[0]))
        return np.append(x_draft, int(torch.multinomial(q[len(x)], 1)[0]))
    return verify


def test_torch_global_draws_take_the_checkers_uniforms_and_are_restored():
    rand, multinomial = torch.rand, torch.multinomial
    with globalrng.driven(ListedUniforms([0.0, 0.3, 0.99, 1 - 1e-12])) as u:
        assert torch.rand(1).item() == 0.0  # u = 0 reaches the verifier: the edge the inclusive coin fails
        assert int(torch.multinomial(torch.tensor([0.5, 0.0, 0.5]), 1)[0]) == 0  # 0.3: in the first half
        assert int(torch.multinomial(torch.tensor([0.5, 0.0, 0.5]), 1)[0]) == 2  # 0.99: past the zero entry
        assert torch.rand(1, dtype=torch.float32).item() < 1.0  # rounded to float32, still below 1
        assert u.used == 4
        with pytest.raises(globalrng.NotDriven, match="generator of the verifier's own"):
            torch.rand(1, generator=torch.Generator().manual_seed(0))
    assert torch.rand is rand and torch.multinomial is multinomial  # restored


def test_an_inclusive_coin_from_torchs_global_generator_fails_the_exact_tier_and_a_strict_one_passes():
    inclusive = {c.name: c for c in exact_tier(torch_global_chain(strict=False), conform.Adapter(rng="none"), "token")}
    failed = [name for name, c in inclusive.items() if c.passed is False]
    assert failed and "exact tier not run" not in inclusive, [c.line() for c in inclusive.values()]
    checks = exact_tier(torch_global_chain(strict=True), conform.Adapter(rng="none"), "token")  # the negative control
    assert len(checks) == 3 and all(c.passed for c in checks), [c.line() for c in checks]


def test_a_torch_generator_handed_in_and_tensors_as_inputs():
    """`--rng torch --arrays torch`: the function gets torch tensors and a torch.Generator seeded by the checker;
    its draws are its own, so the exact tier is not run and the pass says so, and the same seed repeats a call."""
    def verify(x_draft, p, q, generator):
        assert all(isinstance(a, torch.Tensor) for a in (x_draft, p, q))
        coins = torch.rand(len(x_draft) + 1, generator=generator, dtype=torch.float64).numpy()
        return mrs.verify(x_draft.numpy(), p.numpy(), q.numpy(), ListedUniforms(list(coins)))  # K + 1 uniforms at most

    adapter = conform.Adapter(rng=lambda seed: torch.Generator().manual_seed(seed), array=torch.from_numpy)
    f = conform.adapt(verify, adapter, "token")
    outputs = [f(X, P, Q, np.random.default_rng(s)).tolist() for s in range(20)]
    assert outputs == [f(X, P, Q, np.random.default_rng(s)).tolist() for s in range(20)]
    assert len({tuple(o) for o in outputs}) > 1  # the seeds do reach the generator
    (check,) = exact_tier(verify, adapter, "token")
    assert check.name == "exact tier not run" and check.passed is None


def test_reseeding_reaches_torchs_global_generator():
    f = conform.adapt(torch_global_chain(strict=True), conform.Adapter(rng="none", reseed_globals=True), "token")
    g = conform.adapt(torch_global_chain(strict=True), conform.Adapter(rng="none"), "token")
    runs = [[f(X, P, Q, np.random.default_rng(s)).tolist() for s in range(30)] for _ in range(2)]
    assert runs[0] == runs[1]  # same seeds, same outputs
    torch.manual_seed(1)  # the negative control: without reseeding, torch's global state carries over
    first = [g(X, P, Q, np.random.default_rng(s)).tolist() for s in range(30)]
    assert first != [g(X, P, Q, np.random.default_rng(s)).tolist() for s in range(30)]


def test_the_commands_torch_options_build_a_torch_adapter(tmp_path):
    """`conform FILE:FUNCTION --rng torch --arrays torch` hands the function torch tensors and a torch.Generator."""
    import argparse

    from specref.apps import conform as command
    (tmp_path / "torch_verifier.py").write_text(
        "import torch\n\ndef verify(x_draft, p, q, generator):\n"
        "    assert isinstance(p, torch.Tensor) and isinstance(generator, torch.Generator)\n"
        "    return torch.cat([x_draft, torch.multinomial(q[len(x_draft)], 1, generator=generator)])\n")
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    args = parser.parse_args([f"{tmp_path / 'torch_verifier.py'}:verify", "--rng", "torch", "--arrays", "torch"])
    command.check_args(args)
    f = conform.adapt(args.function, args.adapter, "token")
    outputs = [f(X, P, Q, np.random.default_rng(s)).tolist() for s in range(20)]
    assert all(o[:2] == [1, 0] and o[2] in (0, 1, 2) for o in outputs) and len({o[2] for o in outputs}) > 1
    assert outputs == [f(X, P, Q, np.random.default_rng(s)).tolist() for s in range(20)]  # seeded by the checker
