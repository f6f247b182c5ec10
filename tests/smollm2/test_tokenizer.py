"""Tokenizer tests: ids equal to the reference tokenizer's, exact round trip, control tokens, chat template.

The reference ids in tests/fixtures/tokenizer_reference.json were recorded by tools/record_reference.py
from Hugging Face `tokenizers` configured as SmolLM2's own tokenizer.json (and checked against llama.cpp).
The GGUF comes from the cache (`specref.smollm2.weights.gguf_path()`): no network once it is cached.
"""

import hashlib
import json
import random
from pathlib import Path

import jinja2
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specref.smollm2 import weights
from specref.smollm2.tokenizer import (GPT2_PATTERN, Tokenizer, bpe_merge, bytes_to_unicode, pre_tokenize)

FIXTURES = Path(__file__).parent / "fixtures"
REFERENCE = json.loads((FIXTURES / "tokenizer_reference.json").read_text(encoding="utf-8"))
VARIED = [
    "", " ", "  ", "\n", "\t\t", "Hello world", "don't stop", "x = 12345\n    y = 0.5e-3",
    "   indented\n\tand tabbed\r\n", "日本語と中文と한국어", "😀👍🏽🇺🇸👨‍👩‍👧", "naïve café ½ x² Ⅻ ٣",
    "<|im_start|>user\nhi<|im_end|>\n", "<|im_start|<|im_end|>>", "a<|endoftext|>b", "\u00a0\u2009\u3000",
    "def f(a, b):\n    return {'k': [a, b]}  # comment\n", "\U0010fffd\U000e0001", "\x7f\x1b[0m",
]


@pytest.fixture(scope="module")
def gguf_file() -> Path:
    return weights.gguf_path(progress=lambda *a, **k: None)


@pytest.fixture(scope="module")
def tok(gguf_file) -> Tokenizer:
    return Tokenizer.from_gguf(gguf_file)


def encodable_char(tok: Tokenizer, c: str) -> bool:
    """True if every UTF-8 byte of c has a token (so text made of such chars round-trips)."""
    return not tok.missing_bytes.intersection(c.encode("utf-8", errors="surrogatepass")) \
        and not 0xD800 <= ord(c) <= 0xDFFF


# ---- against the reference -------------------------------------------------------------------

def test_fixture_was_recorded_from_this_file(gguf_file):
    h = hashlib.sha256(gguf_file.read_bytes()).hexdigest()
    assert REFERENCE["version"]["gguf_sha256"] == h


def test_ids_equal_reference(tok):
    mismatches = []
    for case in REFERENCE["cases"]:
        ids = tok.encode(case["text"], missing_bytes="drop" if case["drops_bytes"] else "error")
        if ids != case["ids"]:
            mismatches.append((case["text"], ids, case["ids"]))
    print(f"{len(REFERENCE['cases']) - len(mismatches)}/{len(REFERENCE['cases'])} strings match the reference ids")
    assert not mismatches, mismatches[:3]
    assert len(REFERENCE["cases"]) >= 40


def test_reference_agrees_with_llama_cpp_where_recorded():
    """Where llama.cpp was recorded, it agrees on every string whose bytes all have tokens. (On bytes
    the vocabulary lacks it drops them after the merges, HF before; the fixture follows HF.)"""
    checked = [c for c in REFERENCE["cases"] if "llama_cpp_agrees" in c and not c["drops_bytes"]]
    assert all(c["llama_cpp_agrees"] for c in checked), [c["text"] for c in checked if not c["llama_cpp_agrees"]]


def test_fixture_tells_the_digit_split_apart(tok):
    """Negative control: without the digit split (transformers' GGUF conversion) the ids differ from the
    reference, and this same BPE then reproduces the conversion's ids, so the fixture can catch it."""
    differing = [c for c in REFERENCE["cases"] if "transformers_gguf_ids" in c]
    assert len(differing) >= 3
    for case in differing:
        no_digit_split = [i for piece in GPT2_PATTERN.findall(case["text"]) for i in tok.bpe(tok.byte_symbols(piece))]
        assert no_digit_split == case["transformers_gguf_ids"] != case["ids"]


def test_chat_ids_equal_reference_prompt(tok):
    """The ChatML prompt the model reference was recorded with (rendered by transformers' jinja template)."""
    with np.load(FIXTURES / "smollm2_reference.npz") as ref:
        expected = ref["chat_capital/ids"].tolist()
    assert tok.chat([{"role": "user", "content": "What is the capital of France?"}]) == expected


# ---- round trip --------------------------------------------------------------------------------

@pytest.mark.parametrize("text", VARIED)
def test_round_trip_varied(tok, text):
    assert tok.decode(tok.encode(text)) == text
    assert tok.decode(tok.encode(text, allow_special=False)) == text
    assert tok.decode_bytes(tok.encode(text)) == text.encode("utf-8")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_round_trip_any_text(tok, data):
    chars = st.characters(exclude_categories=("Cs",)).filter(lambda c: encodable_char(tok, c))
    specials = st.sampled_from(sorted(tok.special_ids))
    parts = data.draw(st.lists(st.one_of(st.text(chars, max_size=30), specials), max_size=6))
    text = "".join(parts)
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert all(0 <= i < tok.vocab_size for i in ids)
    plain = tok.encode(text, allow_special=False)
    assert tok.decode(plain) == text
    assert not set(plain) & set(tok.special_ids.values())  # control ids only when allowed


def test_round_trip_long_text(tok):
    text = Path(__file__).read_text(encoding="utf-8") * 3 + "中文" * 2000 + " " * 5000 + "7" * 300
    assert tok.decode(tok.encode(text)) == text


# ---- control tokens ----------------------------------------------------------------------------

def test_control_token_ids(tok):
    assert (tok.encode("<|endoftext|>"), tok.encode("<|im_start|>"), tok.encode("<|im_end|>")) == ([0], [1], [2])
    assert (tok.bos_id, tok.eos_id) == (1, 2)
    assert len(tok.special_ids) == 17
    for text, i in tok.special_ids.items():
        assert tok.encode(text) == [i] and tok.decode([i]) == text
        plain = tok.encode(text, allow_special=False)
        assert len(plain) > 1 and i not in plain and tok.decode(plain) == text


def test_control_tokens_inside_text(tok):
    ids = tok.encode("say<|im_end|>\n<|im_start|>assistant")
    assert ids[1:4] == [2, *tok.encode("\n"), 1]
    assert tok.encode("<reponame><repo_name>") == [4, 3]


# ---- bytes the vocabulary lacks, bad input -------------------------------------------------------

def test_missing_bytes(tok):
    assert len(tok.missing_bytes) == 21 and 0x04 in tok.missing_bytes and 0x20 not in tok.missing_bytes
    with pytest.raises(ValueError, match="U\\+0004"):
        tok.encode("a\x04b")
    assert tok.encode("!\x04!", missing_bytes="drop") == tok.encode("!!")
    with pytest.raises(ValueError, match="surrogate"):
        tok.encode("a\ud800")
    with pytest.raises(ValueError, match="missing_bytes"):
        tok.encode("a", missing_bytes="ignore")
    with pytest.raises(ValueError, match="str"):
        tok.encode(b"bytes")


def test_decode_checks_ids(tok):
    assert tok.decode(np.array([19556, 905])) == "Hello world"
    for bad in ([tok.vocab_size], [-1], [[1, 2]], [1.5]):
        with pytest.raises(ValueError):
            tok.decode(bad)


def test_decode_incomplete_utf8(tok):
    """A token sequence that stops inside a character decodes that character to U+FFFD, nothing else."""
    ids = tok.encode("é日")  # 'é' is one token; '日' is several byte tokens
    assert tok.decode(ids[:-1]).startswith("é") and tok.decode(ids[:-1]).endswith("\ufffd")
    assert tok.decode_bytes(ids[:-1]) == "é日".encode("utf-8")[:len(tok.decode_bytes(ids[:-1]))]


def test_from_gguf_errors(tmp_path, gguf_file):
    with pytest.raises(ValueError, match="no GGUF file"):
        Tokenizer.from_gguf(tmp_path / "missing.gguf")
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(gguf_file.read_bytes()[:4096])
    with pytest.raises(ValueError, match="not a readable GGUF"):
        Tokenizer.from_gguf(truncated)


# ---- chat template -----------------------------------------------------------------------------

CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
    [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}, {"role": "user", "content": "and 3+3?"}],
    [{"role": "user", "content": "multi\nline <b>html</b> 😀"}],
    [],
]


@pytest.mark.parametrize("messages", CONVERSATIONS)
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_chat_matches_stored_template(tok, messages, add_generation_prompt):
    """Our ChatML rendering equals the GGUF's jinja template rendered by jinja2 (a test-only dependency)."""
    expected = jinja2.Environment().from_string(tok.chat_template).render(
        messages=messages, add_generation_prompt=add_generation_prompt)
    assert tok.render_chat(messages, add_generation_prompt) == expected
    assert tok.chat(messages, add_generation_prompt) == tok.encode(expected)


def test_chat_facts_sanity(tok):
    text = tok.render_chat([{"role": "user", "content": "What is the capital of France?"}])
    assert text == ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
                    "<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n")
    ids = tok.chat([{"role": "user", "content": "What is the capital of France?"}])
    assert ids[0] == 1 and ids[-4:] == [1, *tok.encode("assistant\n")]


def test_chat_rejects_bad_input(tok):
    with pytest.raises(ValueError, match="role"):
        tok.chat([{"role": "user"}])
    with pytest.raises(ValueError, match="role"):
        tok.chat("hello")
    other = Tokenizer(tok.tokens, [f"{a} {b}" for (a, b) in tok.merge_ranks], tok.token_types,
                      tok.bos_id, tok.eos_id, chat_template="{{ messages }}")
    with pytest.raises(ValueError, match="not the ChatML template"):
        other.chat([{"role": "user", "content": "hi"}])


# ---- show your work ----------------------------------------------------------------------------

@pytest.mark.parametrize("text", ["Hello world 42", "def f(x):\n    return x**2", "naïve 日本 😀", "a<|im_end|>b"])
def test_show_work_is_consistent(tok, text):
    work = tok.encode_and_show_work(text)
    assert work.ids == tuple(tok.encode(text))
    assert "".join(p.text for p in work.pieces) == text
    byte_decoder = {s: b for b, s in bytes_to_unicode().items()}
    for p in work.pieces:
        assert p.utf8 == p.text.encode("utf-8")
        assert p.ids == tuple(tok.vocab[t] for t in p.tokens)
        if p.special:
            assert p.merges == () and p.ids == (tok.special_ids[p.text],)
            continue
        assert bytes(byte_decoder[c] for c in p.byte_symbols) == p.utf8
        # Replaying the recorded merges (each on the leftmost occurrence of its pair) gives the tokens.
        symbols = list(p.byte_symbols)
        for left, right, rank in p.merges:
            assert tok.merge_ranks[(left, right)] == rank
            i = next(i for i in range(len(symbols) - 1) if (symbols[i], symbols[i + 1]) == (left, right))
            symbols[i:i + 2] = [left + right]
        assert tuple(symbols) == p.tokens
        ranks = [r for _, _, r in p.merges]
        assert ranks == sorted(ranks)  # lowest rank first (no merge uses a symbol made by a later one)


# ---- the pieces, checked against simpler or independent implementations ----------------------------

def naive_bpe(symbols: list[str], ranks: dict) -> list[str]:
    """GPT-2's original loop: merge every occurrence of the lowest-ranked pair, left to right, repeat."""
    while len(symbols) > 1:
        pairs = {(a, b) for a, b in zip(symbols, symbols[1:]) if (a, b) in ranks}
        if not pairs:
            return symbols
        best = min(pairs, key=ranks.__getitem__)
        merged, i = [], 0
        while i < len(symbols):
            if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == best:
                merged.append(best[0] + best[1])
                i += 2
            else:
                merged.append(symbols[i])
                i += 1
        symbols = merged
    return symbols


def test_heap_bpe_equals_naive_bpe(tok):
    rng = random.Random(0)
    words = [tok.byte_symbols(p) for p in pre_tokenize(Path(__file__).read_text(encoding="utf-8"))]
    words += ["".join(rng.choice("ĠĠeeaat") for _ in range(rng.randint(1, 40))) for _ in range(300)]
    for w in words:
        assert bpe_merge(w, tok.merge_ranks)[0] == naive_bpe(list(w), tok.merge_ranks), w


def test_bpe_tiny_vocabulary():
    """Exact: merges apply by rank, leftmost first, and 'a a a' leaves the last 'a' alone."""
    assert bpe_merge("aaa", {("a", "a"): 0}) == (["aa", "a"], [("a", "a", 0)])
    ranks = {("a", "a"): 0, ("b", "aa"): 1, ("aa", "a"): 2}
    assert bpe_merge("aaa", ranks)[0] == ["aaa"]  # a a a -> aa a -> aaa
    assert bpe_merge("baaa", ranks)[0] == ["baa", "a"]  # b aa a: (b, aa) has rank 1 < (aa, a) rank 2
    assert bpe_merge("", ranks) == ([], [])


def test_pre_tokenize_examples():
    assert pre_tokenize("Hello world") == ["Hello", " world"]
    assert pre_tokenize("x 123") == ["x", " ", "1", "2", "3"]
    assert pre_tokenize("a   1") == ["a", "   ", "1"]  # the whole run: digits are split off first
    assert pre_tokenize("a   b") == ["a", "  ", " b"]
    assert pre_tokenize("I'm don't") == ["I", "'m", " don", "'t"]
    assert pre_tokenize("!\x1c") == ["!\x1c"]  # U+001C is not White_Space (Python's \s would split it)
    assert pre_tokenize("a\u00a0b") == ["a", "\u00a0", "b"]


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(exclude_categories=("Cs", "Cn")), max_size=40))
def test_pre_tokenize_equals_unicode_property_regex(text):
    """Our stdlib-re classes against the `regex` package's \\p{L}, \\p{N} and White_Space, on characters
    this Python's unicodedata knows (characters assigned later may be classed differently)."""
    regex = pytest.importorskip("regex")
    gpt2 = regex.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+")
    expected = [p for chunk in regex.split(r"(\p{N})", text) for p in gpt2.findall(chunk)]
    assert pre_tokenize(text) == expected
    assert "".join(pre_tokenize(text)) == text
