"""The gallery of bugs that shipped (specref.proof.bugs.shipped) and the power computed from exact laws (specref.proof.power).

Each shipped signature is rejected and named by the conformance checker, with its negative control
(the same code with the bug switched off) passing the same check with the same seed; each
single-call form's exact law is its sampler's law; the non-central chi-square power matches the
rate at which the checker's own chi-square rejects multinomial draws of a bug's exact law.
False alarms: every chi-square here runs at a stated level with a fixed seed (see each test).
"""

import math
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from specref import mrs, verifiers
from specref.proof import conform, laws, power, stats
from specref.proof.bugs import shipped

GALLERY = {s.name: s for s in shipped.GALLERY}
ROOT = Path(__file__).resolve().parents[2]


def test_the_gallery_holds_at_least_eight_shipped_signatures_each_cited_and_in_the_docs():
    assert len(GALLERY) == len(shipped.GALLERY) >= 8
    page = (ROOT / "docs" / "shipped_bugs.md").read_text()
    for s in shipped.GALLERY:
        assert re.search(r"#\d+|GHSA-", s.where), s.where
        assert s.algorithm in verifiers.CHAINS
        assert f"`{s.name}`" in page, s.name
        for ref in re.findall(r"#\d+|GHSA-[\w-]+", s.where):
            assert ref in page, (s.name, ref)
        assert s.control.law is not s.bug.law


@pytest.mark.slow_cases("draft_filter_not_passed", "mixed_precision_draft", "target_not_warped", "token_level")
@pytest.mark.parametrize("name", list(GALLERY))
def test_each_single_call_form_and_its_control_follow_their_exact_laws(name):
    # chi-square of 4000 calls of each sampler against its own law, at level 1e-4 (fixed seed; 18 such checks
    # together raise a false alarm with probability under 2e-3 for a random seed)
    s = GALLERY[name]
    case = conform.cases(s.algorithm)[0]
    for bug in (s.bug, s.control):
        law = laws.rows_call_law(bug.law, case.p, case.q)
        assert sum(law.values()) == pytest.approx(1.0, abs=1e-12)
        counts = stats.sample_verify(bug, case.p, case.q, 4000, np.random.default_rng(2))
        assert stats.chi_square_gof(counts, law)[2] > 1e-4, bug.name
    # the control is the correct verifier's law (within the 2^-24 of a float32 coin)
    correct = laws.rows_call_law(conform.CORRECT[s.algorithm], case.p, case.q)
    assert power.total_variation(laws.rows_call_law(s.control.law, case.p, case.q), correct) < 1e-7


@pytest.mark.default_cases("token_level")
@pytest.mark.parametrize("name", list(GALLERY))
def test_the_checker_rejects_and_names_each_shipped_signature_and_passes_its_control(name):
    s = GALLERY[name]
    if s.edge_check:
        # the exact tier: the edge check fails on the bug and passes its control; the run's diagnosis names it
        checks = {c.name: c for c in conform.exact_checks(s.bug, s.algorithm)}
        print(checks[s.edge_check].line())
        assert checks[s.edge_check].passed is False
        report = conform.Report(s.name, s.algorithm, 0, list(checks.values()))
        assert conform._summary(report, Counter(), conform.DIAGNOSED[s.algorithm]).startswith(f"{s.name}: ")
        assert all(c.passed for c in conform.exact_checks(s.control, s.algorithm))
        return
    # the one-call chi-square at the run's level, the default n, on the check with the most power for it
    check_name, n95 = power.best_check(s.bug, s.algorithm)
    assert n95 <= 20_000, (check_name, n95)  # its power there is at least 95%
    case = next(c for c in conform.cases(s.algorithm) if f"one call: {c.name}" == check_name)
    level = conform.FAMILY_LEVEL / 11
    found = conform.one_call_check(s.bug, case, s.algorithm, level, np.random.default_rng(1))
    print(found.line())
    assert found.passed is False and found.bug == s.name, found.diagnosis
    control = conform.one_call_check(s.control, case, s.algorithm, level, np.random.default_rng(1))
    assert control.passed and not control.diagnosis, control.line()


@pytest.mark.slow  # a whole checker run, about 4 s
def test_a_whole_run_names_a_bug_around_the_verifier_and_states_what_it_catches():
    report = conform.check(shipped.TargetNotWarped(), scale=0.05)
    print(report.text())
    assert not report.passed and report.diagnosis.startswith("target_not_warped: ")
    coverage = report.coverage()
    assert coverage.startswith("bugs that shipped") and coverage in report.text()
    # at 1000 calls a check (scale 0.05) the power computed for target_not_warped is 1 to many digits
    assert "target_not_warped (100%)" in coverage


def test_a_run_ended_by_its_contract_check_still_names_the_shipped_bug():
    # the id V from an all-zero residual fails the exact tier's edge check (and breaks the output contract there,
    # which may end the run at once); either way the report names the shipped bug, and its control fails no check
    # (at scale 0.02 some checks test nothing, so the control's run is INCOMPLETE rather than passed)
    report = conform.check(shipped.UnguardedResidual(), scale=0.02)
    assert report.failed and "unguarded_residual: an all-zero residual" in report.text()
    assert "unguarded_residual: an all-zero residual" in report.diagnosis, report.diagnosis
    control = conform.check(shipped.UnguardedResidual(guarded=True), scale=0.02)
    assert not control.failed and "unguarded_residual: an all-zero residual" not in control.text()


def test_a_run_that_fails_nothing_states_which_shipped_bugs_its_sample_sizes_would_catch():
    report = conform.check(mrs.verify, scale=0.02)
    assert not report.failed, report.text()
    caught, missed = report.coverage().split("; with less: ")
    # edge cases: caught whenever the exact tier runs; the smallest effects need more than 400 calls a check
    assert "inclusive_accept_zero_coin (edge q(x) = 0, u = 0)" in caught and "unguarded_residual" in caught
    assert "mixed_precision_draft" in missed and "residual_only_rejected_entry (100%)" in caught


# ---------------------------------------------------------------- the power computation

def test_power_is_the_level_when_the_bug_is_the_correct_law_and_grows_with_n():
    case = conform.cases("token")[0]
    correct = laws.rows_call_law(laws.token_call_law, case.p, case.q)
    assert power.check_power(correct, correct, 20_000, 1e-3) == pytest.approx(1e-3, rel=1e-9)
    bug = laws.rows_call_law(shipped.MixedPrecisionDraft().law, case.p, case.q)
    powers = [power.check_power(bug, correct, n, 1e-3) for n in (10**5, 10**6, 10**7, 10**8)]
    assert powers == sorted(powers) and powers[0] < 0.05 and powers[-1] > 0.99  # bf16 on the random case: ~4e7
    n95 = power.smallest_n(lambda n: power.check_power(bug, correct, n, 1e-3))
    assert power.check_power(bug, correct, int(n95), 1e-3) >= 0.95 > power.check_power(bug, correct, int(0.97 * n95), 1e-3)
    # an outcome impossible under the correct law: seen with probability 1 - (1 - eps)^n
    assert power.check_power({(0,): 0.5, (1,): 0.5 - 1e-3, (2,): 1e-3}, {(0,): 0.5, (1,): 0.5}, 1000, 1e-12) == \
        pytest.approx(1 - (1 - 1e-3) ** 1000, rel=1e-6)
    assert math.isinf(power.best_check(shipped.UnguardedResidual(), "token")[1])  # the same law on every case


@pytest.mark.parametrize("name", ["target_not_warped", "draft_filter_not_passed"])
def test_noncentral_chi_square_power_matches_the_checkers_rejection_rate(name):
    # At the n where the computed power is one half, and at the n computed for 95%, the checker's own chi-square
    # (stats.chi_square_gof at the run's level) rejects 2000 multinomial draws of the bug's exact law (random
    # case) at a rate within 0.08 of one half, and of at least 0.9.  The binomial standard error is 0.011 at
    # one half and 0.005 at 0.95, so the slack is the approximation's: non-central chi-square holds for small
    # effects at large n, and these runs (400 to 1300 calls) measured 0.44 to 0.53 and 0.93 to 1.0.
    s = GALLERY[name]
    _, _, correct, law = power.bug_laws(s.bug, s.algorithm)[0]
    level = conform.FAMILY_LEVEL / 11
    keys = list(law)
    rng = np.random.default_rng(5)
    for target, tolerance in [(0.5, 0.08), (0.95, 0.05)]:
        n = int(power.smallest_n(lambda m: power.check_power(law, correct, m, level), target=target))
        predicted = power.check_power(law, correct, n, level)
        draws = rng.multinomial(n, [law[k] for k in keys], size=2000)
        rate = np.mean([stats.chi_square_gof(Counter(dict(zip(keys, d))), correct)[2] <= level for d in draws])
        print(name, n, predicted, rate)
        assert abs(predicted - target) < 0.01
        assert (abs(rate - predicted) < tolerance) if target == 0.5 else rate >= 0.9


def test_bf16_rounding_keeps_8_significant_bits():
    rows = np.array([[0.1, 0.2, 0.3, 0.4]])
    out = shipped.bf16(rows) * shipped.bf16(rows, 24).sum()
    assert np.allclose(out.sum(), 1.0) and 0 < np.max(np.abs(out - rows) / rows) < 2.0 ** -8 * 1.01
    assert np.array_equal(shipped.bf16(np.array([[0.5, 0.25, 0.25]])), np.array([[0.5, 0.25, 0.25]]))
    assert np.allclose(shipped.unwarped(np.array([0.2, 0.8]) ** (1 / 0.7) / (0.2 ** (1 / 0.7) + 0.8 ** (1 / 0.7))),
                       [0.2, 0.8])


def test_coupled_drafts_follow_the_rows_they_are_coupled_to():
    # 20 000 coupled draws of one position against p_to, chi-square at level 1e-4 (fixed seed)
    p = np.array([[0.1, 0.2, 0.3, 0.4]])
    p_to = shipped.top_p_filter(p[0], 0.6)[None]  # keeps 0.4 and 0.3
    rng = np.random.default_rng(3)
    x = [mrs.sample(p[0], rng) for _ in range(20_000)]
    got = Counter((int(shipped.coupled_drafts([xi], p, p_to, rng)[0]),) for xi in x)
    assert set(got) == {(2,), (3,)}
    assert sps.chisquare([got[(2,)], got[(3,)]], [20_000 * 3 / 7, 20_000 * 4 / 7]).pvalue > 1e-4
    assert shipped._coupled_row(3, p[0], p_to[0]) == {3: 1.0}
