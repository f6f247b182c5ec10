"""The demo's "predicted" column is made before the run, from the pilot and the costs measured before it; Theorem 3.8
with the run's own alpha and costs is a separate column, the model check.  `run_workloads` is driven by a fake
`generate` whose runs report chosen statistics and a fake replay of the pilot's text (`specref.apps.pilot`), so the
run's alpha can differ from the pilot's."""

import types

import numpy as np
import pytest

from specref import speedup
from specref.apps import demo, pilot
from specref.trees import Tree

COSTS = [1.0, 1.05, 1.1, 1.15, 1.2, 1.3, 1.4, 1.5]  # scoring K + 1 tokens, in decode steps, measured before the run
PILOT_ALPHA, PILOT_DRAFT_MS, DECODE_MS = 0.8, 0.2, 10.0
TREE_PILOT_PROFILE = [[0.9, 0.05, 0.0, 0.0]]  # a tree that pays, so that a tree row runs


def stats(alpha, K, draft_ms=0.3, call_ms=12.0, ms_per_token=5.0):
    return types.SimpleNamespace(ms_per_token=ms_per_token, alpha_hat=alpha, tokens_per_target_call=2.0,
                                 target_ms_per_call=call_ms, draft_ms_per_call=draft_ms, n_examined=20,
                                 calls_by_drafted=[0] * K + [5])


def fake_replay(L=200):
    """A replay of a pilot text of L tokens on which every draft token is accepted with PILOT_ALPHA, every call drafts
    K, the tree's chances by rank are TREE_PILOT_PROFILE and c = PILOT_DRAFT_MS / DECODE_MS."""
    sums = np.zeros((pilot.TREE_DEPTHS, pilot.TREE_WIDTH))
    sums[0] = np.asarray(TREE_PILOT_PROFILE[0]) * L
    return pilot.Replay([np.full((L, pilot.K_CHOICES), PILOT_ALPHA)],
                        [np.tile(np.arange(1, pilot.K_CHOICES + 1), (L, 1))], sums,
                        np.array([L, 0.0, 0.0, 0.0]), PILOT_DRAFT_MS, 1, DECODE_MS, 1)


def fake_generate(run_alpha, run_profile):
    """`demo.generate` on a fake clock: the timed runs report `run_alpha` and `run_profile`."""
    def generate(model, prompt_ids, method, draft_name, K, temperature, top_p, max_new_tokens, seed, eos=None,
                 on_step=None, verify="token", lookup_n=None, tree=None, draft_file=None):
        if method == "ArS":
            return demo.Run("ArS", "-", 0, temperature, top_p, [1] * 4,
                            stats(float("nan"), 0, draft_ms=0.0, call_ms=DECODE_MS, ms_per_token=DECODE_MS), verify="-")
        if tree is not None:
            s = stats(run_alpha, 0)
            return demo.Run("SpS", draft_name, tree.size, temperature, top_p, [1] * 4, s, verify="topk",
                            tree=tree.name, drawing=tree.drawing,
                            profile=run_profile)
        return demo.Run("SpS", draft_name, K, temperature, top_p, [1] * 4,
                        stats(run_alpha, K),
                        verify=verify)
    return generate


def workloads(monkeypatch, run_alpha, run_profile, K=None, tree=None, settings=((0.0, None),), warp=0.0,
              tree_costs=None):
    monkeypatch.setattr(demo, "warp_ratio", lambda model, w, text: warp)   # warping a row: `warp` decode steps
    monkeypatch.setattr(demo, "generate", fake_generate(run_alpha, run_profile))
    monkeypatch.setattr(demo, "demo_draft", lambda *a, **k: None)
    monkeypatch.setattr(demo, "replay_draft", lambda *a, **k: fake_replay())
    return demo.run_workloads(None, [1, 2, 3], list(settings), ["prompt-lookup"], K, 8, 0, log=lambda *a: None,
                              costs=COSTS, tree=tree, tree_costs=tree_costs)


def test_a_trees_prediction_uses_the_measured_cost_of_a_tree_call_when_given(monkeypatch):
    """A tree call also builds its mask and keeps a path: given the trees' own costs (`demo.call_costs`), the tree is
    priced with them; without them (the test above) as a chain of N + 1 tokens."""
    dearer = [c + 0.05 for c in COSTS]
    ars, chain, tree = workloads(monkeypatch, 0.3, [[0.2, 0.1, 0.0, 0.0]], tree_costs=dearer)
    shape = Tree.parse(tree.tree)
    c = PILOT_DRAFT_MS / DECODE_MS
    assert tree.apriori == pytest.approx(speedup.tree_walltime_improvement(
        shape.parents, TREE_PILOT_PROFILE, c, dearer[shape.size - 1]))
    assert tree.apriori < speedup.tree_walltime_improvement(shape.parents, TREE_PILOT_PROFILE, c, COSTS[shape.size - 1])
    assert chain.apriori == pytest.approx(pilot.best_K(fake_replay(), c, COSTS)[1])   # the chain keeps its own costs


def test_a_sampled_settings_prediction_prices_the_warp_of_every_row_scored(monkeypatch):
    """Under sampling each row the target scores is warped too: the choice is made with the scoring costs as
    `speedup.warped_costs` prices them at the measured warp (control: a free warp gives the unwarped prediction)."""
    c = PILOT_DRAFT_MS / DECODE_MS
    for warp in (0.0, 0.1):
        ars, chain, *_ = workloads(monkeypatch, 0.3, [[0.2, 0.1, 0.0, 0.0]], settings=[(0.8, 0.95)], warp=warp)
        K, before = pilot.best_K(fake_replay(), c, speedup.warped_costs(COSTS, warp))
        assert chain.K == K and chain.apriori == pytest.approx(before)
    assert before < pilot.best_K(fake_replay(), c, COSTS)[1]


@pytest.mark.parametrize("run_alpha, run_profile", [(0.3, [[0.2, 0.1, 0.0, 0.0]]), (0.6, [[0.5, 0.2, 0.0, 0.0]])])
def test_the_prediction_comes_from_the_pilot_and_the_model_check_from_the_run(monkeypatch, run_alpha, run_profile):
    ars, chain, tree = workloads(monkeypatch, run_alpha, run_profile)
    # before the run: the replay's acceptance 0.8 and c = 0.2 ms / 10 ms with the costs measured before it
    K, before = pilot.best_K(fake_replay(), PILOT_DRAFT_MS / DECODE_MS, COSTS)
    assert chain.K == K and chain.apriori == pytest.approx(before)
    assert f"K = {K} predicts {before:.2f}x" in chain.why_K
    # at one acceptance everywhere that is Theorem 3.8, but for the pilot text's end (200 tokens)
    assert before == pytest.approx(speedup.best_gamma_measured(PILOT_ALPHA, PILOT_DRAFT_MS / DECODE_MS, COSTS)[1],
                                   rel=0.03)
    # the model check follows the run: its alpha, c = 0.3 ms / 10 ms and its call of 12 ms against 10 ms
    check = speedup.improvement_with_lengths(run_alpha, [0] * K + [5], 0.03, 1.2)
    assert chain.model_check == pytest.approx(float(check)) and chain.model_check != pytest.approx(chain.apriori)
    # the tree: chosen and predicted from the pilot's chances by rank, checked with the run's own
    shape = Tree.parse(tree.tree)
    assert tree.apriori == pytest.approx(speedup.tree_walltime_improvement(
        shape.parents, TREE_PILOT_PROFILE, PILOT_DRAFT_MS / DECODE_MS, COSTS[shape.size - 1]))
    assert tree.model_check == pytest.approx(speedup.tree_walltime_improvement(shape.parents, run_profile, 0.03, 1.2))
    assert ars.apriori == 1.0 and ars.model_check == 1.0
    assert not hasattr(chain, "predicted")  # no name is left whose meaning changed


def test_the_prediction_does_not_move_when_only_the_run_changes(monkeypatch):
    low = workloads(monkeypatch, 0.3, [[0.2, 0.1, 0.0, 0.0]])
    high = workloads(monkeypatch, 0.6, [[0.5, 0.2, 0.0, 0.0]])
    for a, b in zip(low[1:], high[1:]):
        assert a.apriori == b.apriori and a.model_check < b.model_check


def test_the_table_labels_both_columns_and_says_what_the_model_check_is(monkeypatch):
    ars, chain, tree = workloads(monkeypatch, 0.3, [[0.2, 0.1, 0.0, 0.0]])
    lines = demo.table([ars, chain, tree]).splitlines()
    assert lines[0].split()[-3:] == ["predicted", "model", "check"]
    assert lines[3].split()[-2:] == [f"{chain.apriori:.2f}x", f"{chain.model_check:.2f}x"]
    assert lines[4].split()[-2:] == [f"{tree.apriori:.2f}x", f"{tree.model_check:.2f}x"]
    text = "\n".join(lines)
    assert "predicted: made before the run" in text
    assert "model check (run's alpha, run's costs)" in text and "not a prediction" in text
    assert "no a-priori prediction" not in text  # every row here has one
    verdict = demo.verdicts([ars, chain, tree])[0]
    assert f"predicted {chain.apriori:.2f}x before the run" in verdict


@pytest.mark.parametrize("K, tree", [(3, None), (None, "3+1")])
def test_a_run_with_K_or_tree_given_has_no_prediction_and_says_so(monkeypatch, K, tree):
    results = workloads(monkeypatch, 0.3, [[0.2, 0.1, 0.0, 0.0]], K=K, tree=tree)
    given = results[-1]
    assert given.apriori is None and given.model_check == given.model_check  # the model check is still there
    row = demo.table(results).splitlines()[2 + len(results) - 1]
    assert row.split()[-2:] == ["none", f"{given.model_check:.2f}x"]
    assert "none: no a-priori prediction" in demo.table(results)
    assert "no a-priori prediction" in demo.verdicts(results)[-1]
    if tree is not None:  # the chain before it was chosen by a pilot and has its prediction
        assert results[1].apriori == pytest.approx(pilot.best_K(fake_replay(), PILOT_DRAFT_MS / DECODE_MS, COSTS)[1])


@pytest.mark.parametrize("temperature, top_p, samples", [(0.0, None, 1), (0.8, 0.95, demo.PILOT_SAMPLES)])
def test_a_sampled_setting_pools_several_pilot_completions_and_greedy_takes_one(monkeypatch, temperature, top_p,
                                                                                 samples):
    """One sampled pilot answer may copy its prompt far more or less than the run's: the demo's pilot pools
    PILOT_SAMPLES completions at successive seeds for a sampled setting, and each draft's choice is made on all of
    them (the pooled replay); a greedy completion is the same at every seed, so it takes one."""
    seeds, replayed = [], []
    monkeypatch.setattr(demo, "warp_ratio", lambda model, w, text: 0.0)
    monkeypatch.setattr(demo, "generate", fake_generate(0.3, [[0.2, 0.1, 0.0, 0.0]]))
    monkeypatch.setattr(demo, "demo_draft", lambda *a, **k: None)
    monkeypatch.setattr(demo, "pilot_completion", lambda model, ids, T, p, n, seed, eos=None:
                        seeds.append(seed) or demo.Run("ArS", "-", 0, T, p, [1] * 4, stats(float("nan"), 0)))
    monkeypatch.setattr(demo, "replay_draft", lambda *a, **k: replayed.append(1) or fake_replay())
    chosen = []
    monkeypatch.setattr(demo, "choose_K_replayed", lambda replay, costs: chosen.append(replay) or
                        pilot.choose_K_replayed(replay, costs))
    demo.run_workloads(None, [1, 2, 3], [(temperature, top_p)], ["prompt-lookup"], None, 8, 5, log=lambda *a: None,
                       costs=COSTS)
    assert seeds == [5 + i for i in range(samples)] and len(replayed) == samples
    assert chosen[0].tokens == samples * fake_replay().tokens  # the choice saw every completion, pooled


def test_the_pilot_refuses_no_completions():
    with pytest.raises(ValueError, match="samples must be at least 1, got 0"):
        demo.pilot_texts(None, [1], 0.8, 0.95, 8, 0, samples=0)
