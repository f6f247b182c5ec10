"""The a-priori pilot (`specref.apps.pilot`): a draft replayed over the target's own text, and the calls followed in
expectation.  Exact checks: the expected calls against a direct recursion; one acceptance everywhere against
Theorem 3.8; greedy decoding, where the replay must count exactly the calls speculative sampling makes on the same
text (toy models by default, the real model and the trained draft with --slow, with a replay that lets the draft
see the target's later states as its negative control)."""

import numpy as np
import pytest

from specref import speedup, trees
from specref.apps import demo, pilot
from specref.drafts import NGramDraft, PromptLookupDraft
from specref.runstats import RunStats
from specref.sampling import autoregressive_sampling, next_distributions, speculative_sampling
from specref.smollm2.draft import shipped_draft
from specref.trees import Tree
from specref.warps import Warp, Warped
from tests.apps.pilot_toys import Copier, Soft, Sticky


def calls_by_recursion(accept, drafted, n=0):
    """E[calls from position n on], straight from the definition: one call, then the expected rest."""
    L = len(drafted)
    if n >= L:
        return 0.0
    k = min(int(drafted[n]), L - n)
    rest, reach = 0.0, 1.0
    for t in range(1, k + 1):
        rest += reach * (1 - accept[n, t - 1]) * calls_by_recursion(accept, drafted, n + t)
        reach *= accept[n, t - 1]
    return 1.0 + rest + reach * calls_by_recursion(accept, drafted, n + k + 1)


@pytest.mark.parametrize("seed", range(5))
def test_the_expected_calls_are_those_of_the_recursion(seed):
    rng = np.random.default_rng(seed)
    L, K = 14, 4
    accept = rng.choice([0.0, 1.0, rng.random()], size=(L, K))
    drafted = rng.integers(0, K + 1, L)
    assert pilot.call_mass(accept, drafted).sum() == pytest.approx(calls_by_recursion(accept, drafted), rel=1e-12)


@pytest.mark.parametrize("alpha, K, c", [(0.8, 3, 0.05), (0.5, 1, 0.2), (0.95, 8, 0.01)])
def test_one_acceptance_everywhere_is_theorem_3_8(alpha, K, c):
    """With every draft token accepted with alpha, and every call drafting K, the replay's prediction is Theorem 3.8
    with measured costs, up to the text's end (a call cut short there): within 0.2% at 5000 tokens."""
    L, costs = 5000, [1.0 + 0.05 * k for k in range(1, 9)]
    rep = pilot.Replay([np.full((L, 8), alpha)], [np.tile(np.arange(1, 9), (L, 1))], draft_seconds=c, rows=1,
                       decode_seconds=1.0, decode_steps=1)
    theorem = speedup.walltime_improvement_measured(alpha, K, c, costs[K - 1])
    assert pilot.chain_speedup(rep, K, rep.c, costs) == pytest.approx(float(theorem), rel=2e-3)


def test_a_call_that_drafts_nothing_costs_a_decode_step():
    rep = pilot.Replay([np.zeros((50, 2))], [np.zeros((50, 2), np.int64)], draft_seconds=1.0, rows=1,
                       decode_seconds=1.0, decode_steps=1)
    assert pilot.chain_speedup(rep, 2, 5.0, [3.0, 4.0]) == pytest.approx(1.0)


def test_bad_input_is_refused():
    rep = pilot.Replay([np.zeros((5, 2))], [np.ones((5, 2), np.int64)])
    with pytest.raises(ValueError, match="scoring costs cover K = 1 to 2"):
        pilot.chain_speedup(rep, 3, 0.1, [1.0, 1.1])
    with pytest.raises(ValueError, match="no timed rows"):
        rep.c
    with pytest.raises(ValueError, match="read no completion"):
        pilot.chain_speedup(pilot.Replay(), 1, 0.1, [1.0])


# ---- greedy: the replay counts the calls speculative sampling makes ----------------------------------------

V = 9


def toy_models():
    rng = np.random.default_rng(3)
    text = [list(rng.integers(0, V, 40)) for _ in range(6)]
    target = NGramDraft.fit(text, V, n=3)
    draft = NGramDraft.fit(text[:3] + [list(rng.integers(0, V, 40))], V, n=2)
    return target, draft


def spS_calls(target, draft, prompt, n, K, warp):
    stats = RunStats()
    out = speculative_sampling(prompt, Warped(draft, warp.temperature), Warped(target, warp.temperature), n, K,
                               np.random.default_rng(0), on_step=stats.add)
    return out[len(prompt):], stats.loops


@pytest.mark.parametrize("name", ["ngram", "prompt-lookup-adaptive"])
def test_greedy_replay_counts_the_calls_of_speculative_sampling(name):
    target, ngram = toy_models()
    draft = ngram if name == "ngram" else PromptLookupDraft(V, n=3, adaptive=True)
    prompt, n, greedy = np.array([1, 2, 3, 1, 2]), 40, Warp(0.0)
    text = autoregressive_sampling(prompt, Warped(target, 0.0), n, np.random.default_rng(0))[len(prompt):]
    rep = pilot.replay(target, draft, prompt, text, greedy, 6)
    for K in (1, 2, 4, 6):
        tokens, calls = spS_calls(target, draft, prompt, n, K, greedy)
        assert np.array_equal(tokens, text)                       # greedy: the same text
        drafted = rep.drafted[0][:, K - 1]
        assert pilot.call_mass(rep.accept[0], drafted).sum() == pytest.approx(calls)
    assert set(np.unique(rep.accept[0][~np.isnan(rep.accept[0])])) <= {0.0, 1.0}


class WithoutCache:
    """The target without its cache: the replay cannot roll it back, so the draft reads the target's states of the
    whole text, one step ahead at every depth (the negative control)."""

    def __init__(self, model):
        self.model = model

    def next_probs(self, tokens, k):
        return self.model.next_probs(tokens, k)


@pytest.mark.slow
def test_greedy_replay_of_the_trained_draft_counts_the_calls_on_the_real_model(smollm2):
    """The trained draft chains its own states past the target's last one; the replay must show it the target's
    states only up to where a call would have them.  Its negative control, a replay that does not roll the target
    back, sees the true states at every depth and counts other calls."""
    tok = smollm2.tokenizer
    prompt = tok.chat([{"role": "user", "content": "Write a Python function that returns the n-th Fibonacci number."}])
    text = demo.generate(smollm2, prompt, "ArS", "-", 1, 0.0, None, 40, 1, tok.eos_id)
    draft = shipped_draft(smollm2)
    rep = pilot.replay(smollm2, draft, prompt, text.tokens, Warp(0.0), 5)
    unrolled = pilot.replay(WithoutCache(smollm2), draft, prompt, text.tokens, Warp(0.0), 5)
    told_apart = []
    for K in (1, 2, 3, 5):
        run = demo.generate(smollm2, prompt, "SpS", "neural", K, 0.0, None, 40, 1, tok.eos_id)
        assert run.tokens == text.tokens
        assert pilot.call_mass(rep.accept[0], rep.drafted[0][:, K - 1]).sum() == pytest.approx(run.stats.loops)
        wrong = pilot.call_mass(unrolled.accept[0], unrolled.drafted[0][:, K - 1]).sum()
        told_apart.append(wrong != pytest.approx(run.stats.loops))
    assert told_apart[0] is False and any(told_apart[1:])   # one step ahead the two agree; deeper they do not


@pytest.mark.slow
def test_a_greedy_top_k_trees_calls_are_counted_exactly_on_the_real_model(smollm2):
    """The trained draft with lookup, greedy, trees drawn top-k: `tree_calls` over the replay's ranks must count the
    calls the demo's runs make with each shape on the same text."""
    tok = smollm2.tokenizer
    prompt = tok.chat([{"role": "user", "content": "Write a Python function that returns the n-th Fibonacci number."}])
    text = demo.generate(smollm2, prompt, "ArS", "-", 1, 0.0, None, 40, 1, tok.eos_id)
    draft = demo.demo_draft(smollm2, prompt, "neural+lookup")
    rep = pilot.replay(smollm2, draft, prompt, text.tokens, Warp(0.0), pilot.K_CHOICES, "topk")
    for shape in ("2+1", "3+1+1", "2x2", "2+1+1+1+1+1+1"):
        tree = Tree.parse(shape, "topk")
        run = demo.generate(smollm2, prompt, "SpS", "neural+lookup", tree.size, 0.0, None, 40, 1, tok.eos_id, tree=tree)
        assert run.tokens == text.tokens
        assert pilot.tree_calls(rep.ranks[0], tree.parents) == run.stats.loops, shape


def test_a_replayed_choice_that_does_not_pay_says_the_alpha_needed_is_for_one_alpha_everywhere():
    """Uneven acceptance: accepted, accepted, rejected, rejected, over and over (mean 0.5).  One alpha of 0.5 for every
    token would pay at this cost, and the text does not: a call after an acceptance lands two tokens on, on a
    rejection, so the calls yield 4/3 tokens each, not 1.5."""
    L = 400
    accept = np.tile([1.0, 1.0, 0.0, 0.0], L // 4)[:, None]
    rep = pilot.Replay([accept], [np.ones((L, 1), np.int64)], draft_seconds=0.01, rows=1, decode_seconds=1.0, decode_steps=1)
    choice = pilot.choose_K_replayed(rep, [1.4])
    assert choice.alpha == pytest.approx(0.5) and choice.needed < 0.5 and not choice.pays
    assert pilot.chain_speedup(rep, 1, 0.01, [1.4]) == pytest.approx(L / (L * 3 / 4) / 1.41, rel=1e-2)
    assert "no K pays on the pilot's text" in choice.why() and "with one alpha for every token" in choice.why()


def test_pooled_replays_measure_c_against_the_mean_decode_step_of_every_pilot_text():
    """c's unit is the decode step over all the pilot's ArS runs, not the last one's: two texts whose decode steps
    took 1 s and 3 s (one step each), with 0.2 s of draft rows each, give c = 0.4 / 2 rows / 2 s = 0.1."""
    one = pilot.Replay([np.ones((4, 1))], [np.ones((4, 1), np.int64)], draft_seconds=0.2, rows=1,
                       decode_seconds=1.0, decode_steps=1)
    two = pilot.Replay([np.ones((4, 1))], [np.ones((4, 1), np.int64)], draft_seconds=0.2, rows=1,
                       decode_seconds=3.0, decode_steps=1)
    assert one.add(two).c == pytest.approx(0.1) and two.add(one).c == pytest.approx(0.1)
    assert pilot.Replay.pooled([one, two, one]).c == one.add(two).add(one).c  # the commands pool this way
    assert pilot.Replay.pooled([one]) is one
    with pytest.raises(ValueError, match="no replay to pool"):
        pilot.Replay.pooled([])
    with pytest.raises(ValueError, match="no decode step"):
        _ = pilot.Replay([np.ones((4, 1))], [np.ones((4, 1), np.int64)], draft_seconds=0.2, rows=1).c


# ---- what a call costs: the draft's rows by depth, timed as the loop meets them ---------------------------------

def test_a_draft_cost_by_row_depth_sums_the_rows_drafted():
    assert pilot.draft_cost(0.1, 3) == pytest.approx(0.3)
    assert pilot.draft_cost([0.2, 0.1], 1) == pytest.approx(0.2)
    assert pilot.draft_cost([0.2, 0.1], 3) == pytest.approx(0.4)   # past the depths timed: the last depth's cost
    assert pilot.draft_cost([0.2, 0.1], 0) == 0.0
    with pytest.raises(ValueError, match="at least one"):
        pilot.draft_cost([], 2)


def test_a_call_pays_its_rows_by_depth_so_a_dear_first_row_weighs_on_short_calls():
    """Every draft rejected, every call drafting K: each call yields one token and costs its K rows plus scoring
    K + 1 tokens.  Rows costing 0.3 then 0.1 cost a call of 2 what two rows of 0.2 cost (control: the same
    prediction), and a call of 1 what one row of 0.3 costs, not 0.2."""
    L, costs = 100, [1.1, 1.2]
    rep = pilot.Replay([np.zeros((L, 2))], [np.tile([1, 2], (L, 1))], draft_seconds=1.0, rows=1,
                       decode_seconds=1.0, decode_steps=1)
    assert pilot.chain_speedup(rep, 2, [0.3, 0.1], costs) == pytest.approx(1 / (0.4 + 1.2))
    assert pilot.chain_speedup(rep, 2, [0.3, 0.1], costs) == pytest.approx(pilot.chain_speedup(rep, 2, 0.2, costs))
    assert pilot.chain_speedup(rep, 1, [0.3, 0.1], costs) == pytest.approx(1 / (0.3 + 1.1))
    assert pilot.chain_speedup(rep, 1, 0.2, costs) == pytest.approx(1 / (0.2 + 1.1))


class Logged:
    """A model whose calls are written to a shared log as (name, number of tokens given)."""

    def __init__(self, model, name, log):
        self.model, self.name, self.log = model, name, log

    def next_probs(self, tokens, k):
        self.log.append((self.name, len(tokens)))
        return next_distributions(self.model, tokens, k)


@pytest.mark.parametrize("every", [1, 3])
def test_the_replay_times_a_calls_rows_right_after_the_target_call_before_it(every):
    """At every `every`-th position the target first scores the token before the call (the loop's last target
    call), then the draft computes that call's rows, nothing in between; the rows timed there are counted by depth.
    Control: the positions in between are not timed and have no target call of their own."""
    target, draft = toy_models()
    log = []
    prompt, completion = np.array([1, 2, 3, 4]), np.array([5, 6, 7, 0, 1, 2, 3])
    P, L, k_max = len(prompt), len(completion), 3
    rep = pilot.replay(Logged(target, "target", log), Logged(draft, "draft", log), prompt, completion, Warp(1.0),
                       k_max, timed_every=every)
    assert log[0] == ("target", P + L)                       # the teacher-forced rows of the whole completion
    calls = log[1:]
    for n in range(L - 1, -1, -1):                           # later positions first, as the replay goes
        t, rows = P + n, min(k_max, L - n)
        expect = ([("target", t - 1)] if n % every == 0 else []) + [("draft", t + j) for j in range(rows)]
        assert calls[:len(expect)] == expect
        calls = calls[len(expect):]
    assert calls == []
    timed = [n for n in range(L) if n % every == 0]
    assert list(rep.depth_rows) == [sum(min(k_max, L - n) > j for n in timed) for j in range(k_max)]
    assert rep.rows == sum(rep.depth_rows) and rep.draft_seconds == pytest.approx(sum(rep.depth_seconds))
    with pytest.raises(ValueError, match="timed_every must be a whole number >= 1"):
        pilot.replay(target, draft, prompt, completion, Warp(1.0), k_max, timed_every=0)


def test_costs_by_depth_are_pooled_over_completions_and_measured_in_decode_steps():
    one = pilot.Replay([np.ones((4, 2))], [np.ones((4, 2), np.int64)], draft_seconds=0.5, rows=3, decode_seconds=1.0,
                       decode_steps=1, depth_seconds=np.array([0.3, 0.2]), depth_rows=np.array([2, 1]))
    two = pilot.Replay([np.ones((4, 2))], [np.ones((4, 2), np.int64)], draft_seconds=0.1, rows=1, decode_seconds=1.0,
                       decode_steps=1, depth_seconds=np.array([0.1]), depth_rows=np.array([1]))
    both = one.add(two)
    assert both.c_by_depth == pytest.approx([0.4 / 3 / 1.0, 0.2 / 1 / 1.0])   # the decode step: 2 s over 2 steps
    assert two.c_by_depth == pytest.approx([0.1]) and both.c == pytest.approx(0.6 / 4)
    flat = pilot.Replay([np.ones((4, 2))], [np.ones((4, 2), np.int64)], draft_seconds=0.2, rows=1, decode_seconds=1.0,
                        decode_steps=1)
    assert flat.c_by_depth == [flat.c]                        # a replay without depths: one c for every row


# ---- a tree's chances by depth: measured as deep as a chosen tree reaches ----------------------------------------

class Periodic:
    """A greedy toy model over V = 40 tokens: after a prefix of m tokens, token 10 + m % 30, one-hot.  As a draft
    (miss_every=6) it proposes another token whenever m is a multiple of 6, so every call that starts at m = 1
    (mod 6) accepts five drafts and is corrected at the sixth."""

    V = 40

    def __init__(self, miss_every: int | None = None):
        self.miss_every = miss_every

    def next_probs(self, tokens, k):
        rows = np.zeros((k, self.V))
        for i, m in enumerate(range(len(tokens) - k + 1, len(tokens) + 1)):
            miss = self.miss_every is not None and m % self.miss_every == 0
            rows[i, 10 + (m + miss) % 30] = 1.0
        return rows


def test_a_deep_trees_chances_are_measured_at_every_depth_it_reaches(monkeypatch):
    """Runs of five accepted drafts, then a miss: a greedy tree 2+1+1+1+1+1+1 (a spine 7 deep) yields 6 tokens a
    call, which the replay's chances by depth predict exactly, and the run makes.  Control: measured at 4 depths
    only (as the pilot once was), the depths below take depth 3's chance, 1, and the same tree is predicted 8."""
    target, draft = Periodic(), Periodic(miss_every=6)
    tree = Tree.parse("2+1+1+1+1+1+1", "topk")
    prompt, n = np.array([10, 11, 12, 13, 14, 15, 16]), 60    # the first call drafts from m = 7, 1 (mod 6)
    stats = RunStats()
    out = speculative_sampling(prompt, draft, target, n, tree.size, np.random.default_rng(0), on_step=stats.add,
                               tree=tree)
    text = out[len(prompt):]
    assert n / stats.loops == 6.0                              # the run: ten calls of six tokens
    rep = pilot.replay(target, draft, prompt, text, Warp(0.0), pilot.K_CHOICES, "topk")
    assert len(rep.profile) == 6 and rep.profile[5][0] == 0.0  # the sixth draft of every call is the miss
    assert speedup.tree_expected_tokens(tree.parents, rep.profile) == pytest.approx(6.0)
    monkeypatch.setattr(pilot, "TREE_DEPTHS", 4)
    shallow = pilot.replay(target, draft, prompt, text, Warp(0.0), pilot.K_CHOICES, "topk")
    assert len(shallow.profile) == 4
    assert speedup.tree_expected_tokens(tree.parents, shallow.profile) == pytest.approx(8.0)


# ---- sampled text: the chances given the text's tokens --------------------------------------------------------

def test_sampled_replays_predict_the_calls_of_speculative_sampling_in_expectation():
    """Given the text, speculative sampling's acceptances are independent with chance min(1, p(x) / q(x)) at each
    token x (module docstring), so the replay's expected calls, averaged over texts the target samples, are the
    mean calls of speculative sampling: within 4 standard errors (a false alarm about once in 16,000 seed sets; the
    seeds are fixed).  Control: the same replay with Definition 3.1's alpha = sum_x min(p, q) at each position,
    the chance before the token is known, which forgets that a copy draft is accepted exactly where the text copies;
    the same test must reject it."""
    target, draft = Sticky(), Copier()
    prompt, n, K, texts = np.array([1, 2, 3, 4, 5, 6, 7]), 40, 4, 800
    given, before, runs = [], [], []
    for s in range(texts):
        text = autoregressive_sampling(prompt, target, n, np.random.default_rng([7, s]))[len(prompt):]
        rep = pilot.replay(target, draft, prompt, text, Warp(1.0), K)
        given.append(pilot.call_mass(rep.accept[0], rep.drafted[0][:, K - 1]).sum())
        full = np.concatenate([prompt, text])
        alpha = np.array([[np.minimum(draft.row(full[:len(prompt) + m + j]), target.row(full[:len(prompt) + m + j])).sum()
                           for j in range(K)] for m in range(n)])
        before.append(pilot.call_mass(alpha, rep.drafted[0][:, K - 1]).sum())
        stats = RunStats()
        speculative_sampling(prompt, draft, target, n, K, np.random.default_rng([8, s]), on_step=stats.add)
        runs.append(stats.loops)

    def z(a, b):
        return (np.mean(a) - np.mean(b)) / np.sqrt(np.var(a) / len(a) + np.var(b) / len(b))

    assert abs(z(given, runs)) < 4
    assert abs(z(before, runs)) > 4                            # the control: alpha at every position


def test_a_token_the_replays_row_gives_no_mass_takes_the_chance_before_the_token():
    """The replay's rows come from one teacher-forced pass and the text's from one step at a time, so at a near-tie
    (or the edge of the top-p nucleus) the text's token can get no mass in the replay's row.  There the chance before
    the token, sum min(p, q), stands in, instead of min(1, p(x) / 0)."""
    target, draft = Periodic(), Periodic(miss_every=6)
    prompt = np.array([10, 11, 12, 13, 14, 15, 16])
    text = speculative_sampling(prompt, draft, target, 12, 4, np.random.default_rng(0))[len(prompt):]
    text[5] = 39                                               # a token the greedy target never gives, where
    rep = pilot.replay(target, draft, prompt, text, Warp(0.0), 4)  # the draft misses (m = 12): the chance is 0
    full = np.concatenate([prompt, text])
    p, q = draft.next_probs(full[:len(prompt) + 5], 1)[0], target.next_probs(full[:len(prompt) + 5], 1)[0]
    assert q[39] == 0 and p[39] == 0 and np.minimum(p, q).sum() == 0.0
    assert rep.accept[0][5, 0] == 0.0 and rep.accept[0][4, 1] == 0.0   # at depths 1 and 2 of the calls reaching it
    assert np.isfinite(rep.accept[0][~np.isnan(rep.accept[0])]).all()


# ---- trees with children drawn top-k: the walk given the text --------------------------------------------------

SHAPES = ("1+1+1", "3+1", "2x2", "2+2+1", "4+1+1", "2+1+1+1+1+1+1")


@pytest.mark.parametrize("name", ["ngram", "periodic"])
def test_a_greedy_top_k_trees_calls_are_counted_exactly_by_its_walk_over_the_text(name):
    """Greedily, the text is the target's and a top-k tree's walk along it is certain, so `tree_calls` over the
    replay's ranks must give the calls speculative sampling makes with that tree, shape by shape.  Control: the
    chances by rank multiplied along each path (`speedup.tree_expected_tokens`, the formula for trees drawn at
    random) miss those calls on some shape."""
    if name == "ngram":
        target, draft = toy_models()
        prompt, n = np.array([1, 2, 3, 1, 2]), 60
    else:
        target, draft = Periodic(), Periodic(miss_every=4)
        prompt, n = np.array([10, 11, 12, 13, 14, 15, 16]), 60
    greedy = Warped(target, 0.0)
    text = autoregressive_sampling(prompt, greedy, n, np.random.default_rng(0))[len(prompt):]
    rep = pilot.replay(target, draft, prompt, text, Warp(0.0), pilot.K_CHOICES, "topk")
    missed = []
    for shape in SHAPES:
        tree = Tree.parse(shape, "topk")
        stats = RunStats()
        out = speculative_sampling(prompt, draft, greedy, n, tree.size, np.random.default_rng(0), on_step=stats.add,
                                   tree=tree)
        assert np.array_equal(out[len(prompt):], text)
        assert pilot.tree_calls(rep.ranks[0], tree.parents) == stats.loops, shape
        missed.append(abs(n / speedup.tree_expected_tokens(tree.parents, rep.profile) - stats.loops) > 0.5)
    assert any(missed)


def test_a_top_k_trees_prediction_is_its_tokens_over_its_calls_cost():
    """best_tree with ranks: tokens / calls / (draft rows' cost + the tree's scoring cost), per shape, and the
    ranks refused for trees drawn at random; a tree deeper than the ranks measured is refused, not cut short."""
    ranks = [np.array([[0, 0, -1], [1, -1, -1], [0, -1, -1], [-1, -1, -1]])]   # a text of 4 tokens
    costs = [1.0, 1.1, 1.2, 1.3]
    choice = pilot.best_tree([[0.5]], "topk", 0.1, costs, ranks=ranks)
    calls = pilot.tree_calls(ranks[0], Tree.parse(choice.tree).parents)
    rows = trees.draft_rows(Tree.parse(choice.tree).parents)
    assert choice.predicted == pytest.approx(4 / calls / (0.1 * rows + costs[Tree.parse(choice.tree).size - 1]))
    assert pilot.tree_calls(ranks[0], Tree.parse("2+1").parents) == 2       # 3 tokens (0, 0), then 1 (-1)
    assert pilot.tree_calls(ranks[0], Tree.parse("1+1").parents) == 2
    second = np.array([[-1], [1], [-1], [-1]])                                # the text's token 1 is the second child
    assert pilot.tree_calls(second, Tree.parse("2").parents) == 3           # 1 token, 2 (rank 1 taken), 1
    assert pilot.tree_calls(second, Tree.parse("1").parents) == 4           # 1 token a call: rank 1 is not in the tree
    with pytest.raises(ValueError, match="only for children drawn top-k"):
        pilot.best_tree([[0.5]], "without_replacement", 0.1, costs, ranks=ranks)
    with pytest.raises(ValueError, match="4 deep needs ranks at 4 depths"):
        pilot.tree_calls(ranks[0], Tree.parse("1+1+1+1").parents)


def test_a_sampled_top_k_trees_calls_are_those_of_speculative_sampling_in_expectation():
    """Given a sampled text, a top-k tree's walk is as certain as greedily (the walk takes the child that is the
    text's next token), so `tree_calls` averaged over texts the target samples is the mean of speculative sampling's
    calls with that tree: within 4 standard errors (a false alarm about once in 16,000 seed sets; fixed seeds).
    Control: the chances by rank multiplied along each path (`speedup.tree_expected_tokens`), the same test must
    reject."""
    target, draft, tree = Sticky(), Soft(), Tree.parse("2+1+1", "topk")
    prompt, n, texts = np.array([1, 2, 3, 4, 5, 6, 7]), 40, 600
    walked, runs, sums, weights = [], [], 0.0, 0.0
    for s in range(texts):
        text = autoregressive_sampling(prompt, target, n, np.random.default_rng([7, s]))[len(prompt):]
        rep = pilot.replay(target, draft, prompt, text, Warp(1.0), tree.depth, "topk")   # the depths it reaches
        walked.append(pilot.tree_calls(rep.ranks[0], tree.parents))
        sums, weights = sums + rep.tree_sums, weights + rep.tree_weights
        stats = RunStats()
        speculative_sampling(prompt, draft, target, n, tree.size, np.random.default_rng([8, s]), on_step=stats.add,
                             tree=tree)
        runs.append(stats.loops)
    se = np.sqrt(np.var(walked) / texts + np.var(runs) / texts)
    assert abs(np.mean(walked) - np.mean(runs)) < 4 * se
    profile = [list(row / w) for row, w in zip(sums, weights) if w > 0]
    assert abs(n / speedup.tree_expected_tokens(tree.parents, profile) - np.mean(runs)) > 4 * se   # the control
