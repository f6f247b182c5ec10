"""The speculative-sampling bugs that shipped (2023-2026), each as a sampler with its exact law: the gallery.

`specref.proof.bugs.broken` holds bugs invented as negative controls; this module holds the ones that
were reported in public projects.  Each entry of GALLERY is a `Shipped` record: the signature's
single-call form (a `specref.proof.bugs.Bug`: call it like `mrs.verify` to sample, `.law(x_draft, p, q)` is its
exact law for fixed drafts, `.about` the diagnosis sentence), where it shipped (project and number),
which tier of the conformance checker catches it, and a negative control: the same code with the
bug's parameter set to its harmless value, which the checker must pass.

Most of these bugs live *around* the verifier: the rows handed to a correct verifier are not the law
the draft was sampled from, or the target's rows are not warped like plain sampling.  A verify-only
check hands the verifier consistent inputs (it draws the drafts from the p it passes), so real code
with such a bug passes it; their single-call forms below put the mismatch inside one call, so that
their exact laws, their power and the diagnosis can be computed, and the pieces they are made of
(`top_p_filter`, `unwarped`, `bf16`, `coupled_drafts`) can be reused by a whole-pipeline test.
Chen's letters: p = draft, q = target, K drafts per call.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from specref import mrs, warps
from specref.proof import laws
from specref.proof.bugs import Bug, broken
from specref.proof.toy import Toy

# ---------------------------------------------------------------- the pieces

# The request's sampling parameters in the single-call forms: top-p 0.9 for the draft's filter
# (transformers #47932 used top-k/top-p), temperature 0.7 for the target's warp (vLLM #9834).
DRAFT_TOP_P = 0.9
REQUEST_TEMPERATURE = 0.7
# float32 has 24 significant bits, bfloat16 8: the draft rows DeepSpec #31 sampled from.
BF16_BITS = 8
# torch.rand in float32 returns multiples of 2^-24: a coin that is 0 with probability 2^-24.
COIN_BITS = 24


def top_p_filter(row, top_p: float | None = DRAFT_TOP_P) -> np.ndarray:
    """The draft row after a top-p filter (`warps.top_p`), renormalised; None: the row itself."""
    row = np.asarray(row, dtype=np.float64)
    return row if top_p is None or top_p >= 1.0 else warps.top_p(row, top_p)


def unwarped(rows, temperature: float | None = REQUEST_TEMPERATURE) -> np.ndarray:
    """The target's rows before the request's temperature: rows = softmax(logits / T), so the unwarped
    rows are softmax(logits) = norm(rows ** T) (`warps.temperature` at 1 / T).  None or 1: the rows themselves."""
    rows = np.asarray(rows, dtype=np.float64)
    return rows if temperature is None or temperature == 1.0 else warps.temperature(rows, 1.0 / temperature)


def round_bits(rows, bits: int = BF16_BITS) -> np.ndarray:
    """Rows rounded to `bits` significant bits (8: bfloat16), round to nearest even on float32's bits, as float64."""
    rows = np.asarray(rows, dtype=np.float64)
    if bits >= 24:
        return rows
    u = rows.astype(np.float32).view(np.uint32).astype(np.uint64)
    drop = 24 - bits  # float32 keeps 23 explicit mantissa bits
    half = (1 << (drop - 1)) - 1
    u = ((u + half + ((u >> drop) & 1)) >> drop) << drop
    return u.astype(np.uint32).view(np.float32).astype(np.float64)


def bf16(rows, bits: int = BF16_BITS) -> np.ndarray:
    """Rows rounded to `bits` significant bits (`round_bits`; 8: bfloat16), renormalised."""
    out = round_bits(rows, bits)
    return out / out.sum(axis=-1, keepdims=True)


def _coupled_row(x: int, p_row, p_to) -> dict[int, float]:  # law of the coupled draft given x ~ p_row
    keep = min(1.0, p_to[x] / p_row[x])
    out = {x: keep} if keep > 0 else {}
    if keep < 1.0:
        extra = np.maximum(np.asarray(p_to) - np.asarray(p_row), 0.0)
        for y in np.flatnonzero(extra):
            out[int(y)] = out.get(int(y), 0.0) + (1.0 - keep) * float(extra[y] / extra.sum())
    return out


def coupled_drafts(x_draft, p, p_to, rng) -> np.ndarray:
    """Drafts drawn from the rows p_to, made from drafts x_draft drawn from p (maximal coupling, position by
    position): x_t is kept with probability min(1, p_to(x_t) / p(x_t)), else replaced by a draw from
    norm(max(0, p_to - p)).  Each result is distributed as p_to[t]; it equals x_t unless the rows differ there."""
    out = []
    for t, x in enumerate(x_draft):
        x = int(x)
        ratio = p_to[t][x] / p[t][x]
        if ratio >= 1.0 or rng.random() < ratio:
            out.append(x)
        else:
            out.append(mrs.sample(np.maximum(np.asarray(p_to[t]) - np.asarray(p[t]), 0.0), rng))
    return np.array(out, dtype=np.int64)


def coupled_law(x_draft, p, p_to, law_given_drafts) -> dict[tuple, float]:
    """Exact law of law_given_drafts applied to `coupled_drafts(x_draft, p, p_to)`: a sum over the coupled drafts."""
    rows = [_coupled_row(int(x), p[t], p_to[t]) for t, x in enumerate(x_draft)]
    law = {}
    for xs in itertools.product(*[list(r.items()) for r in rows]):
        chance = float(np.prod([c for _, c in xs]))
        if chance <= 0:
            continue
        for out, v in law_given_drafts([y for y, _ in xs]).items():
            law[out] = law.get(out, 0.0) + chance * float(v)
    return law


# ---------------------------------------------------------------- the single-call forms

class DraftFilterNotPassed(Bug):
    """transformers #47932: the drafts come from the top-p-filtered draft row, the verifier is handed the raw row.

    Single-call form: the checker's drafts x ~ p are turned into drafts of top_p_filter(p) by
    `coupled_drafts`, then verified with `mrs.verify` against the raw p it was handed.  top_p None: no
    filter, `mrs.verify` itself (the negative control)."""

    def __init__(self, top_p: float | None = DRAFT_TOP_P):
        name = "draft_filter_not_passed" if top_p is not None else "draft_filter_not_passed_control"
        super().__init__(name, f"the drafts come from the draft row after a top-p {top_p} filter, but the verifier "
                               "is handed the unfiltered row (transformers #47932)")
        self.top_p = top_p
        self._seen = {}  # p's bytes -> its filtered rows: a check hands the same rows thousands of times

    def _filtered(self, p):
        p = np.asarray(p, dtype=np.float64)
        key = (p.shape, p.tobytes())
        if key not in self._seen:
            if len(self._seen) >= 256:
                self._seen.clear()
            rows = np.stack([top_p_filter(row, self.top_p) for row in p])
            rows.setflags(write=False)
            self._seen[key] = rows
        return self._seen[key]

    def sample(self, x_draft, p, q, rng):
        return mrs.verify(coupled_drafts(x_draft, p, self._filtered(p), rng), p, q, rng)

    def law(self, x_draft, p, q) -> dict:
        return coupled_law(x_draft, p, self._filtered(p), lambda xs: laws.token_call_law(xs, p, q))


class TargetNotWarped(Bug):
    """vLLM #9834: the target's rows reach the verifier without the request's temperature.

    Single-call form: the checker's q are the warped rows (what plain sampling draws from); the verifier
    uses `unwarped(q, T)`.  T = 1: `mrs.verify` itself (the negative control)."""

    def __init__(self, temperature: float = REQUEST_TEMPERATURE):
        name = "target_not_warped" if temperature != 1.0 else "target_not_warped_control"
        super().__init__(name, f"the target's rows are verified without the request's temperature {temperature:g} "
                               "(the drafts had it): the output follows the unwarped target (vLLM #9834)")
        self.temperature = temperature

    def sample(self, x_draft, p, q, rng):
        return mrs.verify(x_draft, p, unwarped(q, self.temperature), rng)

    def law(self, x_draft, p, q) -> dict:
        return laws.token_call_law(x_draft, p, unwarped(q, self.temperature))


class InclusiveCoin(Bug):
    """SGLang #35771 (and transformers' `r <= ratio`): keeps x iff u <= q(x) / p(x), with a coin u that is a
    multiple of 2^-bits (float32's torch.rand: bits 24), so u = 0 keeps a draft the target gives probability 0.

    inclusive False: the strict u < q(x) / p(x) with the same coin (the negative control)."""

    def __init__(self, inclusive: bool = True, bits: int = COIN_BITS):
        name = "inclusive_accept_zero_coin" if inclusive else "inclusive_accept_zero_coin_control"
        super().__init__(name, f"accepts iff u <= q(x) / p(x) with a coin that is 0 with probability 2^-{bits}: "
                               "a draft the target gives probability 0 can be kept (SGLang #35771)")
        self.inclusive, self.bits = inclusive, bits

    def _keep(self, ratio: float) -> float:  # P(the coin keeps x), coin = floor(U 2^b) / 2^b
        scale = 2.0 ** self.bits
        if self.inclusive:
            return min(1.0, (np.floor(ratio * scale) + 1.0) / scale)
        return min(1.0, np.ceil(ratio * scale) / scale)

    def sample(self, x_draft, p, q, rng):
        scale = 2.0 ** self.bits
        out = []
        for t, x in enumerate(x_draft):
            x = int(x)
            u = np.floor(rng.random() * scale) / scale
            ratio = q[t][x] / p[t][x]
            if u <= ratio if self.inclusive else u < ratio:
                out.append(x)
                continue
            return np.array(out + [mrs.sample(mrs.residual(p[t], q[t]), rng)])
        return np.array(out + [mrs.sample(np.asarray(q[len(x_draft)], dtype=np.float64), rng)])

    def law(self, x_draft, p, q) -> dict:
        return laws.token_call_law(x_draft, p, q, ratio=lambda p_t, q_t, x: self._keep(q_t[x] / p_t[x]))


class UnguardedResidual(Bug):
    """vLLM PR #45060, llama.cpp #28158, GHSA-8wr5-jm2h-8r4f: after a rejection the residual max(0, q - p) is
    inverted without checking its sum, so an all-zero residual (p and q equal to rounding) gives the id V,
    one past the vocabulary.  guarded True: falls back to q, as `mrs.verify` does (the negative control)."""

    def __init__(self, guarded: bool = False):
        name = "unguarded_residual" if not guarded else "unguarded_residual_control"
        super().__init__(name, "an all-zero residual max(0, q - p) gives the token id V, outside the vocabulary "
                               "(vLLM PR #45060, llama.cpp #28158, GHSA-8wr5-jm2h-8r4f)")
        self.guarded = guarded

    def sample(self, x_draft, p, q, rng):
        out = []
        for t, x in enumerate(x_draft):
            x = int(x)
            if rng.random() < q[t][x] / p[t][x]:
                out.append(x)
                continue
            excess = np.maximum(np.asarray(q[t], dtype=np.float64) - p[t], 0.0)
            if excess.sum() > 0 or self.guarded:
                return np.array(out + [mrs.sample(excess if excess.sum() > 0 else np.asarray(q[t], float), rng)])
            rng.random()  # the inverse CDF of an all-zero row still draws its uniform, and lands past the end
            return np.array(out + [len(excess)])
        return np.array(out + [mrs.sample(np.asarray(q[len(x_draft)], dtype=np.float64), rng)])

    def law(self, x_draft, p, q) -> dict:
        def resample(p_t, q_t, x):
            excess = [max(0.0, float(b) - float(a)) for a, b in zip(p_t, q_t)]
            if sum(excess) > 0:
                return excess
            return list(q_t) if self.guarded else [0.0] * len(excess) + [1.0]  # all the mass on the id V
        return laws.token_call_law(x_draft, p, q, resample=resample)


def _one_hot(row) -> list[float]:
    out = [0.0] * len(row)
    out[laws.first_max(row)] = 1.0
    return out


def argmax_last_law(kept, p, q) -> dict:
    """The law of one call that tests the drafts `kept` as `verify` does but takes the argmax (the first maximum)
    where it should sample the last token: of the residual after a rejection, of q[K] after K acceptances."""
    K = len(kept)
    stopping, last, path = [], [], 1.0
    for t, x in enumerate(kept):
        accept = min(1.0, q[t][x] / p[t][x])
        stopping.append(path * (1 - accept))
        last.append(_one_hot(mrs.residual(np.asarray(p[t], float), np.asarray(q[t], float))))
        path *= accept
    return laws.stopped_law(kept, stopping + [path], last + [_one_hot(q[K])])


class ArgmaxWhileSampling(Bug):
    """mistral.rs PR #2424, ROCm ATOM PR #2318: on the sampling path every token is the argmax of its filtered
    row: the drafts are the draft rows' argmax (verified against their probabilities p), and the token the
    verifier draws after a rejection or as the bonus is its row's argmax.  argmax False: drafts and draws
    are sampled, `mrs.verify` itself (the negative control)."""

    def __init__(self, argmax: bool = True):
        name = "argmax_while_sampling" if argmax else "argmax_while_sampling_control"
        super().__init__(name, "takes the argmax of the filtered rows where it should sample: greedy drafts and "
                               "greedy draws after the accept tests (mistral.rs PR #2424, ROCm ATOM PR #2318)")
        self.argmax = argmax

    def sample(self, x_draft, p, q, rng):
        if not self.argmax:
            return mrs.verify(x_draft, p, q, rng)
        out = []
        for t in range(len(x_draft)):
            x = laws.first_max(p[t])
            if rng.random() < q[t][x] / p[t][x]:
                out.append(x)
                continue
            return np.array(out + [laws.first_max(mrs.residual(p[t], q[t]))])
        return np.array(out + [laws.first_max(q[len(x_draft)])])

    def law(self, x_draft, p, q) -> dict:
        if not self.argmax:
            return laws.token_call_law(x_draft, p, q)
        return argmax_last_law([laws.first_max(p[t]) for t in range(len(x_draft))], p, q)


class MixedPrecisionDraft(Bug):
    """DeepSpec #31: the drafts were sampled from bfloat16 probabilities and verified with float32 ones.

    Single-call form: the checker's drafts come from p; the verifier is handed `bf16(p, bits)`, the same
    rows at 8 significant bits (the same mismatch, the two precisions' roles swapped).  bits 24: float32,
    `mrs.verify` on float32 rows (the negative control)."""

    def __init__(self, bits: int = BF16_BITS):
        name = "mixed_precision_draft" if bits < 24 else "mixed_precision_draft_control"
        super().__init__(name, f"the draft rows the drafts were sampled from and those verified differ by rounding "
                               f"to {bits} significant bits (bfloat16 against float32; DeepSpec #31)")
        self.bits = bits

    def sample(self, x_draft, p, q, rng):
        return mrs.verify(x_draft, bf16(p, self.bits), q, rng)

    def law(self, x_draft, p, q) -> dict:
        return laws.token_call_law(x_draft, bf16(p, self.bits), q)


# The verifier checked as block verification, for vllm-ascend #7807 (conform.TOKEN_LEVEL is this object).
TOKEN_LEVEL = Bug("token_level", "token-level verification (mrs.verify): check it with algorithm 'token'",
                         mrs.verify, laws.token_call_law)
BLOCK = Bug("block_verification", "block verification (mrs.verify_block): check it with algorithm 'block'",
                   mrs.verify_block, laws.block_call_law)


# ---------------------------------------------------------------- pipeline forms

# The bugs around the verifier as whole pipelines: the correct `Toy` with one piece changed (checked by
# specref.proof.pipeline against plain sampling).  Each is the pipeline form of a single-call form above,
# linked to it in GALLERY (`Shipped.pipeline`).

class UnfilteredDraftRows(Toy):
    """Shipped in Hugging Face transformers, #47932 (PRs #47961, #48007): the drafts were sampled from the
    draft's top-k/top-p-filtered logits, and the raw distribution was handed on as the draft's probabilities."""

    about = "the drafts are sampled from the warped draft rows but the verifier gets the unwarped ones"

    def verify_p(self):
        return self.p_raw


class GreedyDraft(Toy):
    """Shipped in Hugging Face transformers, #32867: the assistant decoded greedily while its sampling
    probabilities were passed on to the verifier."""

    about = "the draft decodes greedily (argmax) while its sampling probabilities go to the verifier"

    def drafted_by(self):
        return warps.greedy(self.p_warped)


class TargetNotWarpedPipeline(Toy):
    """Shipped in vLLM, #9834 (PR #10198): the request's sampling parameters were not applied to the
    target's probabilities during verification."""

    about = "the target's rows reach the verifier without the request's temperature/top-k/top-p"

    def verify_q(self):
        return self.q_raw


class ArgmaxAfterFilters(Toy):
    """Shipped in mistral.rs, PR #2424 (and ROCm ATOM PR #2318): with sampling asked for, the token was the
    argmax of the filtered distribution; here the target's own token (after a rejection, or the bonus)."""

    about = "the target's token is the argmax of its filtered row instead of a draw from it"

    def emitted_by(self, rows):
        return warps.greedy(rows)


class Bf16Draft(Toy):
    """Shipped in DeepSpec, #31: the drafts were sampled from bf16 probabilities and verified with float32
    ones.  bf16 keeps 8 significant bits, so the two differ by up to 2^-8 relative: a small bias."""

    about = "the drafts are drawn from bf16-rounded draft rows, the verifier gets the float32 ones"

    def drafted_by(self):
        return round_bits(self.p_warped)


PIPELINE_BUGS = {"unfiltered_draft_rows": UnfilteredDraftRows, "greedy_draft": GreedyDraft,
                 "target_not_warped": TargetNotWarpedPipeline, "argmax_after_filters": ArgmaxAfterFilters,
                 "bf16_draft": Bf16Draft}


# ---------------------------------------------------------------- the gallery

# Tiers of the conformance checker (docs/conformance.md): "exact" (vectors and the two injected edge
# cases), "one-call" (the chi-square of one call's law), "sequence", "pipeline" (whole generation).
@dataclass(frozen=True)
class Shipped:
    """One bug that shipped: its single-call form, where it shipped, the tier that catches it, its negative control."""

    bug: Bug
    where: str  # project and number
    algorithm: str  # "token" or "block": what the checker checks it as
    tier: str  # which of the checker's tiers catches it
    around: bool  # in the pipeline around the verifier: a verify-only check of real code cannot see it
    control: Bug  # the same code with the bug switched off: the checker must pass it
    edge_check: str = ""  # the name of the exact-tier check it fails, if it is an edge case
    contract: str = ""  # what a run's contract check says when this bug's output ends the run first
    pipeline: type | None = None  # its pipeline form (a Toy subclass), for the bugs around the verifier

    @property
    def name(self) -> str:
        return self.bug.name


GALLERY = [
    Shipped(DraftFilterNotPassed(), "transformers #47932 (PRs #47961, #48007)", "token",
            "pipeline (single-call form: exact vectors, one-call)", True, DraftFilterNotPassed(None),
            pipeline=UnfilteredDraftRows),
    Shipped(broken.greedy_draft_softmax_ratio, "transformers #32867; jaymody/speculative-sampling #3 (#4)", "token",
            "pipeline (single-call form: exact vectors, one-call)", True, TOKEN_LEVEL, pipeline=GreedyDraft),
    Shipped(TargetNotWarped(), "vLLM #9834 (PR #10198)", "token",
            "pipeline (single-call form: exact vectors, one-call)", True, TargetNotWarped(1.0),
            pipeline=TargetNotWarpedPipeline),
    Shipped(InclusiveCoin(), "SGLang #35771; transformers' r <= ratio", "token",
            "exact (edge u = 0); every output seen", False, InclusiveCoin(inclusive=False),
            edge_check="edge q(x) = 0, u = 0"),
    Shipped(UnguardedResidual(), "vLLM PR #45060, llama.cpp #28158, GHSA-8wr5-jm2h-8r4f", "token",
            "exact (edge all-zero residual)", False, UnguardedResidual(guarded=True),
            edge_check="edge all-zero residual", contract="a token id outside the vocabulary"),
    Shipped(TOKEN_LEVEL, "vllm-ascend #7807 (PR #7808)", "block", "exact vectors, one-call (as block)", False, BLOCK),
    Shipped(broken.residual_only_rejected_entry, "EAGLE #20", "token", "exact vectors, one-call", False,
            TOKEN_LEVEL),
    Shipped(ArgmaxWhileSampling(), "mistral.rs PR #2424, ROCm ATOM PR #2318", "token",
            "pipeline (single-call form: exact vectors, one-call)", True, ArgmaxWhileSampling(False),
            pipeline=ArgmaxAfterFilters),
    Shipped(MixedPrecisionDraft(), "DeepSpec #31", "token", "pipeline (single-call form: one-call, p = q case, n > 13 000)",
            True, MixedPrecisionDraft(24), pipeline=Bf16Draft),
]
BY_NAME = {s.name: s for s in GALLERY}


def signatures(algorithm: str) -> list[Bug]:
    """The single-call forms the one-call diagnosis compares with when checking as `algorithm` (edge cases aside:
    their laws equal the correct law on the checker's cases to within 2^-24, so the edge checks name them)."""
    return [s.bug for s in GALLERY if s.algorithm == algorithm and not s.edge_check]


def edge_signature(check_name: str, detail: str = "") -> Shipped | None:
    """The shipped bug a failing exact-tier edge check (or the run's contract check, by its detail) points to."""
    return next((s for s in GALLERY if s.edge_check == check_name or
                 (check_name == "contract" and s.contract and s.contract in detail)), None)
