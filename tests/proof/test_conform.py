"""The conformance checker (specref.proof.conform) proven on verifiers whose truth is known.

It passes mrs.verify and mrs.verify_block (every check, full size, within the two minutes it
promises); its exact tier rejects every broken sampler of specref.proof.bugs.broken and every lossy
verifier and names it from its tokens on the vectors; its one-call chi-square (at the run's
Bonferroni level) rejects each of them and names it from the nearest exact law; its edge checks
catch a non-strict accept test and an unguarded all-zero residual; its adapter turns the common
other signatures into verify's.  Each chi-square runs at the family level / 11, printed and counted
so (a run at the family level is caught), the sequence checks compare with the target's law (a
sampler with the draft's law fails them), and a check too small to test anything (one bin, or
fewer than half of its known bugs seen) is not tested, making the run INCOMPLETE, not passed.  Its
false-alarm rate over fresh seeds is measured by `python3 -m tools.conform_false_alarm`.
"""

from collections import Counter

import numpy as np
import pytest

from specref import mrs, verifiers
from specref.proof import conform, laws, power, stats, vectors
from specref.proof.bugs import broken, shipped


# "name/algorithm" -> (a known bug, the algorithm it is checked as): every law the checker can name, from its
# own sampler (the lossy ones and each exact verifier checked as the other algorithm included).
KNOWN = conform.KNOWN_BUGS


def test_every_law_the_checker_can_name_is_tried():
    assert {(s.name, a) for a in verifiers.references(verifiers.CHAINS) for s in conform.SIGNATURES[a]} == \
        {(bug.name, algorithm) for bug, algorithm in KNOWN.values()}
    assert len(KNOWN) == 24 and len({bug.name for bug, _ in KNOWN.values()}) == 20


# ---------------------------------------------------------------- the reference passes, in time

@pytest.mark.slow  # 18-21 s each on a 2-core machine: the default suite stays under 5 minutes
@pytest.mark.parametrize("function, algorithm", [(mrs.verify, "token"), (mrs.verify_block, "block")])
def test_the_reference_verifiers_pass_every_check(function, algorithm):
    report = conform.check(function, algorithm=algorithm)
    print(report.text())
    assert report.passed, report.text()
    assert all(c.passed for c in report.checks)  # nothing skipped: the exact tier ran too
    assert len([c for c in report.checks if c.level is not None]) == 11
    assert all(c.level == pytest.approx(conform.FAMILY_LEVEL / 11) for c in report.checks if c.level is not None)
    # How long a run takes is a performance figure, not asserted here (machines are shared): the report prints it.


# ---------------------------------------------------------------- the run's levels, and what its sequence checks test

@pytest.fixture(scope="module")
def small_run():
    """mrs.verify checked at scale 0.02 (400 calls a one-call check, 120 sequences): about a second."""
    return conform.check(mrs.verify, scale=0.02)


def level_problems(report: conform.Report) -> list[str]:
    """What is wrong with a run's false-alarm levels: each of its 11 chi-square checks must run at the family level
    / 11 (Bonferroni), be decided, printed and counted in the coverage line at that level."""
    stat = [c for c in report.checks if c.level is not None]
    share = stats.LEVEL / 11
    problems = [] if len(stat) == 11 else [f"{len(stat)} chi-square checks, not 11"]
    for c in stat:
        if c.level != pytest.approx(share, rel=1e-12):
            problems.append(f"{c.name} at level {c.level:.3g}, not {share:.3g}")
        if f"level={share:.2g} " not in c.line():
            problems.append(f"{c.name} printed as {c.line()!r}")
        if c.pvalue is not None and c.passed is not None and c.passed != (c.pvalue > share):
            problems.append(f"{c.name} decided {c.passed} at p = {c.pvalue:g}")
    if f"each at level {stats.LEVEL:g} / 11: a correct verifier fails this run with probability about " \
       f"{stats.LEVEL:g} (the nominal rate" not in report.text() or "at most" in report.text().splitlines()[1]:
        problems.append("the header line states another level")
    exact_ran = {c.name for c in report.checks if c.tier == "exact" and c.passed is not None}
    yes, no = power.caught(report.algorithm, {c.name: c.samples for c in stat if not c.untested}, share, exact_ran)
    expected = f"95% power: {', '.join(yes) or 'none'}" + (f"; with less: {', '.join(no)}" if no else "")
    if expected not in report.coverage():
        problems.append(f"the coverage line is not computed at {share:g}: {report.coverage()}")
    return problems


def test_every_chi_square_runs_at_the_family_level_over_11_and_is_printed_so(small_run, monkeypatch):
    print(small_run.text())
    assert level_problems(small_run) == []
    # negative control: a checker that runs every chi-square at the family level (the false-alarm bound then about
    # 1.1e-2): its levels, printed lines and coverage line are all caught (made here by an 11 times larger family level)
    monkeypatch.setattr(conform.checks, "FAMILY_LEVEL", 11 * stats.LEVEL)  # where a run reads it
    wrong = conform.check(mrs.verify, scale=0.02)
    problems = level_problems(wrong)
    print("\n".join(problems))
    assert any("at level 0.001, not 9.09e-05" in p for p in problems)
    assert any("printed as" in p for p in problems) and any("coverage line" in p for p in problems)


def first_draft_only(x_draft, p, q, rng):
    """Returns the first draft as its one token: every call adds a token drawn from the draft's row, so whole
    sequences have the draft's law (shown exactly in tests/proof/test_laws.py)."""
    return np.asarray(x_draft[:1])


def test_the_sequence_check_compares_with_the_targets_law_not_the_drafts():
    level = conform.FAMILY_LEVEL / 11
    target = conform.sequence_check(conform.adapt(mrs.verify), 2, level, np.random.default_rng(3), runs=300)
    print(target.line())
    assert target.passed and target.pvalue > level and "dof=0 " not in target.detail  # it tested something
    # negative control: sequences with the draft's law fail it (they would pass a check against the draft's law)
    draft = conform.sequence_check(conform.adapt(first_draft_only), 2, level, np.random.default_rng(3), runs=300)
    print(draft.line())
    assert draft.passed is False and draft.pvalue < 1e-10


# ---------------------------------------------------------------- a check too small to test anything

def test_a_check_pooled_to_one_bin_is_not_tested_and_the_run_is_not_a_pass(small_run):
    checks = {c.name: c for c in small_run.checks}
    for name in ("one call: sharp", "one call: large_vocabulary"):  # 400 and 60 calls: every outcome in one bin
        c = checks[name]
        print(c.line())
        assert "dof=0" in c.detail and c.passed is None and c.untested.startswith(
            f"its {c.samples} draws pool every outcome into one bin (dof 0)")
        assert c.line().startswith("----") and "NOT TESTED: " in c.line()
    for K in conform.SEQ_K:  # 120 sequences keep 2 bins of 243 sequences: they see 4 of the 12 known bugs
        c = checks[f"sequences K={K}"]
        assert c.passed is None and "fewer than half" in c.untested, c.line()
    assert checks["one call: random"].passed and not checks["one call: random"].untested
    assert not small_run.passed and not small_run.failed and small_run.status() == 3
    assert small_run.verdict() == "INCOMPLETE (4 of 16 checks not tested)"
    text = small_run.text()
    assert "not tested at these sample sizes: one call: sharp, one call: large_vocabulary, sequences K=2, " \
           "sequences K=3; all of them count as tests from scale " in text
    assert "(not counted, having tested nothing: one call: sharp, one call: large_vocabulary" in small_run.coverage()
    assert small_run.to_json()["verdict"].startswith("INCOMPLETE") and small_run.to_json()["passed"] is False
    # each untested check names the draws from which it counts as a test, and the line the scale that tests them all
    laws_of = conform.part("token").check_laws("token")
    for c in small_run.untested:
        assert power.counts_as_test(laws_of[c.name], int(c.needs), c.level), c.name
        assert not power.counts_as_test(laws_of[c.name], c.samples, c.level), c.name
    scale = float(text.split("count as tests from scale ")[1].split()[0])
    for name, check_laws in laws_of.items():
        assert power.counts_as_test(check_laws, max(1, round(check_laws[0] * scale)), stats.LEVEL / 11), name


def test_every_check_tests_something_at_its_default_size():
    # at its default size a check counts as a test when its bins leave a degree of freedom (power.counts_as_test)
    target, _ = laws.markov_pair()
    sequences = laws.sequence_law(target, laws.SEQ_PROMPT, laws.SEQ_N)
    assert len(stats.pooled_bins(sequences, conform.N_SEQUENCES)) >= 2
    for algorithm in verifiers.CHAINS:
        counted = conform.accepted_count_case()
        for case in conform.cases(algorithm) + [counted]:
            law = laws.rows_call_law(conform.CORRECT[algorithm], case.p, case.q)
            law = conform._count_marginal(law) if case is counted else law
            assert len(stats.pooled_bins(law, case.n)) >= 2, (algorithm, case.name)
    assert all(power.counts_as_test(check_laws, check_laws[0], stats.LEVEL / 11)
               for check_laws in conform.part("token").check_laws("token").values())


def test_a_check_with_one_bin_still_fails_an_impossible_outcome():
    # one bin tests nothing about the law, but an outcome the law calls impossible still fails the check
    large = conform.cases("token")[-1]
    check = conform.one_call_check(broken.resample_from_q, conform.Case(large.name, large.p, large.q, 60),
                                   level=stats.LEVEL / 11, rng=np.random.default_rng(0))
    print(check.line())
    assert check.passed is False and "have probability 0 under the exact law" in check.detail and check.pvalue == 0.0


# ---------------------------------------------------------------- power, with the diagnosis

@pytest.mark.parametrize("name", list(KNOWN))
def test_exact_tier_rejects_and_names_every_known_bug(name):
    bug, algorithm = KNOWN[name]
    vectors_check = conform.exact_checks(bug, algorithm)[0]
    print(vectors_check.line())
    assert vectors_check.passed is False
    # the vectors may not tell some bugs apart (lenience 0.8, 0.5 and 0.2 as token-level give the same
    # tokens on them), so the diagnosis lists every bug with the same tokens: this one must be among them
    prefix, suffix = "the same tokens as ", " on every vector"
    assert vectors_check.diagnosis.startswith(prefix) and vectors_check.diagnosis.endswith(suffix), vectors_check.diagnosis
    assert bug.name in vectors_check.diagnosis[len(prefix):-len(suffix)].split(" and ")


@pytest.mark.default_cases("resample_from_q/token", "residual_without_w/block")
@pytest.mark.parametrize("name", list(KNOWN))
def test_one_call_chi_square_rejects_and_names_every_known_bug(name):
    bug, algorithm = KNOWN[name]
    case = conform.cases(algorithm)[0]  # "random"
    check = conform.one_call_check(bug, case, algorithm, conform.FAMILY_LEVEL / 11, np.random.default_rng(1))
    print(check.line())
    assert check.passed is False and check.pvalue < conform.FAMILY_LEVEL / 11
    assert check.bug == bug.name, check.diagnosis


def test_a_failing_run_is_reported_with_its_diagnosis():
    report = conform.check(broken.resample_from_q, scale=0.05)  # a gross bug: a twentieth of the samples finds it
    print(report.text())
    assert not report.passed and report.failed
    assert report.diagnosis.startswith("resample_from_q")
    assert "FAILED" in report.text() and "diagnosis: resample_from_q" in report.text()
    assert report.to_json()["passed"] is False


SIGNATURE_CASES = [(algorithm, i) for algorithm in ("token", "block") for i in range(len(conform.SIGNATURES[algorithm]))]


@pytest.mark.default_cases("token-0")
@pytest.mark.parametrize("algorithm, i", SIGNATURE_CASES, ids=[f"{a}-{i}" for a, i in SIGNATURE_CASES])
def test_signature_laws_are_the_laws_of_their_samplers(algorithm, i):
    # Each known bug's exact law against its own sampler: the diagnosis compares with the right thing.  At level
    # 1e-4 per bug (fixed seed; all of them together raise a false alarm with probability under 3e-3).
    bug = conform.SIGNATURES[algorithm][i]
    case = conform.cases(algorithm)[0]
    counts = stats.sample_verify(bug, case.p, case.q, 4000, np.random.default_rng(2))
    pvalue = stats.chi_square_gof(counts, laws.rows_call_law(bug.law, case.p, case.q))[2]
    assert pvalue > 1e-4, (algorithm, bug.name, pvalue)


# ---------------------------------------------------------------- the edge checks

def _loop(x_draft, p, q, rng, keep, residual_draw):
    out = []
    for t, x in enumerate(x_draft):
        if keep(rng.random(), q[t, x] / p[t, x]):
            out.append(int(x))
            continue
        return np.array(out + [residual_draw(p[t], q[t], rng)])
    return np.array(out + [mrs.sample(q[len(x_draft)], rng)])


def verify_non_strict(x_draft, p, q, rng):
    """Accepts iff u <= q / p: with u = 0 it keeps a draft the target never emits."""
    return _loop(x_draft, p, q, rng, lambda u, ratio: u <= ratio, lambda p, q, rng: mrs.sample(mrs._excess(p, q), rng))


def verify_unguarded_residual(x_draft, p, q, rng):
    """Inverts the CDF of max(0, q - p) without checking its sum: when it is all zero, the id V (one past the vocabulary)."""
    def draw(p_row, q_row, rng):
        r = np.maximum(q_row - p_row, 0.0)
        return int(np.searchsorted(np.cumsum(r), rng.random() * r.sum(), side="right"))
    return _loop(x_draft, p, q, rng, lambda u, ratio: u < ratio, draw)


def test_edge_checks_pass_the_reference_and_catch_the_numerical_bugs():
    names = ["vectors (verify)", "edge q(x) = 0, u = 0", "edge all-zero residual"]
    assert [c.passed for c in conform.exact_checks(mrs.verify)] == [True, True, True]
    assert [c.passed for c in conform.exact_checks(mrs.verify_block, "block")] == [True, True, True]
    non_strict = dict(zip(names, conform.exact_checks(verify_non_strict)))
    assert non_strict["edge q(x) = 0, u = 0"].passed is False and non_strict["edge all-zero residual"].passed
    unguarded = dict(zip(names, conform.exact_checks(verify_unguarded_residual)))
    print(unguarded["edge all-zero residual"].line())
    assert unguarded["edge all-zero residual"].passed is False and "GHSA-8wr5-jm2h-8r4f" in unguarded["edge all-zero residual"].detail
    assert unguarded["edge q(x) = 0, u = 0"].passed and unguarded["vectors (verify)"].passed  # exact elsewhere


def test_every_output_is_watched():
    def out_of_vocabulary(x_draft, p, q, rng):
        return np.array([p.shape[1]])

    def wrong_prefix(x_draft, p, q, rng):
        return np.array([(int(x_draft[0]) + 1) % p.shape[1], 0])

    case, disjoint = conform.cases("token")[0], conform.cases("token")[3]
    for f, problem in [(out_of_vocabulary, "outside [0, 4)"), (wrong_prefix, "prefix is not the drafts"),
                       (broken.always_accept, "q(x) = 0"), (mrs.verify, None)]:
        watched = conform.Watched(conform.adapt(f))
        stats.sample_verify(watched, case.p, case.q, 50, np.random.default_rng(0))
        stats.sample_verify(watched, disjoint.p, disjoint.q, 50, np.random.default_rng(0))
        check = conform.form_check(watched, "every output seen")
        assert check.passed is (problem is None), check.line()
        assert problem is None or problem in check.detail


# ---------------------------------------------------------------- the adapter

def batch_log_count(x_draft, log_p, log_q, rng):  # [1, K], [1, K, V], [1, K+1, V] -> (counts [1], extra [1])
    out = mrs.verify(x_draft[0], np.exp(log_p[0]), np.exp(log_q[0]), rng)
    return np.array([len(out) - 1]), np.array([out[-1]])


def seeded(x_draft, p, q, seed):
    return mrs.verify(x_draft, p, q, np.random.default_rng(seed))


def own_randomness(x_draft, p, q):
    return mrs.verify(x_draft, p, q, np.random.default_rng())


class ToyGenerator:
    """A stand-in for a torch.Generator: made from a seed, used only by the function that receives it."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)


def with_toy_generator(x_draft, p, q, generator):
    return list(mrs.verify(x_draft, p, q, generator.rng))  # a list, not an array


ADAPTED = [
    (batch_log_count, conform.Adapter(batch=True, log_probs=True, returns="count_and_token")),
    (seeded, conform.Adapter(rng="seed")),
    (own_randomness, conform.Adapter(rng="none")),
    (with_toy_generator, conform.Adapter(rng=ToyGenerator)),
]


@pytest.mark.default_cases("batch_log_count")
@pytest.mark.parametrize("function, adapter", ADAPTED, ids=[f.__name__ for f, _ in ADAPTED])
def test_the_adapter_turns_other_signatures_into_verifys(function, adapter):
    verify = conform.adapt(function, adapter)
    case = conform.cases("token")[0]
    x_draft = np.array([1, 2])
    out = verify(x_draft, case.p, case.q, np.random.default_rng(3))
    assert out.ndim == 1 and 1 <= len(out) <= 3 and list(out[:-1]) == list(x_draft[: len(out) - 1])
    if adapter.rng == "generator":  # same uniforms, same tokens as mrs.verify
        for seed in range(50):
            np.testing.assert_array_equal(verify(x_draft, case.p, case.q, np.random.default_rng(seed)),
                                          mrs.verify(x_draft, case.p, case.q, np.random.default_rng(seed)))
        assert all(c.passed for c in conform.exact_checks(verify))
    check = conform.one_call_check(verify, case, level=conform.FAMILY_LEVEL / 11, rng=np.random.default_rng(4))
    assert check.passed, check.line()


@pytest.mark.slow  # a whole checker run, about 5 s
def test_a_function_that_uses_more_than_random_skips_the_exact_tier():
    def uses_choice(x_draft, p, q, rng):
        rng.choice(2)
        return mrs.verify(x_draft, p, q, rng)

    report = conform.check(uses_choice, scale=0.05)
    skipped = report.checks[0]
    assert skipped.passed is None and "more of the generator than random()" in skipped.detail
    assert conform.check(seeded, conform.Adapter(rng="seed"), scale=0.05).checks[0].passed is None


def test_injected_uniforms():
    rng = vectors.ListedUniforms([0.25, 0.5, 0.75])
    assert rng.random() == 0.25 and list(rng.random(2)) == [0.5, 0.75]
    with pytest.raises(RuntimeError, match="lists only 3"):
        rng.random()
    tail = vectors.ListedUniforms([0.1], tail=0.9)
    assert [tail.random() for _ in range(3)] == [0.1, 0.9, 0.9] and tail.used == 3


def test_bad_adapters_are_named():
    with pytest.raises(ValueError, match="Adapter.rng"):
        conform.Adapter(rng="torch")
    with pytest.raises(ValueError, match="Adapter.returns"):
        conform.Adapter(returns="count")
    with pytest.raises(ValueError, match="algorithm"):
        conform.check(mrs.verify, algorithm="greedy")


def test_frequency_distance_and_count_marginal():
    law = {(0,): 0.5, (1,): 0.5}
    assert conform.frequency_distance(Counter({(0,): 3, (1,): 1}), law) == pytest.approx(0.25)
    assert conform._count_marginal({(1, 2): 0.25, (3,): 0.5, (0, 1, 2): 0.25}) == {(1,): 0.25, (0,): 0.5, (2,): 0.25}


@pytest.mark.parametrize("inclusive", [True, False], ids=["bug", "control"])
def test_the_zero_coin_laws_are_their_coins_enumerated(inclusive):
    # on a coarse grid (a coin of 3 bits: 0, 1/8, ..., 7/8) the law of keeping the draft is a count of coins, so a law
    # computed as a continuous coin's (min(1, ratio)) differs; at 24 bits no test could see it, and such a fault survived
    coin = shipped.InclusiveCoin(inclusive=inclusive, bits=3)
    for ratio in (0.0, 0.25, 0.3, 0.99, 1.0):
        p = np.array([[0.5, 0.5]])
        q = np.array([[0.5 * ratio, 1 - 0.5 * ratio], [0.5, 0.5]])
        kept = sum(v for out, v in coin.law(np.array([0]), p, q).items() if len(out) == 2)
        coins = [k / 8 for k in range(8)]
        expected = sum((u <= ratio) if inclusive else (u < ratio) for u in coins) / 8
        assert kept == pytest.approx(expected, abs=1e-12), (ratio, kept, expected)
