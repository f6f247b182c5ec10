"""HumanEval: the problems and their execution, the statistics of the report, the generation
loop with stop sequences, resume, and a smoke run of the whole command on the real model."""

import argparse
import hashlib
import dataclasses
import json
import math

import numpy as np
import pytest

from specref import speedup
from specref.apps import demo, pilot, sandbox
from specref.apps import humaneval as he  # the command: add_arguments, run (and measure_costs, which run calls)
from specref.apps.humaneval import runner  # run_methods makes its drafts with runner.by_name
from specref.apps.humaneval.choices import GREEDY, NUCLEUS, PILOT_PROBLEMS, pilot_problems, setting_warps
from specref.apps.humaneval.problems import (BODY_INDENT, HUMANEVAL_SHA256, STOP_SEQUENCES, check_completion,
                                             load_problems, parse_problems, program_text, truncate_at_stop)
from specref.trees import Tree
from specref.apps.humaneval import report as he_report
from specref.apps.humaneval.report import (REQUIRED_ROW_FIELDS, add_bench_model_check, difference_interval, parity,
                                           summarize, wilson_interval)
from specref.apps.humaneval.runner import (NGRAM_ORDER, PROMPT_LOOKUP_N, Benchmark, Method, aggregate, generate,
                                           method_rng, settings_key)
from specref.smollm2 import weights
from specref.apps.named_drafts import DRAFTS, by_name
from specref.drafts import NGramDraft
from specref.runstats import RunStats
from specref.smollm2.tokenizer import Tokenizer

QUICK = sandbox.ResourceLimits(seconds=5.0)


@pytest.fixture(scope="module")
def problems():
    return load_problems(progress=lambda message: None)


@pytest.fixture(scope="module")
def tokenizer():
    return Tokenizer.from_gguf(weights.gguf_path(progress=lambda message: None))


class NGramCodeModel(NGramDraft):
    """A trigram of HumanEval prompts and solutions used as a TARGET: a cheap real model
    (the sampler only needs next-token distributions) with the tokenizer attached, so the
    whole benchmark pipeline runs in a second.  It counts the target calls it serves."""

    calls = 0

    def next_probs(self, tokens, k):  # [n] -> [k, V]
        self.calls += 1
        return super().next_probs(tokens, k)


@pytest.fixture(scope="module")
def code_model(problems, tokenizer):
    sequences = [tokenizer.encode(p.prompt + p.canonical_solution) for p in problems]
    model = NGramCodeModel.fit(sequences, tokenizer.vocab_size, n=3)
    model.tokenizer = tokenizer
    return model


def parse(argv, **extra):
    parser = argparse.ArgumentParser()
    he.add_arguments(parser)
    args = parser.parse_args(argv)
    for name, value in extra.items():
        setattr(args, name, value)
    return args


# ---- problems and execution --------------------------------------------------------------

def test_the_164_problems(problems):
    assert len(problems) == 164
    assert [p.task_id for p in problems] == [f"HumanEval/{i}" for i in range(164)]
    assert all(f"def {p.entry_point}(" in p.prompt and "def check(candidate)" in p.test for p in problems)


@pytest.mark.parametrize("index", [0, 1, 2, 31, 163])
def test_canonical_solutions_pass(problems, index):
    result = check_completion(problems[index], problems[index].canonical_solution, QUICK)
    assert result.status == "passed", result.stderr_tail


def test_wrong_solutions_fail(problems):
    p = problems[0]  # has_close_elements
    assert check_completion(p, "    return False\n", QUICK).status == "failed"
    assert check_completion(p, "    return True\n", QUICK).status == "failed"
    assert check_completion(p, "    return (\n", QUICK).status == "failed"  # syntax error
    assert check_completion(p, "", QUICK).status == "failed"  # an empty body is a syntax error too


def test_program_text(problems):
    p = problems[0]
    text = program_text(p, "    pass\n")
    assert text.startswith(p.prompt + "    pass\n")
    assert p.test in text and text.rstrip().endswith(f"check({p.entry_point})")


def test_truncate_at_stop():
    assert truncate_at_stop("    return 1\n\ndef g():\n    pass") == ("    return 1\n", True)
    assert truncate_at_stop("    return 1\n# note\nclass A:") == ("    return 1", True)
    assert truncate_at_stop("    x = 1\n    # indented comments stay\n    return x") == (
        "    x = 1\n    # indented comments stay\n    return x", False)
    assert truncate_at_stop("    return 1\nprint(f(2))\nif __name__") == ("    return 1", True)


def test_parse_problems_rejects_bad_records():
    with pytest.raises(ValueError, match="line 2"):
        parse_problems(['{"task_id": "a", "prompt": "", "canonical_solution": "", "test": "", "entry_point": "f"}',
                           '{"task_id": "b"}'])


# ---- statistics ----------------------------------------------------------------------------

def test_wilson_interval_known_values():
    # Newcombe (1998) Table I: 81/263 -> 0.2553-0.3662; 15/148 -> 0.0624-0.1605; 0/20 -> 0-0.1611
    for (s, n), (low, high) in {(81, 263): (0.2553, 0.3662), (15, 148): (0.0624, 0.1605),
                                (0, 20): (0.0, 0.1611)}.items():
        got = wilson_interval(s, n)
        assert got == pytest.approx((low, high), abs=6e-5), (s, n, got)


def test_difference_interval_known_values():
    # Newcombe (1998) Table II, method 10: 56/70 - 48/80 -> 0.0524 to 0.3339; 9/10 - 3/10 -> 0.1705 to 0.8090
    assert difference_interval(56, 70, 48, 80) == pytest.approx((0.0524, 0.3339), abs=6e-5)
    assert difference_interval(9, 10, 3, 10) == pytest.approx((0.1705, 0.8090), abs=6e-5)


def test_parity_statement():
    rows = [
        {"method": "ArS", "draft": None, "temperature": 0.8, "top_p": 0.95, "passed": 20, "n_problems": 164,
         "pass_at_1": 20 / 164},
        {"method": "SpS", "draft": "ngram", "K": 4, "temperature": 0.8, "top_p": 0.95, "passed": 23, "n_problems": 164,
         "pass_at_1": 23 / 164},
        {"method": "SpS", "draft": "uniform", "K": 4, "temperature": 0.8, "top_p": 0.95, "passed": 60, "n_problems": 164,
         "pass_at_1": 60 / 164},  # the negative control: far off ArS, the report must say so
    ]
    near, far = parity(rows)
    assert near["agree"] and "parity within sampling error" in near["statement"]
    assert not far["agree"] and "NOT at parity" in far["statement"]


def test_parity_statements_tell_a_drafts_chain_from_its_tree():
    ars = {"method": "ArS", "draft": None, "K": 0, "tree": None, "temperature": 0.0, "top_p": None, "passed": 8,
           "n_problems": 164, "pass_at_1": 8 / 164}
    chain = {**ars, "method": "SpS", "draft": "neural", "K": 1}
    tree = {**chain, "K": 5, "tree": "4+1", "drawing": "topk"}
    statements = [r["statement"] for r in parity([ars, chain, tree])]
    # the same names as the progress log gives the two methods (one function makes both)
    names = [Method("neural", 1, 0.0, None).label, Method("neural", 5, 0.0, None, "4+1", "topk").label]
    assert names == ["SpS[neural,K=1] greedy", "SpS[neural,tree=4+1,topk] greedy"]
    assert statements[0].startswith(f"greedy: {names[0].split()[0]} pass@1")
    assert statements[1].startswith(f"greedy: {names[1].split()[0]} pass@1")


# ---- generation ----------------------------------------------------------------------------

def test_generate_stops_at_stop_sequences(problems, code_model, tokenizer):
    method = Method(None, 0, *NUCLEUS)
    for p in problems[:5]:
        g = generate(tokenizer.encode(p.prompt), code_model, None, method, 64, tokenizer,
                        method_rng(0, p.task_id, method))
        assert not any(s in g.completion for s in STOP_SEQUENCES)
        assert g.stopped_by in ("stop", "control", "length")
        assert g.stats.tokens <= 64 and g.stats.loops == g.stats.tokens and g.stats.n_drafted == 0
        if g.stopped_by == "length":
            assert g.stats.tokens == 64


def test_greedy_sps_equals_greedy_ars(problems, code_model, tokenizer):
    """Greedy SpS returns the target's argmax path whatever the draft (Chen Theorem 1 at T = 0)."""
    for p in problems[:4]:
        prompt = tokenizer.encode(p.prompt)
        ars = generate(prompt, code_model, None, Method(None, 0, *GREEDY), 40, tokenizer,
                          np.random.default_rng(1))
        for draft in [d for d in DRAFTS if not d.startswith("neural")]:  # neural drafts need SmolLM2: test_draft.py
            d = by_name(draft, tokenizer.vocab_size, lambda: [tokenizer.encode(q.canonical_solution)
                                                                   for q in problems if q is not p])
            for verify in ("token", "block"):
                sps = generate(prompt, code_model, d, Method(draft, 3, *GREEDY), 40, tokenizer,
                                  np.random.default_rng(2), verify=verify)
                assert sps.completion == ars.completion, (p.task_id, draft, verify)
                assert sps.stats.loops < sps.stats.tokens or draft == "uniform" or sps.stats.n_accepted == 0
                assert 0 <= sps.stats.n_accepted <= sps.stats.n_examined <= sps.stats.n_drafted <= 3 * sps.stats.loops
                drafted = sps.stats.calls_by_drafted  # every call drafts K = 3 unless the draft is adaptive
                assert sum(drafted) == sps.stats.loops and (drafted[:3] == [0, 0, 0] or draft.endswith("adaptive"))
                assert sps.stats.n_drafted == sum(k * n for k, n in enumerate(drafted))
                # one-hot rows: both verifiers expect exactly the tokens greedy produces
                assert sps.expected_calls == sps.stats.loops
                assert sps.expected_token == pytest.approx(sps.expected_block)


def test_ngram_draft_leaves_its_own_problem_out(problems, tokenizer):
    bench = Benchmark(problems[:3], type("M", (), {"tokenizer": tokenizer})(),
                         parse(["--limit", "3"]), "test")
    others = bench.solutions_of_others("HumanEval/1")
    own = tokenizer.encode(problems[1].canonical_solution)
    assert len(others) == 2 and own not in others


# ---- the command ----------------------------------------------------------------------------

def test_run_resumes_from_its_jsonl(tmp_path, code_model):
    out = tmp_path / "he.json"
    argv = ["--limit", "2", "--max-new-tokens", "12", "--drafts", "prompt-lookup", "--json", str(out),
            "--timeout", "5", "--no-bench-costs"]
    assert he.run(parse(argv), model=code_model) == 0
    first = json.loads(out.read_text())
    lines = (tmp_path / "he.jsonl").read_text().splitlines()
    assert len(lines) == 2 * 4  # 2 problems x (ArS, SpS) x (nucleus, greedy)

    # a torn last line, as an interrupted write leaves it, is ignored and redone
    (tmp_path / "he.jsonl").write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:20])
    code_model.calls = 0
    assert he.run(parse(argv), model=code_model) == 0
    redone = code_model.calls
    assert 0 < redone <= 12 + 1  # one generation of at most 12 tokens (plus the prompt call of SpS)
    second = json.loads(out.read_text())
    strip = lambda rows: [{k: v for k, v in r.items() if k not in ("ms_per_token", "speedup", "ms_per_loop",
                                                                   "model_check_speedup", "c", "score_cost")}
                          for r in rows]
    assert strip(second["rows"]) == strip(first["rows"])  # the same seed regenerates the same sample

    # nothing left to do: no model call at all
    code_model.calls = 0
    assert he.run(parse(argv), model=code_model) == 0
    assert code_model.calls == 0

    # different settings are not mixed with stored ones
    code_model.calls = 0
    assert he.run(parse(argv[:-5] + ["--seed", "7", "--json", str(out), "--timeout", "5", "--no-bench-costs"]), model=code_model) == 0
    assert code_model.calls > 0


def test_verifiers_are_kept_apart_on_resume(tmp_path, code_model):
    out = tmp_path / "he.json"
    argv = ["--limit", "1", "--max-new-tokens", "12", "--drafts", "prompt-lookup", "--json", str(out),
            "--timeout", "5", "--no-bench-costs"]
    assert he.run(parse(argv), model=code_model) == 0
    code_model.calls = 0
    assert he.run(parse(argv + ["--verify", "block"]), model=code_model) == 0
    assert code_model.calls > 0  # not taken from the token-level results
    records = [json.loads(line) for line in (tmp_path / "he.jsonl").read_text().splitlines()]
    assert len(records) == 2 * 4 and len({r["key"] for r in records}) == 8
    rows = json.loads(out.read_text())["rows"]
    assert {r["verify"] for r in rows if r["method"] == "SpS"} == {"block"}
    assert json.loads(out.read_text())["settings"]["verify"] == "block"
    for r in rows:
        if r["method"] == "SpS":
            assert r["expected_tokens_per_call_block"] >= 1 and r["expected_tokens_per_call_token"] >= 1


def test_lookup_n_reaches_the_lookup_drafts_and_keeps_their_results_apart(tmp_path, code_model, monkeypatch):
    out = tmp_path / "he.json"
    argv = ["--limit", "1", "--max-new-tokens", "12", "--drafts", "prompt-lookup-adaptive,uniform", "--json", str(out),
            "--timeout", "5", "--no-bench-costs"]
    asked = []
    monkeypatch.setattr(runner, "by_name", lambda name, *a, **k: asked.append((name, a[3])) or by_name(name, *a, **k))
    assert he.run(parse(argv), model=code_model) == 0
    assert set(asked) == {("prompt-lookup-adaptive", PROMPT_LOOKUP_N), ("uniform", PROMPT_LOOKUP_N)}
    first = {json.loads(line)["key"] for line in (tmp_path / "he.jsonl").read_text().splitlines()}
    assert len(first) == 6                                      # (ArS, adaptive, uniform) x (nucleus, greedy)

    asked.clear()
    assert he.run(parse(argv + ["--lookup-n", "8"]), model=code_model) == 0
    assert asked == [("prompt-lookup-adaptive", 8)]              # only the lookup draft is made again, matching up to 8
    records = [json.loads(line) for line in (tmp_path / "he.jsonl").read_text().splitlines()]
    added = {r["key"] for r in records} - first
    assert len(records) == 8 and len(added) == 2
    assert all(r["method"].startswith("SpS") and "adaptive" in r["method"] for r in records if r["key"] in added)
    report = json.loads(out.read_text())
    assert report["settings"]["lookup_n"] == 8 and len(report["rows"]) == 6   # ArS and uniform taken from the first run


def test_the_key_holds_the_settings_of_a_sample_and_the_kernels_that_timed_it(monkeypatch):
    args = parse(["--max-new-tokens", "96"])
    method = Method("prompt-lookup-adaptive", 4, *NUCLEUS)
    monkeypatch.setattr(runner, "openblas_info", lambda: {"core": "SkylakeX"})
    settings = {"kind": "table", "method": {"draft": "prompt-lookup-adaptive", "K": 4, "temperature": NUCLEUS[0],
                                            "top_p": NUCLEUS[1]}, "verify": "token", "seed": 0,
                "max_new_tokens": 96, "model": "m", "problems_sha256": HUMANEVAL_SHA256,
                "ngram_order": NGRAM_ORDER, "prompt_lookup_n": 3, "stops": STOP_SEQUENCES,
                "body_indent": BODY_INDENT, "blas_core": "SkylakeX"}
    expected = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
    assert settings_key("table", method, args, "m") == expected
    assert settings_key("table", method, parse(["--max-new-tokens", "96", "--lookup-n", "8"]), "m") != expected
    # OPENBLAS_CORETYPE forcing other kernels changes every timing: a resumed run does not reuse those results
    monkeypatch.setattr(runner, "openblas_info", lambda: {"core": "Haswell"})
    assert settings_key("table", method, args, "m") != expected


def test_a_row_of_the_trained_draft_is_keyed_on_its_draft_file(tmp_path):
    """A neural row's stored result belongs to one draft file: another file (or a new shipped draft) is another
    key, so a resumed run never mixes two drafts.  A row with no trained draft keeps its key (the control)."""
    other = tmp_path / "other.npz"
    other.write_bytes(b"another draft")                   # only its SHA-256 enters the key
    shipped, given = parse(["--max-new-tokens", "96"]), parse(["--max-new-tokens", "96", "--draft-file", str(other)])
    for draft in ("neural", "neural+lookup"):
        method = Method(draft, 4, *NUCLEUS)
        assert settings_key("table", method, shipped, "m") != settings_key("table", method, given, "m")
    lookup = Method("prompt-lookup", 4, *NUCLEUS)
    assert settings_key("table", lookup, shipped, "m") == settings_key("table", lookup, given, "m")


@pytest.mark.parametrize("given, written", [("runs/a.json", "runs/a.jsonl"), ("runs/a.v1", "runs/a.v1.jsonl"),
                                            ("runs/a.v2", "runs/a.v2.jsonl"), ("runs/a", "runs/a.jsonl")])
def test_each_json_name_has_its_own_jsonl(given, written):
    assert str(runner.results_path(given)) == written


def test_k_sweep(tmp_path, code_model):
    out = tmp_path / "sweep.json"
    argv = ["--limit", "1", "--max-new-tokens", "16", "--drafts", "prompt-lookup", "--k-sweep", "1,3",
            "--json", str(out), "--no-bench-costs"]
    assert he.run(parse(argv), model=code_model) == 0
    rows = json.loads(out.read_text())["k_sweep"]
    assert [(r["draft"], r["K"]) for r in rows] == [(None, 0), ("prompt-lookup", 1), ("prompt-lookup", 3)]
    for r in rows:
        assert r["ms_per_16_tokens"] > 0 and r["ms_per_loop"] > 0
        assert 0 < r["tokens_per_loop_over_K_plus_1"] <= 1
    assert rows[0]["tokens_per_loop_over_K_plus_1"] == 1.0  # ArS: one token per loop


def test_bad_options_are_rejected(code_model, capsys):
    for argv, name in [(["--drafts", "prompt-lookup,medusa"], "--drafts"), (["--K", "0"], "--K"),
                       (["--k-sweep", "a,b"], "--k-sweep"), (["--lookup-n", "0"], "--lookup-n")]:
        with pytest.raises(SystemExit) as exit_info:
            he.run(parse(argv), model=code_model)
        assert exit_info.value.code == 2 and name in capsys.readouterr().err


@pytest.mark.slow
def test_smoke_real_model_with_a_hang_and_a_crash(tmp_path, smollm2, capsys):
    """The whole command on SmolLM2: 3 problems, a tiny budget; one completion hangs, one crashes,
    and the run goes on and reports both as failures.  --no-bench-costs: measuring the scoring costs took half
    of this test's minutes; the runs that measure them are checked with fixed costs below, and the measuring
    itself on the real model by tests/smollm2/test_real_sps.py's demo runs."""
    out = tmp_path / "smoke.json"
    overrides = {
        "HumanEval/1": "    while True:\n        pass\n",  # hangs
        "HumanEval/2": "    import ctypes\n    ctypes.string_at(0)\n",  # segfaults
    }
    args = parse(["--limit", "3", "--max-new-tokens", "8", "--drafts", "prompt-lookup", "--K", "2",
                  "--json", str(out), "--timeout", "1", "--no-bench-costs"], completion_overrides=overrides)
    assert he.run(args, model=smollm2) == 0
    report = json.loads(out.read_text())
    records = [json.loads(line) for line in (tmp_path / "smoke.jsonl").read_text().splitlines()]
    status = {(r["task_id"], r["method"]): r["status"] for r in records}
    assert len(status) == 3 * 4
    assert {s for (t, _), s in status.items() if t == "HumanEval/1"} == {"timeout"}
    assert {s for (t, _), s in status.items() if t == "HumanEval/2"} == {"crashed"}
    assert all(s in sandbox.STATUSES for s in status.values())
    rows = report["rows"]
    assert len(rows) == 4 and all(r["n_problems"] == 3 for r in rows)
    assert all(r["pass_at_1"] <= 1 / 3 for r in rows)  # two of the three problems cannot pass
    for r in rows:
        assert set(REQUIRED_ROW_FIELDS) <= set(r)
        assert math.isfinite(r["ms_per_token"]) and r["speedup"] > 0
        if r["method"] == "SpS":
            assert 0 <= r["alpha"] <= 1 and math.isfinite(r["model_check_speedup"])
            assert "model_check_speedup_bench" not in r  # --no-bench-costs: no costs to check it with
            assert r["predicted_speedup"] is None and r["predicted_note"] == he_report.NO_PILOT  # --K 2: no pilot
    assert len(report["parity"]) == 2
    printed = capsys.readouterr().out
    assert "[3/3] HumanEval/2" in printed and "running:" in printed and "| method |" in printed


def test_bench_model_check_uses_the_measured_scoring_cost():
    rows = [{"draft": None, "K": 0, "alpha": None, "c": None, "calls_by_drafted": [7]},
            {"draft": "prompt-lookup", "K": 4, "alpha": 0.5, "c": 0.01, "calls_by_drafted": [0, 0, 0, 0, 7]},
            {"draft": "prompt-lookup", "K": 9, "alpha": 0.5, "c": 0.01,   # K the bench did not measure
             "calls_by_drafted": [0] * 9 + [7]},
            {"draft": "prompt-lookup-adaptive", "K": 4, "alpha": 0.5, "c": 0.01, "calls_by_drafted": [3, 0, 0, 0, 1]},
            {"draft": "prompt-lookup-adaptive", "K": 4, "alpha": 0.5, "c": 0.01, "calls_by_drafted": [3, 0, 1, 0, 1]}]
    add_bench_model_check(rows, {"score_ratio": {4: 2.0}})
    # Leviathan Eq. 1: (1 - 0.5^5) / (1 - 0.5) = 1.9375 tokens per loop, for 4 * 0.01 + 2.0 decode steps
    assert rows[1]["model_check_speedup_bench"] == pytest.approx(1.9375 / 2.04)
    assert rows[0]["model_check_speedup_bench"] == 1.0 and rows[2]["model_check_speedup_bench"] is None
    # calls that drafted nothing cost a decode step and yield one token; a length the bench did not measure: none
    assert rows[3]["model_check_speedup_bench"] == pytest.approx((0.75 + 0.25 * 1.9375) / (0.75 + 0.25 * 2.04))
    assert rows[4]["model_check_speedup_bench"] is None


def test_bench_model_check_prices_a_tree_as_the_choices_did():
    # a tree of 5 nodes: the chain of 6 tokens timed cheaper than 5 (noise: priced at 1.30), the trees of 4 and 8
    # measured at 1.26 and 1.50 (1.32 between them): the tree's own cost, the higher
    costs = {"score_ratio": {"1": 1.0, "2": 1.2, "3": 1.22, "4": 1.30, "5": 1.24, "6": 1.40, "7": 1.44, "8": 1.51},
             "tree_score_ratio": {"4": 1.26, "8": 1.50}}
    profile = [[0.5, 0.1, 0.05]]
    rows = [{"draft": "neural", "K": 5, "tree": "3+2", "tree_profile": profile, "alpha": 0.6, "c": 0.03}]
    add_bench_model_check(rows, costs)
    assert rows[0]["model_check_speedup_bench"] == pytest.approx(
        speedup.tree_walltime_improvement(Tree.parse("3+2").parents, profile, 0.03, 1.32))


def test_bench_model_check_treats_a_scoring_cost_below_one_as_one():
    rows = [{"draft": "neural", "K": 1, "alpha": 0.4, "c": 0.05, "calls_by_drafted": [0, 3]}]
    add_bench_model_check(rows, {"score_ratio": {1: 0.94}})
    assert rows[0]["model_check_speedup_bench"] == pytest.approx(float(speedup.walltime_improvement_measured(0.4, 1, 0.05, 1.0)))


def test_records_stored_before_draft_lengths_were_counted_count_every_call_at_K():
    new = RunStats(tokens=9, loops=3, draft_calls=6, n_drafted=6, n_accepted=5, n_examined=6, calls_by_drafted=[1, 0, 2])
    old = {k: v for k, v in RunStats(tokens=8, loops=4, draft_calls=8, n_drafted=8, n_accepted=4,
                                     n_examined=6).counts().items() if k != "calls_by_drafted"}
    total, n, passed = aggregate([{**new.counts(), "status": "passed"}, old], 2)
    assert (n, passed) == (2, 1) and total.loops == 7 and total.calls_by_drafted == [1, 0, 2 + 4]


def fake_costs(ratio, warp=0.0):
    return {"score_ratio": {K: ratio(K) for K in range(1, 9)}, "tree_score_ratio": {4: ratio(4), 8: ratio(8)},
            "decode_ms_per_token": 10.0, "warp_ratio": {name: warp for name in setting_warps()}}


def test_K_and_the_tree_are_chosen_per_draft_stored_and_kept_on_resume(tmp_path, code_model, monkeypatch):
    """Without --K and --tree each draft gets the demo's choice (`demo.choose_K_replayed`, `demo.choose_tree_replayed`)
    from the run's measured costs and its replay over the pilot's text; a tree row where the tree pays (the replay's
    timings on this cheap target would decide whether one does, so the test makes it pay with a free draft;
    test_demo_trees covers none paying)."""
    tree_pays = True
    monkeypatch.setattr(he, "measure_costs", lambda model, repeats, **_: fake_costs(lambda K: 1.0))
    choose = demo.choose_tree_replayed
    monkeypatch.setattr(demo, "choose_tree_replayed", lambda replay, drawing, costs, chain: choose(
        dataclasses.replace(replay, draft_seconds=0.0 if tree_pays else 1e6,
                            depth_seconds=replay.depth_seconds * 0.0 if tree_pays else replay.depth_seconds + 1e6),
        drawing, costs, chain))
    out = tmp_path / "he.json"
    argv = ["--limit", "1", "--max-new-tokens", "12", "--drafts", "prompt-lookup", "--json", str(out), "--timeout", "5"]
    assert he.run(parse(argv), model=code_model) == 0
    report = json.loads(out.read_text())
    choices = report["choices"]
    assert len(choices) == 2 and all(c["draft"] == "prompt-lookup" and 1 <= c["K"] <= 8 for c in choices)
    assert all(("no tree pays" in c["why_tree"]) is (c["tree"] is None) and "(the chain: K = " in c["why_tree"]
               for c in choices)
    trees = [r for r in report["rows"] if r.get("tree")]
    assert [r["temperature"] for r in trees] == [c["temperature"] for c in choices if c["tree"]]
    assert bool(trees) is tree_pays and all(r["verify"] == "topk" and r["tree_profile"] for r in trees)
    records = [json.loads(line) for line in (tmp_path / "he.jsonl").read_text().splitlines()]
    assert sum(r["task_id"] == "choice" for r in records) == 2
    code_model.calls = 0
    monkeypatch.setattr(he, "measure_costs", lambda model, repeats, **_: fake_costs(lambda K: 1.5 + K, 0.1))  # measured anew
    assert he.run(parse(argv), model=code_model) == 0          # resumed: the stored choices, nothing run again
    assert code_model.calls == 0 and json.loads(out.read_text())["choices"] == choices


def test_the_choices_price_the_warp_of_every_row_and_refuse_costs_without_it(tmp_path, code_model, monkeypatch):
    """A sampled loop warps every row it scores: with warping a row at 0.3 decode steps, each choice is made with the
    costs `speedup.warped_costs` gives (control: a free warp leaves the measured costs as they are), and on the same
    replay it predicts less than it would with a free warp; costs measured without the warps' cost are refused, not
    priced as free.  (The replay's own timings on this cheap target vary from run to run, so the predictions are
    compared on one replay, not across two runs.)"""
    argv = ["--limit", "1", "--max-new-tokens", "12", "--drafts", "prompt-lookup", "--timeout", "5"]
    measured = [1.0] * pilot.K_CHOICES
    seen = {}
    choose_K = demo.choose_K_replayed
    for warp in (0.0, 0.3):
        seen[warp] = []
        monkeypatch.setattr(he, "measure_costs", lambda model, repeats, warp=warp, **_: fake_costs(lambda K: 1.0, warp))
        monkeypatch.setattr(demo, "choose_K_replayed", lambda replay, costs, warp=warp: (
            seen[warp].append((replay, list(costs))), choose_K(replay, costs))[1])
        assert he.run(parse(argv + ["--json", str(tmp_path / f"he{warp}.json")]), model=code_model) == 0
    assert len(seen[0.0]) == len(seen[0.3]) == 2                               # nucleus and greedy
    assert all(costs == pytest.approx(measured) for _, costs in seen[0.0])
    assert all(costs == pytest.approx(speedup.warped_costs(measured, 0.3)) for _, costs in seen[0.3])
    for replay, dear in seen[0.3]:
        assert pilot.best_K(replay, replay.c_by_depth, dear)[1] < pilot.best_K(replay, replay.c_by_depth, measured)[1]
    monkeypatch.setattr(he, "measure_costs", lambda model, repeats, **_: {
        k: v for k, v in fake_costs(lambda K: 1.0).items() if k != "warp_ratio"})
    with pytest.raises(ValueError, match="no warp cost for T 0.8, top-p 0.95"):
        he.run(parse(argv + ["--json", str(tmp_path / "none.json")]), model=code_model)


def test_tree_and_K_forced_run_both_rows_and_keep_the_chains_keys(tmp_path, code_model):
    out = tmp_path / "he.json"
    argv = ["--limit", "1", "--max-new-tokens", "12", "--drafts", "prompt-lookup", "--json", str(out), "--timeout", "5",
            "--no-bench-costs"]
    assert he.run(parse(argv + ["--K", "4", "--tree", "3+1"]), model=code_model) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["method"], r["K"], r.get("tree")) for r in rows] == [("ArS", 0, None), ("SpS", 4, None), ("SpS", 4, "3+1")] * 2
    code_model.calls = 0
    assert he.run(parse(argv), model=code_model) == 0          # K = 4 without costs: the chain rows are stored already
    assert code_model.calls == 0


# ---- predicted before the run, and the model check ----------------------------------------------

CHOSEN = {("prompt-lookup", 0.0, None): {"K": 4, "tree": "3+1", "why_K": "", "why_tree": "",
                                         "predicted_K": 2.5, "predicted_tree": 1.7}}


def stored_run(accepted: int, K: int, tree: str | None = None) -> dict:
    """One problem's stored record: 10 target calls of 12 ms (ArS: 10 ms), `accepted` of 20 examined drafts kept."""
    if K == 0:
        stats = RunStats(tokens=10, loops=10, calls_by_drafted=[10], seconds=0.1, target_seconds=0.1)
        return {**stats.counts(), "status": "passed"}
    stats = RunStats(tokens=10 + accepted, loops=10, draft_calls=10 * K, n_drafted=10 * K, n_accepted=accepted,
                     n_examined=20, calls_by_drafted=[0] * K + [10], seconds=0.13, target_seconds=0.12,
                     draft_seconds=0.005)
    profile = {"profile_calls": 10, "profile_sums": [accepted / 2, 1.0, 0.5]} if tree else {}
    return {**stats.counts(), "status": "passed", **profile}


def summarized(accepted: int, choices=CHOSEN):
    methods = [Method(None, 0, *GREEDY), Method("prompt-lookup", 4, *GREEDY),
               Method("prompt-lookup", 4, *GREEDY, "3+1", "topk"), Method("prompt-lookup", 2, *GREEDY)]
    keys = {m: f"k{i}" for i, m in enumerate(methods)}
    stored = {(keys[m], "t"): stored_run(accepted, m.K, m.tree) for m in methods}
    return summarize(methods, stored, keys, ["t"], choices)


def test_the_prediction_is_the_pilots_and_the_model_check_follows_the_run():
    low, high = summarized(accepted=6), summarized(accepted=14)   # the run's alpha: 0.3, then 0.7
    for rows in (low, high):
        ars, chain, tree, given = rows
        assert (ars["predicted_speedup"], chain["predicted_speedup"], tree["predicted_speedup"]) == (1.0, 2.5, 1.7)
        assert chain["predicted_note"] == tree["predicted_note"] == ""
        assert given["predicted_speedup"] is None and given["predicted_note"] == he_report.NO_PILOT  # K = 2: no pilot
    # the model check is Theorem 3.8 with each run's own alpha, c = 0.125 ms / 10 ms and scoring cost 12 ms / 10 ms
    for rows, alpha in ((low, 0.3), (high, 0.7)):
        assert rows[1]["alpha"] == pytest.approx(alpha) and rows[1]["c"] == pytest.approx(0.0125)
        assert rows[1]["model_check_speedup"] == pytest.approx(
            float(speedup.improvement_with_lengths(alpha, [0] * 4 + [10], 0.0125, 1.2)))
    assert low[1]["model_check_speedup"] < high[1]["model_check_speedup"]
    assert low[2]["model_check_speedup"] < high[2]["model_check_speedup"]


def test_without_choices_or_with_a_choice_stored_before_its_prediction_no_row_is_predicted():
    rows = summarized(6, choices=None)                                # --K, --tree: nothing was chosen
    assert [r["predicted_speedup"] for r in rows] == [1.0, None, None, None]
    assert {r["predicted_note"] for r in rows[1:]} == {he_report.NO_PILOT}
    old = {k: {f: v for f, v in c.items() if not f.startswith("predicted")} for k, c in CHOSEN.items()}
    rows = summarized(6, choices={k: {**c, "predicted_K": None, "predicted_tree": None} for k, c in old.items()})
    assert [r["predicted_speedup"] for r in rows] == [1.0, None, None, None]
    assert [r["predicted_note"] for r in rows[1:]] == [he_report.OLD_CHOICE] * 2 + [he_report.NO_PILOT]


def test_the_table_labels_the_prediction_and_the_model_check():
    text = he_report.format_table(summarized(6))
    head = [c.strip() for c in text.splitlines()[0].split("|")]
    assert head[9:13] == ["speedup", "predicted", "model check", "model check (bench costs)"]
    cells = [[c.strip() for c in line.split("|")] for line in text.splitlines()[2:6]]
    assert [c[10] for c in cells] == ["1.00x", "2.50x", "1.70x", "none"]
    assert "predicted: made before the run" in text and "not a prediction" in text
    assert f"none: {he_report.NO_PILOT}." in text


def test_a_run_stores_the_predictions_and_a_resumed_old_file_says_it_has_none(tmp_path, code_model, monkeypatch,
                                                                               capsys):
    monkeypatch.setattr(he, "measure_costs", lambda model, repeats, **_: fake_costs(lambda K: 1.0))
    out = tmp_path / "he.json"
    argv = ["--limit", "1", "--max-new-tokens", "12", "--drafts", "prompt-lookup", "--json", str(out), "--timeout", "5"]
    assert he.run(parse(argv), model=code_model) == 0
    report = json.loads(out.read_text())
    assert report["format"] == he_report.REPORT_FORMAT == 2
    for c in report["choices"]:
        chain = next(r for r in report["rows"] if r["draft"] and r["temperature"] == c["temperature"]
                     and not r.get("tree"))
        assert chain["predicted_speedup"] == c["predicted_K"] and f"predicts {c['predicted_K']:.2f}x" in c["why_K"]
        assert math.isfinite(chain["model_check_speedup"])
    assert "NOTE:" not in capsys.readouterr().out
    # the same results file as an older version wrote it: its choices without their predictions
    path = tmp_path / "he.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps({k: v for k, v in r.items() if k not in ("predicted_K", "predicted_tree")})
                            + "\n" for r in records))
    code_model.calls = 0
    assert he.run(parse(argv), model=code_model) == 0
    assert code_model.calls == 0                                      # resumed: the stored choices and rows
    rows = json.loads(out.read_text())["rows"]
    assert all(r["predicted_speedup"] is None and r["predicted_note"] == he_report.OLD_CHOICE
               for r in rows if r["draft"])
    printed = capsys.readouterr().out
    assert f"NOTE: {he_report.OLD_CHOICE}" in printed and f"none: {he_report.OLD_CHOICE}." in printed


# ---- the pilot's problems --------------------------------------------------------------------

def test_the_pilot_spreads_its_problems_over_the_run():
    """16 problems spread evenly over 164 (the first problems under-state the trained draft's greedy acceptance:
    docs/humaneval.md), all of a run of at most 16."""
    run = [f"HumanEval/{i}" for i in range(164)]
    assert PILOT_PROBLEMS == 16
    picked = pilot_problems(run)
    assert picked[:4] == ["HumanEval/0", "HumanEval/10", "HumanEval/20", "HumanEval/30"] and len(set(picked)) == 16
    assert picked[-1] == "HumanEval/153"
    assert pilot_problems(run[:3]) == run[:3] and pilot_problems(run[:16]) == run[:16]
    assert pilot_problems([]) == []


def test_pilot_subsets_reads_a_runs_records(tmp_path):
    from tools import pilot_subsets
    lines = []
    for i in range(4):  # problem i accepts i of 3 drafts examined
        lines.append(json.dumps({"task_id": f"HumanEval/{i}", "method": "SpS[neural,K=1] greedy",
                                 "n_accepted": i, "n_examined": 3}))
    lines.append(json.dumps({"task_id": "HumanEval/0", "method": "ArS greedy", "n_accepted": 0, "n_examined": 0}))
    path = tmp_path / "run.jsonl"
    path.write_text("\n".join(lines))
    (line,) = pilot_subsets.subsets(path, [2])
    assert line == "SpS[neural,K=1] greedy: all 4: 0.500; first 2: 0.167; spread 2: 0.333"
    with pytest.raises(ValueError, match="more than the run's 4 problems"):
        pilot_subsets.subsets(path, [5])
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(ValueError, match="no SpS chain rows"):
        pilot_subsets.subsets(tmp_path / "empty.jsonl", [2])
