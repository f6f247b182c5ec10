"""The exercises' graders (specref.lessons.exercises): every answer in notebooks/solutions/ passes, known wrong
answers fail with their diagnosis, broken functions fail cleanly, and the gallery of shipped mistakes fails where
the correct pipeline passes.

Times: each check's wall time is printed (-s shows them); a check is meant to take under 10 s on a busy 2-core
machine (about 1 s when idle).  Nothing here asserts a time: a shared machine can be slow for reasons of its own,
and the times that count are the ones the executed notebooks print beside each grade.
"""

import copy
import importlib.util
import math
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import nbformat
import numpy as np
import pytest
from nbclient import NotebookClient

from specref import mrs
from specref.proof import power, stats
from specref.proof.bugs import broken
from specref.proof.bugs import tree as tree_bugs
from specref.lessons import exercises
from tests.apps.test_notebook_code import notebook_cell
from tests.smollm2.test_tree_attention import tiny_model

ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS = ROOT / "notebooks" / "solutions"


def solution(name: str):
    """The function `name` of notebooks/solutions/name.py (the notebooks import it from their own directory)."""
    spec = importlib.util.spec_from_file_location(f"solutions_{name}", SOLUTIONS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


def timed(check, f):
    start = time.perf_counter()
    result = check(f)
    seconds = time.perf_counter() - start
    print(f"{check.__name__}({getattr(f, '__name__', f)!s}): {seconds:.2f} s")
    return result


TINY = tiny_model()  # 2 layers, V = 50: the rollback exercise's model here (notebook 05 hands it SmolLM2-135M)


def check_roll_back(f):
    return exercises.check_roll_back(f, TINY)


CHECKS = {"verify": exercises.check_verify, "residual": exercises.check_residual,
          "expected_tokens": exercises.check_expected_tokens, "block_weights": exercises.check_block_weights,
          "predicted_speedup": exercises.check_predicted_speedup, "chi_square": exercises.check_chi_square,
          "roll_back": check_roll_back, "tree_topk": exercises.check_tree_topk}


# ---------------------------------------------------------------- the answers pass

@pytest.mark.parametrize("name", list(CHECKS))
def test_each_solution_passes_its_grader(name, capsys):
    result = timed(CHECKS[name], solution(name))
    out = capsys.readouterr().out
    assert result and result.passed and result.diagnosis == "", result
    assert out.splitlines()[0] == repr(result) == result.verdict  # the verdict, printed once
    assert repr(result).startswith("pass: ")


@pytest.mark.default_cases("expected_tokens")  # verify's takes 5 s; test_each_solution_passes_its_grader runs it
@pytest.mark.parametrize("name", ["residual", "expected_tokens", "verify"])
def test_a_verdict_holds_no_timing_and_repeats_exactly(name):
    # notebooks are committed with their outputs and re-executed by the suite: the line must not change
    first, second = (CHECKS[name](solution(name)).verdict for _ in range(2))
    assert first == second and " s)" not in first


def test_solutions_are_plain_numpy_with_a_docstring():
    for name in CHECKS:
        text = (SOLUTIONS / f"{name}.py").read_text()
        assert "specref" not in text.replace(f"exercises.check_{name}", ""), f"{name}.py should not import specref"
        assert f"exercises.check_{name}" in text.splitlines()[0], f"{name}.py: its docstring names its exercise"


def test_the_library_passes_too():
    assert timed(exercises.check_verify, mrs.verify)


def verify_with_choice(x_draft, p, q, rng):  # the usual NumPy idiom: rng.choice(V, p=...) draws by the inverse CDF
    K, V = p.shape
    out = []
    for t in range(K):
        x = int(x_draft[t])
        if rng.random() < min(1.0, q[t, x] / p[t, x]):
            out.append(x)
            continue
        r = np.maximum(q[t] - p[t], 0.0)
        out.append(int(rng.choice(V, p=r / r.sum() if r.sum() > 0 else q[t])))
        return np.array(out)
    return np.array(out + [int(rng.choice(V, p=q[K]))])


def test_rng_choice_is_a_correct_way_to_draw():
    result = timed(exercises.check_verify, verify_with_choice)
    assert result, result
    assert "13 vectors" in result.verdict and "exact law on 7 cases" in result.verdict


# ---------------------------------------------------------------- wrong answers, with their diagnoses

# The mistakes the brief of the exercises names, each with the words its diagnosis must contain.
NAMED = [(broken.resample_from_q, "resamples from q instead of the residual"), (broken.no_bonus, "no bonus token"),
         (exercises.argmax_draws, "argmax instead of sampling"), (broken.one_uniform_reused, "reuses one uniform"),
         (broken.residual_only_rejected_entry, "residual adjusted only at the rejected token (EAGLE #20)"),
         (exercises.letters_swapped, "p and q swapped")]


@pytest.mark.parametrize("bug, words", NAMED, ids=[b.name for b, _ in NAMED])
def test_named_verify_mistakes_fail_with_their_diagnosis(bug, words):
    result = timed(exercises.check_verify, bug)
    assert not result and words in result.diagnosis, result
    assert result.verdict == f"FAIL: {result.check}: {result.diagnosis}"


@pytest.mark.slow_cases("draft_filter_not_passed", "target_not_warped")
@pytest.mark.parametrize("bug, label", exercises.VERIFY_MISTAKES, ids=[b.name for b, _ in exercises.VERIFY_MISTAKES])
def test_every_known_verify_mistake_is_named(bug, label):
    result = timed(exercises.check_verify, bug)
    assert not result and result.diagnosis.startswith(label), result


def inclusive_accept(x_draft, p, q, rng):  # u <= q/p: keeps a draft with q(x) = 0 when u = 0
    out = []
    for t, x in enumerate(x_draft):
        if rng.random() <= q[t, x] / p[t, x]:
            out.append(int(x))
            continue
        r = np.maximum(q[t] - p[t], 0.0)
        return np.array(out + [mrs.sample(r if r.sum() > 0 else q[t], rng)])
    return np.array(out + [mrs.sample(q[len(x_draft)], rng)])


def unguarded_residual(x_draft, p, q, rng):  # divides max(0, q - p) by its sum: NaN when it is all zero
    V = p.shape[1]
    out = []
    for t, x in enumerate(x_draft):
        if rng.random() < q[t, x] / p[t, x]:
            out.append(int(x))
            continue
        r = np.maximum(q[t] - p[t], 0.0)
        return np.array(out + [int(rng.choice(V, p=r / r.sum()))])
    return np.array(out + [int(rng.choice(V, p=q[len(x_draft)]))])


def uniforms_up_front(x_draft, p, q, rng):  # vLLM's order: all K accept uniforms first (the law is right)
    K = len(x_draft)
    u = rng.random(K)
    out = []
    for t in range(K):
        x = int(x_draft[t])
        if u[t] < q[t, x] / p[t, x]:
            out.append(x)
            continue
        r = np.maximum(q[t] - p[t], 0.0)
        return np.array(out + [mrs.sample(r if r.sum() > 0 else q[t], rng)])
    return np.array(out + [mrs.sample(q[K], rng)])


def residual_drawn_backwards(x_draft, p, q, rng):  # the inverse CDF over the tokens in reverse: the law is right
    out = []
    for t, x in enumerate(x_draft):
        if rng.random() < q[t, x] / p[t, x]:
            out.append(int(x))
            continue
        r = np.maximum(q[t] - p[t], 0.0)
        r = (r if r.sum() > 0 else q[t])[::-1]
        return np.array(out + [len(r) - 1 - mrs.sample(r, rng)])
    return np.array(out + [mrs.sample(q[len(x_draft)], rng)])


def global_generator(x_draft, p, q, rng):  # randomness from a fresh generator, not from rng
    return mrs.verify(x_draft, p, q, np.random.default_rng())


def reseeded(x_draft, p, q, rng):  # a generator made (and seeded) inside: the same coins every call
    return mrs.verify(x_draft, p, q, np.random.default_rng(0))


@pytest.mark.parametrize("f, check, words", [
    (inclusive_accept, "edge q(x) = 0, u = 0", "SGLang #35771"),
    (unguarded_residual, "edge all-zero residual", "probabilities contain NaN"),
    (uniforms_up_front, "vectors", "the law is exact (enumerated) and passes the chi-square"),
    (global_generator, "randomness", "the same uniforms gave different tokens"),
    (reseeded, "randomness", "never draws from the rng it is handed"),
])
def test_verify_mistakes_outside_the_law(f, check, words):
    result = timed(exercises.check_verify, f)
    assert not result and result.check == check and words in result.diagnosis, result


@pytest.mark.parametrize("label, wrong", exercises.RESIDUAL_MISTAKES, ids=range(len(exercises.RESIDUAL_MISTAKES)))
def test_residual_mistakes_are_named(label, wrong):
    result = timed(exercises.check_residual, wrong)
    assert not result and result.diagnosis.startswith(label), result


@pytest.mark.parametrize("label, wrong", exercises.EXPECTED_MISTAKES, ids=range(len(exercises.EXPECTED_MISTAKES)))
def test_expected_tokens_mistakes_are_named(label, wrong):
    result = timed(exercises.check_expected_tokens, wrong)
    assert not result and result.diagnosis.startswith(label), result


def test_expected_tokens_without_the_alpha_one_branch():
    for f, words in ((lambda a, g: (1 - a ** (g + 1)) / (1 - a), "raised ZeroDivisionError"),
                     (lambda a, g: np.float64(1 - a ** (g + 1)) / np.float64(1 - a), "returned nan")):
        result = timed(exercises.check_expected_tokens, f)
        assert not result and result.check == "alpha = 1" and words in result.diagnosis, result
        assert "gamma + 1" in result.diagnosis


@pytest.mark.parametrize("label, wrong", exercises.BLOCK_MISTAKES, ids=range(len(exercises.BLOCK_MISTAKES)))
def test_block_weights_mistakes_are_named(label, wrong):
    result = timed(exercises.check_block_weights, wrong)
    assert not result and result.diagnosis.startswith(label), result
    assert "from the target's law in total variation" in result.diagnosis


def test_block_weights_without_w0():
    result = timed(exercises.check_block_weights, lambda x, p, q: solution("block_weights")(x, p, q)[1:])
    assert not result and "w_0 is missing" in result.diagnosis, result


# ---------------------------------------------------------------- broken functions fail cleanly

def raises(*args):
    raise KeyError("oops")


def returns_nan(*args):
    return np.array([np.nan, np.nan])


@pytest.mark.parametrize("name, f, words", [
    ("verify", raises, "raised KeyError"),
    ("verify", returns_nan, "NaN"),
    ("verify", lambda x, p, q, rng: mrs.verify(x, p, q, rng)[None], "shape (1,"),
    ("verify", lambda x, p, q, rng: mrs.verify(x, p, q, rng).astype(float), "dtype float64"),
    ("verify", lambda x, p, q, rng: np.array([p.shape[1]]), "outside the vocabulary"),
    ("verify", lambda x, p, q, rng: np.arange(len(x) + 2), "tokens for K = 2"),
    ("verify", lambda x, p, q, rng: "tokens", "shape ()"),
    ("residual", raises, "raised KeyError"),
    ("residual", lambda p, q: np.full_like(p, np.nan), "NaN"),
    ("residual", lambda p, q: np.maximum(q - p, 0)[None], "shape (1, 4)"),
    ("residual", lambda p, q: None, "shape ()"),
    ("expected_tokens", raises, "raised KeyError"),
    ("expected_tokens", lambda a, g: float("nan"), "returned nan"),
    ("expected_tokens", lambda a, g: np.ones(3), "shape (3,)"),
    ("expected_tokens", lambda a, g: "three", "expected one number"),
    ("block_weights", raises, "raised KeyError"),
    ("block_weights", lambda x, p, q: np.full(len(x) + 1, np.nan), "NaN"),
    ("block_weights", lambda x, p, q: np.ones((len(x) + 1, 1)), "shape (4, 1)"),
])
def test_a_broken_function_fails_with_a_clear_message(name, f, words, capsys):
    result = timed(CHECKS[name], f)
    lines = capsys.readouterr().out.splitlines()
    assert not result and words in result.diagnosis, result
    assert lines[0] == result.verdict and lines[0].startswith("FAIL: ")


def test_a_function_that_changes_its_inputs_fails():
    def in_place(p, q):
        q -= p
        np.maximum(q, 0.0, out=q)
        return q / q.sum() if q.sum() > 0 else q
    result = timed(exercises.check_residual, in_place)
    assert not result and "changes its input q in place" in result.diagnosis, result


def test_an_endless_loop_fails_within_its_time_limit(monkeypatch):
    monkeypatch.setattr(exercises.grading, "CALL_LIMIT", 0.5)  # the limit _grade reads

    def loops(x_draft, p, q, rng):
        while True:
            pass
    result = timed(exercises.check_verify, loops)
    assert not result and result.check == "time limit" and result.seconds < 5, result


def test_warnings_and_prints_are_held_back(capsys):
    def noisy(p, q):
        print("debugging output")
        return np.maximum(q - p, 0.0) / np.maximum(q - p, 0.0).sum()  # 0 / 0 warns at p == q
    result = exercises.check_residual(noisy)
    captured = capsys.readouterr()
    assert captured.out == result.verdict + "\n" and captured.err == ""


# ---------------------------------------------------------------- the gallery

def test_show_mistakes_the_correct_pipeline_passes_and_every_mistake_fails(capsys):
    start = time.perf_counter()
    table = exercises.show_mistakes()
    seconds = time.perf_counter() - start
    print(f"show_mistakes: {seconds:.2f} s")
    shown = repr(table).splitlines()
    assert capsys.readouterr().out.splitlines()[:len(shown)] == shown  # printed once, before the time above
    rows = {r.name: r for r in table.rows}
    assert list(rows) == ["correct"] + [m.name for m in exercises.MISTAKES]
    assert rows["correct"].passed and rows["correct"].diagnosis == ""
    for m in exercises.MISTAKES:
        row = rows[m.name]
        assert not row.passed and row.pvalue < 1e-20, row
        assert row.diagnosis == f"fits {m.name}", row  # the counts fit that mistake's own exact law


def test_gallery_laws_are_exact_and_far_apart():
    reference = exercises.plain_law()
    assert sum(reference.values()) == pytest.approx(1.0, abs=1e-12)
    assert stats.total_variation(exercises.pipeline_law(exercises.CORRECT), reference) < 1e-12  # Theorem 1
    lams = {}
    for m in exercises.MISTAKES:
        law = exercises.pipeline_law(m)
        assert sum(law.values()) == pytest.approx(1.0, abs=1e-12)
        lams[m.name] = power.noncentrality(law, reference, exercises.N_GALLERY)[0]
    print({k: round(v) for k, v in lams.items()})
    assert min(lams.values()) > 250  # the module's comment: the weakest, one_uniform_reused, about 289


def test_the_gallery_covers_the_named_mistakes():
    where = " ".join(m.where for m in exercises.MISTAKES)
    for cited in ("jaymody/speculative-sampling #3", "transformers #47932", "vLLM #9834", "EAGLE #20", "#36"):
        assert cited in where
    assert {m.name for m in exercises.MISTAKES if m.around} == {"greedy_draft_softmax_ratio", "draft_filter_not_passed",
                                                                "target_not_warped"}
    assert all(m.verifier is mrs.verify for m in exercises.MISTAKES if m.around)


@pytest.mark.slow_cases("draft_filter_not_passed", "target_not_warped")
@pytest.mark.parametrize("m", exercises.MISTAKES, ids=[m.name for m in exercises.MISTAKES])
def test_each_mistake_in_one_call_fails_check_verify(m):
    result = timed(exercises.check_verify, m)
    assert not result, result


# ---------------------------------------------------------------- the verdict in a notebook, and no model code

def test_a_cell_ending_with_a_check_shows_its_verdict_once():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in (
        "from specref.lessons import exercises\n"
        "def expected_tokens(alpha, gamma):\n"
        "    return gamma + 1.0 if alpha == 1 else (1 - alpha ** (gamma + 1)) / (1 - alpha)",
        "exercises.check_expected_tokens(expected_tokens)",
        "result = exercises.check_expected_tokens(expected_tokens)",
        "result",
    )]
    client = NotebookClient(nb, timeout=120, kernel_name="python3", shutdown_kernel="immediate")
    client.execute(env={**os.environ, "PYTHONPATH": str(ROOT)})

    def shown(cell):
        texts = [o.get("text", "") for o in cell.outputs if o.output_type == "stream"]
        texts += [o["data"].get("text/plain", "") for o in cell.outputs if o.output_type == "execute_result"]
        return "".join(texts).splitlines()
    for i in (1, 2, 3):
        lines = shown(nb.cells[i])
        assert len(lines) == 1 and lines[0].startswith("pass: Eq. 1"), (i, lines)


def test_the_module_imports_no_model_code():
    code = ("import sys, specref.lessons.exercises; "
            "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] == 'gguf' "
            "or m.startswith(('specref.smollm2', 'specref.apps')))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout
    assert out.strip() == "", f"importing specref.lessons.exercises imported {out.split()}"


# ---------------------------------------------------------------- holes found by trying 46 wrong answers (issue 41)

def inverse_cdf(weights, u):  # the token whose step of the CDF of weights holds u
    c = np.cumsum(weights) / np.sum(weights)
    return min(int(np.searchsorted(c, u, side="right")), len(weights) - 1)


def residual_or_q(p_t, q_t):
    r = np.maximum(q_t - p_t, 0.0)
    return r if r.sum() > 0 else q_t


# hole 1: randomness the grader cannot control

def keeps_q_zero_with_integers(x_draft, p, q, rng):  # u <= q/p with u from rng.integers: keeps q(x) = 0 when u = 0
    out = []
    for t, x in enumerate(x_draft):
        if rng.integers(0, 2**53) / 2**53 <= q[t, x] / p[t, x]:
            out.append(int(x))
            continue
        return np.array(out + [inverse_cdf(residual_or_q(p[t], q[t]), rng.random())])
    return np.array(out + [inverse_cdf(q[len(x_draft)], rng.random())])


def accept_with_binomial(x_draft, p, q, rng):  # the accept test as a Bernoulli draw: the law is right
    out = []
    for t, x in enumerate(x_draft):
        if rng.binomial(1, min(1.0, q[t, x] / p[t, x])):
            out.append(int(x))
            continue
        return np.array(out + [inverse_cdf(residual_or_q(p[t], q[t]), rng.random())])
    return np.array(out + [inverse_cdf(q[len(x_draft)], rng.random())])


def accept_with_normal(x_draft, p, q, rng):  # u = Phi(z) for a standard normal z: a uniform, but not rng.random()
    out = []
    for t, x in enumerate(x_draft):
        u = 0.5 * math.erfc(-rng.standard_normal() / math.sqrt(2))
        if u < q[t, x] / p[t, x]:
            out.append(int(x))
            continue
        return np.array(out + [inverse_cdf(residual_or_q(p[t], q[t]), rng.random())])
    return np.array(out + [inverse_cdf(q[len(x_draft)], rng.random())])


def exponential_race(x_draft, p, q, rng):  # each draw is argmax(w / E), E = -log(1 - u) [V]: the law is right
    V = p.shape[1]
    out = []
    for t, x in enumerate(x_draft):
        if rng.random() < q[t, x] / p[t, x]:
            out.append(int(x))
            continue
        return np.array(out + [int(np.argmax(residual_or_q(p[t], q[t]) / -np.log1p(-rng.random(size=V))))])
    return np.array(out + [int(np.argmax(q[len(x_draft)] / -np.log1p(-rng.random(size=V))))])


def seeded_from_integers(x_draft, p, q, rng):  # a generator of its own, seeded from rng
    return mrs.verify(x_draft, p, q, np.random.default_rng(rng.integers(2**32)))


@pytest.mark.parametrize("f, calls", [(seeded_from_integers, "rng.integers"),
                                      (keeps_q_zero_with_integers, "rng.integers"),
                                      (accept_with_binomial, "rng.binomial"),
                                      (accept_with_normal, "rng.standard_normal"),
                                      (exponential_race, "paths")])
def test_randomness_the_grader_cannot_control_is_not_a_pass(f, calls):
    result = timed(exercises.check_verify, f)
    assert not result, result
    assert "not graded exactly: draw uniforms with rng.random()" in result.diagnosis, result
    assert calls in result.diagnosis, result


# hole 2: small residual entries, zero entries and ties

def drops_small_residual_entries(x_draft, p, q, rng):  # "numerical cleanup": entries below 0.01 zeroed, renormalised
    out = []
    for t, x in enumerate(x_draft):
        if rng.random() < q[t, x] / p[t, x]:
            out.append(int(x))
            continue
        r = residual_or_q(p[t], q[t])
        r = np.where(r / r.sum() < 0.01, 0.0, r)
        return np.array(out + [inverse_cdf(r, rng.random())])
    return np.array(out + [inverse_cdf(q[len(x_draft)], rng.random())])


def residual_dropping_small_entries(p, q):
    r = np.maximum(q - p, 0.0)
    if r.sum() == 0:
        return q.copy()
    r = np.where(r / r.sum() < 0.01, 0.0, r)
    return r / r.sum() if r.sum() > 0 else q.copy()


def test_the_exact_cases_hold_small_residual_entries_zeros_and_ties():
    from specref.lessons.exercises import residual as residual_module, verify as verify_module
    rows = [(c.p[t], c.q[t]) for c in verify_module.VERIFY_CASES for t in range(len(c.x_draft))]
    rows += [(p, q) for _, p, q in residual_module.RESIDUAL_CASES]
    for pairs, where in ((rows[:-len(residual_module.RESIDUAL_CASES)], "verify"),
                         (rows[-len(residual_module.RESIDUAL_CASES):], "residual")):
        entries = [residual_module._residual_exact(p, q) for p, q in pairs]
        assert min(v for r in entries for v in r if v > 0) < exercises.grading.F(1, 100), where
        assert any(0 in r and max(r) > 0 for r in entries), where
        assert any(len({v for v in r if v > 0}) < sum(1 for v in r if v > 0) for r in entries), where


def test_a_verify_that_drops_small_residual_entries_fails():
    result = timed(exercises.check_verify, drops_small_residual_entries)
    assert not result and result.check.startswith("exact law"), result
    assert "never returns" in result.diagnosis, result


def test_a_residual_that_drops_small_entries_fails():
    result = timed(exercises.check_residual, residual_dropping_small_entries)
    assert not result and result.check.startswith("exact, case 'small"), result


# hole 3: Eq. 1 on gamma up to 64 and on random alpha, near 0 and near 1

@pytest.mark.parametrize("f", [
    lambda a, g: g + 1.0 if a == 1 else 1 / (1 - a) if g > 10 else (1 - a ** (g + 1)) / (1 - a),  # the limit past 10
    lambda a, g: g + 1.0 if a > 0.999 else (1 - a ** (g + 1)) / (1 - a),  # alpha near 1 taken as 1
    lambda a, g: 1.0 if a < 1e-3 else g + 1.0 if a == 1 else (1 - a ** (g + 1)) / (1 - a),  # alpha near 0 taken as 0
    lambda a, g: g + 1.0 if a == 1 else sum(a ** i for i in range(min(g, 20) + 1)),  # a series cut at 20 terms
], ids=["limit_past_10", "near_1_as_1", "near_0_as_0", "series_cut_at_20"])
def test_eq1_is_checked_up_to_gamma_64_and_alpha_near_0_and_1(f):
    result = timed(exercises.check_expected_tokens, f)
    assert not result and result.check.startswith("Eq. 1"), result


# hole 4: decisions inside the grader's cells

def accept_uniform_reused(x_draft, p, q, rng):  # after a rejection (u - a) / (1 - a) is a fresh uniform: the law is right
    out = []
    for t, x in enumerate(x_draft):
        a = min(1.0, q[t, x] / p[t, x])
        u = rng.random()
        if u < a:
            out.append(int(x))
            continue
        return np.array(out + [inverse_cdf(residual_or_q(p[t], q[t]), (u - a) / (1 - a))])
    return np.array(out + [inverse_cdf(q[len(x_draft)], rng.random())])


def lenient(x_draft, p, q, rng):  # accepts iff u < q / (0.95 p): a lossy lenience
    out = []
    for t, x in enumerate(x_draft):
        if rng.random() < q[t, x] / (0.95 * p[t, x]):
            out.append(int(x))
            continue
        return np.array(out + [inverse_cdf(residual_or_q(p[t], q[t]), rng.random())])
    return np.array(out + [inverse_cdf(q[len(x_draft)], rng.random())])


def test_a_right_law_with_its_uniforms_used_otherwise_is_not_called_wrong():
    result = timed(exercises.check_verify, accept_uniform_reused)
    assert not result and result.check == "vectors", result
    assert "the law is exact (enumerated)" in result.diagnosis and "documented order" in result.diagnosis, result


def test_a_lossy_lenience_fails_the_exact_law():
    result = timed(exercises.check_verify, lenient)
    assert not result and result.check.startswith("exact law"), result
    assert "keeps draft" in result.diagnosis and "min(1, q/p)" in result.diagnosis, result


def test_residual_drawn_backwards_is_enumerated_exactly():
    result = timed(exercises.check_verify, residual_drawn_backwards)
    assert not result and result.check == "vectors" and "the law is exact (enumerated)" in result.diagnosis, result


def test_exact_law_cuts_the_cells_where_a_decision_switches():
    from specref.lessons.exercises import uniforms

    def two_thresholds(rng):  # switches at 0.3 and 0.7 + 1e-9 on the first uniform, 1/3 on the second: no edge there
        u = rng.random()
        return (u < 0.3, u < 0.7 + 1e-9 and rng.random() < 1 / 3)
    law = uniforms.exact_law(two_thresholds, [0.5])
    exact = {(True, True): 0.1, (True, False): 0.2, (False, True): (0.4 + 1e-9) / 3,
             (False, False): (0.4 + 1e-9) * 2 / 3 + 0.3 - 1e-9}
    assert set(law) == set(exact) and all(abs(law[k] - v) < 1e-12 for k, v in exact.items()), law


# hole 5: diagnoses that name what the answer did

def greedy_one_hot(x_draft, p, q, rng):  # keeps a draft iff it is the argmax of q; the uniforms are ignored
    out = []
    for t, x in enumerate(x_draft):
        if int(x) == int(np.argmax(q[t])):
            out.append(int(x))
            continue
        return np.array(out + [int(np.argmax(q[t]))])
    return np.array(out + [int(np.argmax(q[len(x_draft)]))])


def residual_float32(p, q):
    r = np.maximum(q.astype(np.float32) - p.astype(np.float32), np.float32(0))
    return (r / r.sum() if r.sum() > 0 else q.astype(np.float32)).astype(np.float64)


def min_on_the_carried_weight(x, p, q):  # w_i = min(1, w_{i-1}) q_i/p_i
    w = [1.0]
    for i, v in enumerate(x):
        w.append(min(1.0, w[-1]) * q[i, v] / p[i, v])
    return np.array(w)


def min_on_the_ratio(x, p, q):  # w_i = w_{i-1} min(1, q_i/p_i)
    w = [1.0]
    for i, v in enumerate(x):
        w.append(w[-1] * min(1.0, q[i, v] / p[i, v]))
    return np.array(w)


def test_a_greedy_shortcut_is_told_it_ignores_the_uniforms():
    result = timed(exercises.check_verify, greedy_one_hot)
    assert not result and "argmax" in result.diagnosis and "ignores the uniforms" in result.diagnosis, result
    assert "never draws from the rng it is handed" not in result.diagnosis, result


def test_a_float32_residual_is_shown_its_difference():
    result = timed(exercises.check_residual, residual_float32)
    assert not result and "float32" in result.diagnosis, result
    returned, expected = result.diagnosis.split("returned ")[1].split(", expected ")
    assert returned.split("]")[0] != expected.split("]")[0], result


@pytest.mark.parametrize("f, words", [(min_on_the_carried_weight, "min(1, w_{i-1}) q_i/p_i"),
                                      (min_on_the_ratio, "w_{i-1} min(1, q_i/p_i)")])
def test_a_misplaced_min_is_named(f, words):
    result = timed(exercises.check_block_weights, f)
    assert not result and words in result.diagnosis and "missing" not in result.diagnosis, result


# ---------------------------------------------------------------- notebook 00's and 03's exercises

def not_implemented(*args):  # a starter stub, as the notebooks hand it out
    raise NotImplementedError


@pytest.mark.parametrize("name", list(CHECKS))
def test_a_starter_stub_is_not_answered_yet(name):  # every grader, the older ones included
    result = timed(CHECKS[name], not_implemented)
    assert not result and result.check == "not answered yet", result
    assert "NotImplementedError" in result.diagnosis


def _eq1(a, g):
    return (1 - a ** (g + 1)) / (1 - a)


# Wrong answers a learner could write for notebook 00's exercise, with the words their diagnosis must contain.
WRONG_SPEEDUPS = [
    (lambda a, g, c, s: _eq1(a, g) / (g * c + 1), "Theorem 3.8", "divides by gamma c + 1"),
    (lambda a, g, c, s: (1 - a ** g) / (1 - a) / (g * c + s), "Theorem 3.8", "alpha**gamma where Eq. 1 has"),
    (lambda a, g, c, s: _eq1(a, g) / ((g + 1) * c + s), "Theorem 3.8", "prices gamma + 1 draft steps"),
    (lambda a, g, c, s: _eq1(a, g) / (g * c * s), "Theorem 3.8", "got"),  # no named mistake: the numbers
    (lambda a, g, c, s: _eq1(a, g) / (g * c + s), "alpha = 1", "raised ZeroDivisionError"),  # no alpha = 1 branch
    (lambda a, g, c, s: g / (g * c + s) if a == 1 else _eq1(a, g) / (g * c + s), "alpha = 1", "every draft is accepted"),
    # right on the chosen grid only: tokens capped at 8 per call (gamma > 8 drafts never help)
    (lambda a, g, c, s: (g + 1.0 if a == 1 else _eq1(a, min(g, 8))) / (g * c + s), "random settings", "got"),
]


@pytest.mark.parametrize("f, check, words", WRONG_SPEEDUPS, ids=range(len(WRONG_SPEEDUPS)))
def test_wrong_predicted_speedups_fail_with_their_diagnosis(f, check, words):
    result = timed(exercises.check_predicted_speedup, f)
    assert not result and result.check == check and words in result.diagnosis, result


@pytest.mark.parametrize("label, wrong", exercises.SPEEDUP_MISTAKES, ids=range(len(exercises.SPEEDUP_MISTAKES)))
def test_predicted_speedup_mistakes_are_named(label, wrong):
    result = timed(exercises.check_predicted_speedup, wrong)
    assert not result and result.diagnosis.startswith(label), result


def test_predicted_speedup_is_checked_on_edges_and_random_settings():
    # an answer right everywhere but at gamma = 0 (a call that drafts nothing) or at c = 0 fails
    sol = solution("predicted_speedup")
    for f in (lambda a, g, c, s: sol(a, max(g, 1), c, s), lambda a, g, c, s: sol(a, g, max(c, 1e-3), s)):
        result = timed(exercises.check_predicted_speedup, f)
        assert not result and result.check != "not answered yet", result


@pytest.mark.parametrize("label, wrong", exercises.CHI_SQUARE_MISTAKES, ids=range(len(exercises.CHI_SQUARE_MISTAKES)))
def test_chi_square_mistakes_are_named(label, wrong):
    result = timed(exercises.check_chi_square, wrong)
    assert not result and result.diagnosis.startswith(label), result


def pooled_by_count(counts, law):  # pools the outcomes SEEN fewer than 20 times, not those EXPECTED to be
    from scipy import stats as sps
    if any(law.get(k, 0) <= 0 for k in counts):
        return math.inf, 0, 0.0
    n = sum(counts.values())
    live = [k for k in law if law[k] > 0]
    rare = [k for k in live if counts.get(k, 0) < 20]
    bins = ([rare] if rare else []) + [[k] for k in live if k not in rare]
    if len(bins) < 2:
        return 0.0, 0, 1.0
    O = np.array([sum(counts.get(k, 0) for k in b) for b in bins], dtype=float)
    E = np.array([n * sum(law[k] for k in b) for b in bins])
    X2 = float(((O - E) ** 2 / E).sum())
    return X2, len(bins) - 1, float(sps.chi2.sf(X2, len(bins) - 1))


def scipy_without_pooling(counts, law):  # scipy.stats.chisquare on every outcome of the law
    from scipy import stats as sps
    n = sum(counts.values())
    keys = [k for k in law if law[k] > 0]
    r = sps.chisquare([counts.get(k, 0) for k in keys], [n * law[k] for k in keys])
    return r.statistic, len(keys) - 1, r.pvalue


def chi_square_without_forbidden_check(counts, law):  # right, except that a forbidden outcome is ignored
    return solution("chi_square")(Counter({k: v for k, v in counts.items() if law.get(k, 0) > 0}), law)


def chi_square_returning_dict(counts, law):
    return {"statistic": 1.0, "dof": 1, "p": 0.3}


@pytest.mark.parametrize("f, words", [
    (pooled_by_count, "statistic"),
    (scipy_without_pooling, "no pooling"),
    (chi_square_without_forbidden_check, "rejects at once"),
    (chi_square_returning_dict, "expected three numbers"),
], ids=["pooled by observed counts", "scipy without pooling", "forbidden outcome dropped", "a dict"])
def test_wrong_chi_squares_fail_with_their_diagnosis(f, words):
    result = timed(exercises.check_chi_square, f)
    assert not result and words in result.diagnosis, result


# ---------------------------------------------------------------- notebook 05's exercise: roll back the KV cache

@pytest.mark.parametrize("label, wrong", exercises.ROLL_BACK_MISTAKES, ids=range(len(exercises.ROLL_BACK_MISTAKES)))
def test_roll_back_mistakes_are_named(label, wrong):
    result = timed(check_roll_back, wrong)
    assert not result and result.diagnosis.startswith(label), result


def roll_back_minus_one(cache, drafts, out):  # the off-by-one of out's length, kept clear of rollback(-1)
    cache.rollback(max(0, len(drafts) - len(out)))


def roll_back_then_zero_the_keys(cache, drafts, out):  # the length right, the kept keys wiped
    solution("roll_back")(cache, drafts, out)
    for k in cache.k:
        k[:] = 0


def roll_back_a_copy(cache, drafts, out):  # leaves the cache it is handed as it was
    kept = copy.deepcopy(cache)
    solution("roll_back")(kept, drafts, out)
    return kept


def roll_back_and_trim(cache, drafts, out):  # cuts the arrays to the length, the capacity left as it was
    solution("roll_back")(cache, drafts, out)
    cache.h, cache.tokens = cache.h[:cache.length], cache.tokens[:cache.length]


def roll_back_and_clear_the_rest(cache, drafts, out):  # right: what lies past the length may be anything
    solution("roll_back")(cache, drafts, out)
    for k, v in zip(cache.k, cache.v):
        k[:, :, cache.length:], v[:, cache.length:] = 0, 0


@pytest.mark.parametrize("f, words", [
    (roll_back_minus_one, "length 9: the context, the 0 accepted drafts and 1 rejected draft"),
    (lambda cache, drafts, out: cache.rollback(len(drafts) - len(out)), "rolls back len(drafts) - len(out)"),
    (lambda cache, drafts, out: cache.rollback(len(drafts) - len(out) + 2), "one position too many"),
    (lambda cache, drafts, out: None, "does not roll back"),
    (lambda cache, drafts, out: cache.rollback(len(out) - 1), "rolls back the n accepted drafts"),
    (roll_back_then_zero_the_keys, "the keys of positions it keeps changed"),
    (roll_back_a_copy, "returned a cache and left the one it was handed unchanged"),
    (roll_back_and_trim, "shorter than its capacity"),
    (lambda cache, drafts, out: cache.rollback(len(drafts) - len(out) - 1), "and 2 rejected drafts ["),
], ids=["off by one, kept clear of -1", "off by one", "one too many", "no rollback", "the accepted count",
        "kept keys wiped", "a copy", "arrays trimmed", "two off"])
def test_wrong_roll_backs_fail_with_what_they_did(f, words):
    result = timed(check_roll_back, f)
    assert not result and result.check.startswith("case K = ") and words in result.diagnosis, result


def test_a_roll_back_that_clears_what_lies_past_the_length_passes():
    assert timed(check_roll_back, roll_back_and_clear_the_rest)


def test_check_roll_back_refuses_bad_input():
    with pytest.raises(TypeError, match="needs the model whose cache"):
        exercises.check_roll_back(solution("roll_back"), object())
    with pytest.raises(TypeError, match="takes your function first"):
        exercises.check_roll_back(TINY, solution("roll_back"))


# ---------------------------------------------------------------- notebook 08's exercise: the top-k tree verifier

def topk_variant(q_of=lambda row: row, scaled=True, recovered="q without the children", strict=True,
                 one_level=False, drop_small=False, last_uniform_first=False, uniform=lambda rng: rng.random()):
    """The top-k tree verifier as a learner could write it, with one thing changed (the defaults: the right one)."""
    def f(tokens, parents, p, q, rng):
        children = [[] for _ in range(len(tokens) + 1)]
        for i, j in enumerate(parents):
            children[j + 1].append(i)
        out, row = [], 0
        while True:
            u_last = uniform(rng) if last_uniform_first else None
            qr, rest, accepted = q[q_of(row)], 1.0, None
            for i in children[row]:
                x = int(tokens[i])
                u, ratio = uniform(rng), (qr[x] / rest if rest > 0 else np.inf) if scaled else qr[x]
                if u < ratio or (not strict and u <= ratio):
                    accepted = i
                    break
                rest -= qr[x]
            if accepted is not None:
                out.append(int(tokens[accepted]))
                row = accepted + 1
                if not one_level:
                    continue
                w = q[q_of(row)].copy()  # the walk stops: the bonus from the accepted child's row
            elif recovered == "q" or not children[row]:
                w = qr.copy()
            elif recovered == "residual":
                w = np.maximum(qr - p[row], 0.0)
            else:
                w = qr.copy()
                w[[int(tokens[i]) for i in children[row]]] = 0.0
            if drop_small:
                w[w < 0.01] = 0.0
            if not w.sum() > 0:  # the children held all of q's mass
                w = qr.copy()
            c = np.cumsum(w)
            u = u_last if last_uniform_first else uniform(rng)
            out.append(min(int(np.searchsorted(c, u * c[-1], side="right")), int(np.flatnonzero(w)[-1])))
            return np.array(out, dtype=np.int64)
    return f


def test_the_reference_variant_passes():  # the variants below differ from it in one thing only
    assert timed(exercises.check_tree_topk, topk_variant())


@pytest.mark.parametrize("f, check, words", [
    (topk_variant(q_of=lambda row: max(row - 1, 0)), "exact law", "reads the target row q[i] for node i"),
    (topk_variant(scaled=False), "exact law", "accepts c_i with probability q(c_i)"),
    (topk_variant(recovered="q"), "exact law", "draws the recovered token from q itself"),
    (topk_variant(recovered="residual"), "exact law", "the chain's residual"),
    (topk_variant(one_level=True), "exact law", "stops after the root's children"),
    (topk_variant(drop_small=True), "exact law", "a small entry dropped"),
    (topk_variant(strict=False), "edge q(c) = 0, u = 0", "accepted a child the target gives probability 0"),
    (topk_variant(last_uniform_first=True), "vectors", "the uniforms in the documented order"),
    (topk_variant(uniform=lambda rng: rng.integers(2**53) / 2**53), "exact law", "not graded exactly"),
    (lambda *args: topk_variant()(*args).astype(float), "contract", "dtype float64"),
], ids=["q[i] for node i", "not divided by the mass left", "recovered from q", "recovered from max(0, q - p)",
        "one level only", "small entries dropped", "u <= ratio", "last uniform first", "rng.integers", "floats"])
def test_wrong_tree_verifiers_fail_with_what_they_did(f, check, words):
    result = timed(exercises.check_tree_topk, f)
    assert not result and result.check.startswith(check) and words in result.diagnosis, result


@pytest.mark.default_cases("0")
@pytest.mark.parametrize("i", range(len(tree_bugs.BUGS["tree-topk"])), ids=str)
def test_the_shipped_tree_bugs_fail_the_tree_exercise(i):
    bug = tree_bugs.BUGS["tree-topk"][i]
    result = timed(exercises.check_tree_topk, bug)
    assert not result, (bug.name, result)


def test_check_tree_topk_refuses_bad_input():
    with pytest.raises(TypeError, match="takes your function"):
        exercises.check_tree_topk("verify_tree")


@pytest.mark.parametrize("name, needle", [("05_real_model", "def roll_back(cache, drafts, out):"),
                                          ("08_trees", "def my_verify_tree(tokens, parents, p, q, rng):")])
def test_the_exercise_cells_of_notebooks_05_and_08_hold_a_stub_not_answered_yet(name, needle, capsys):
    source = notebook_cell(name, needle)
    exec(compile(source, f"<notebook {name} exercise>", "exec"), {"model": TINY})
    assert capsys.readouterr().out.startswith("FAIL: not answered yet: "), source
