"""Record the reference fixtures for SmolLM2-135M-Instruct from independent implementations.

Run once, outside CI (it needs torch and transformers, which are not project dependencies):

    python3 -m venv /tmp/refenv
    /tmp/refenv/bin/pip install torch==2.13.0 transformers accelerate gguf numpy   # CPU torch
    # optional, a third tokenizer (llama.cpp, compiled from source; takes a while):
    /tmp/refenv/bin/pip install --no-deps llama-cpp-python && /tmp/refenv/bin/pip install diskcache jinja2
    GGUF=$(python3 -c "from specref.smollm2.weights import gguf_path; print(gguf_path())")
    /tmp/refenv/bin/python tools/record_reference.py --gguf "$GGUF"

It writes into tests/fixtures/:
- `smollm2_reference.npz`: for a few prompts (ChatML, English, Python, Unicode), the token ids,
  float32 logits at a few positions (the last one over the full vocabulary), the greedy
  continuation (20 tokens) with the margin between the two best logits at each step, and its text.
  The forward pass is Hugging Face transformers' Llama (torch, CPU) run in float64 on the GGUF's
  weights dequantized by transformers, so the reference is free of float32 rounding; the float32
  run's largest deviation from it is recorded too, as the scale of honest float32 noise.
- `tokenizer_reference.json`: token ids for ~40 varied strings.
- Both carry a version tag: torch, transformers, tokenizers (and llama-cpp-python) versions and the
  GGUF's SHA-256.

Which tokenizer is the reference? SmolLM2's own `tokenizer.json` pre-tokenizes with
`Sequence[Digits(individual_digits=True), ByteLevel(add_prefix_space=False, use_regex=True)]`, and the
GGUF says `tokenizer.ggml.pre = smollm`, which llama.cpp implements the same way (split off every
\\p{N}, then the GPT-2 regex). transformers' GGUF conversion has no entry for `smollm` and falls back
to GPT-2's pre-tokenizer without the digit split. That differs on a whitespace run before a numeral
("a   1", indentation before a number in code) and on a space before a numeral that has a merge with
'Ġ' (" ½", " ²"). The fixture records ids from HF `tokenizers` with the digit split restored (what
SmolLM2 was trained with), checks them against llama.cpp's tokenizer when llama-cpp-python is
installed, and lists, per string, the ids of transformers' GGUF conversion where they differ.

Bytes the vocabulary lacks (e.g. U+0004): HF `tokenizers` drops them before the merges, so the bytes
on either side can merge; llama.cpp drops them after, so they cannot. The fixture follows HF; such
strings are marked `drops_bytes`, and llama.cpp's ids are kept beside them. (On 19,094 random strings
without such bytes, specref's tokenizer, HF with the digit split and llama.cpp all agreed.)
"""

import argparse
import hashlib
import json
import platform
from importlib import metadata
from pathlib import Path

import numpy as np
import torch
from tokenizers import pre_tokenizers
from transformers import AutoModelForCausalLM, AutoTokenizer

try:  # optional third tokenizer: llama.cpp, compiled from source by pip
    import llama_cpp
except ImportError:
    llama_cpp = None

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "smollm2" / "fixtures"
GREEDY_TOKENS = 20

# name -> (kind, text). "chat" prompts are the user message of a one-turn conversation rendered
# with the GGUF's chat template (with the generation prompt); "text" prompts are encoded as is.
PROMPTS = {
    "chat_capital": ("chat", "What is the capital of France?"),
    "english": ("text", "The quick brown fox jumps over the lazy dog. Speculative sampling lets a small"
                        " draft model propose tokens that a larger model"),
    "python": ("text", 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n    if n < 2:\n'
                       "        return n\n"),
    "unicode": ("text", "Größe: 12 °C — 東京は日本の首都です。 Emoji: 😀👍🏽 Ωmega ½ naïve café:"),
}

# Strings for the tokenizer fixture: unicode, emoji, numerals, whitespace runs, tabs and newlines,
# code, control tokens, contractions, CJK, and the cases where the pre-tokenizers differ.
TOKENIZER_STRINGS = [
    "Hello world",
    "Hello, world! How are you today?",
    "The year 2024 had 366 days; pi is 3.14159.",
    "1234567890",
    "a   1",
    "x = [\n    1,\n    22,\n    333,\n]",
    "  leading and trailing spaces  ",
    "multiple     internal      spaces",
    "tabs\tand\ttabs\t\tdouble",
    "line one\nline two\r\nline three\n\n\nend",
    "   \n\t  \n",
    "",
    " ",
    "I'm sure they'll say it's fine, don't you think? We've seen what you'd do.",
    "DON'T SHOUT, I'M HERE",
    "Café naïve résumé façade Ångström",
    "e\u0301 combining accent",
    "你好，世界！这是一个测试。",
    "日本語のテキストとカタカナ ー",
    "한국어 텍스트입니다",
    "Россия и Україна",
    "مرحبا بالعالم",
    "Emoji: 😀👍🏽🇺🇸 and ❤️ family 👨‍👩‍👧",
    "Fractions ½ ¾ and powers x² y³ and Roman Ⅻ, Arabic-Indic ٣٤",
    "nbsp\u00a0here, thin\u2009space, ideographic\u3000space",
    "def add(a, b):\n    return a + b\n\nprint(add(2, 40))\n",
    "for (int i = 0; i < n; ++i) { sum += a[i] * 2; }",
    "import numpy as np\nx = np.zeros((3, 4), dtype=np.float32)  # shape [3, 4]",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>",
    "text<|endoftext|>more text",
    "<repo_name>specref<file_sep>main.py<gh_stars>10",
    "<jupyter_start><jupyter_code>print(1)<jupyter_output>1<empty_output>",
    "<|im_start|<|im_end|>>",
    "URL: https://example.com/path?q=1&r=two#frag",
    "email@example.org, $100.00, 50%, #hashtag, @mention",
    "!!!???...---***",
    "MiXeD CaSe WoRdS and snake_case and camelCase and SCREAMING_CASE",
    "a\u00a0 1 \u00a0 ½",
    " ½ and \n²",
    "\u200bzero\u200dwidth\ufeffchars",
]
# Needs a byte the vocabulary lacks (U+0004): the references drop it.
DROPPED_BYTE_STRINGS = ["control\x04char and \x13 more", "dots .\x1d\x1d. merge across the gap"]


def sha256(path: Path) -> str:
    """SHA-256 of a file, hex."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def version_tag(gguf: Path) -> dict:
    """What produced the fixtures."""
    tag = {"gguf_file": gguf.name, "gguf_sha256": sha256(gguf), "python": platform.python_version(),
           "torch": torch.__version__}
    for package in ("transformers", "tokenizers", "gguf", "numpy", "llama_cpp_python"):
        try:
            tag[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            pass
    return tag


def smollm_tokenizer(directory: Path, filename: str):
    """transformers' GGUF tokenizer with SmolLM2's own pre-tokenizer (digit split) put back."""
    tok = AutoTokenizer.from_pretrained(directory, gguf_file=filename)
    tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
    ])
    return tok


def llama_cpp_tokenizer(gguf: Path):
    """llama.cpp's tokenizer for the file (vocabulary only), or None when llama-cpp-python is absent."""
    if llama_cpp is None:
        return None
    llm = llama_cpp.Llama(model_path=str(gguf), vocab_only=True, verbose=False)
    return lambda text: llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)


def record_tokenizer(gguf: Path, tag: dict) -> dict:
    """Ids of every fixture string from the reference tokenizer, cross-checked; returns the fixture."""
    ref = smollm_tokenizer(gguf.parent, gguf.name)
    converted = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    llama = llama_cpp_tokenizer(gguf)
    cases = []
    for text, drops in [(s, False) for s in TOKENIZER_STRINGS] + [(s, True) for s in DROPPED_BYTE_STRINGS]:
        ids = ref.encode(text, add_special_tokens=False)
        case = {"text": text, "ids": ids, "drops_bytes": drops}
        if (other := converted.encode(text, add_special_tokens=False)) != ids:
            case["transformers_gguf_ids"] = other
        if llama is not None:
            case["llama_cpp_agrees"] = (other := llama(text)) == ids
            if other != ids:
                case["llama_cpp_ids"] = other
        if not drops:
            assert text_of(ref, ids) == text, f"the reference does not round-trip {text!r}"
        cases.append(case)
    differ = [c["text"] for c in cases if "transformers_gguf_ids" in c]
    print(f"tokenizer: {len(cases)} strings; transformers' GGUF conversion differs on {len(differ)}: {differ}")
    if llama is not None:
        print(f"tokenizer: llama.cpp agrees on {sum(c['llama_cpp_agrees'] for c in cases)}/{len(cases)}")
    note = ("ids from HF tokenizers with SmolLM2's pre-tokenizer Sequence[Digits(individual_digits=True), "
            "ByteLevel]; 'transformers_gguf_ids' are transformers' GGUF conversion (GPT-2 pre-tokenizer, no "
            "digit split) where it differs; 'llama_cpp_agrees' compares with llama.cpp's 'smollm' "
            "pre-tokenizer; 'drops_bytes' strings need a byte the vocabulary lacks, which the references drop")
    return {"version": tag, "note": note, "cases": cases}


def text_of(tok, ids: list[int]) -> str:
    """Decoded text, control tokens kept, no space clean-up."""
    return tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)


def prompt_ids(tok, kind: str, text: str) -> list[int]:
    """Token ids of one prompt."""
    if kind == "chat":
        rendered = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                           tokenize=False)
        return tok.encode(rendered, add_special_tokens=False)
    return tok.encode(text, add_special_tokens=False)


def forward_logits(model, ids: list[int]) -> np.ndarray:  # [n] -> [n, V] float64
    """All positions' logits of one full forward pass."""
    with torch.no_grad():
        out = model(torch.tensor([ids]), use_cache=False)
    return out.logits[0].to(torch.float64).numpy()


def greedy(model, ids: list[int], n: int) -> tuple[list[int], list[float]]:
    """n greedy tokens by full recompute, and the margin between the best two logits at each step."""
    ids = list(ids)
    new, margins = [], []
    for _ in range(n):
        last = forward_logits(model, ids)[-1]
        top2 = np.sort(last)[-2:]
        token = int(np.argmax(last))
        new.append(token)
        margins.append(float(top2[1] - top2[0]))
        ids.append(token)
    return new, margins


def record_model(gguf: Path, tag: dict) -> dict:
    """Logits and greedy continuations for the prompts; returns the arrays to save."""
    torch.set_num_threads(2)
    tok = smollm_tokenizer(gguf.parent, gguf.name)
    model32 = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32).eval()
    model64 = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    model64 = model64.to(torch.float64).eval()
    print("config:", {k: getattr(model32.config, k) for k in ("num_hidden_layers", "hidden_size",
          "num_attention_heads", "num_key_value_heads", "rope_parameters", "rms_norm_eps", "tie_word_embeddings",
          "vocab_size") if hasattr(model32.config, k)})
    arrays = {"names": np.array(list(PROMPTS))}
    for name, (kind, text) in PROMPTS.items():
        ids = prompt_ids(tok, kind, text)
        n = len(ids)
        logits64 = forward_logits(model64, ids)
        noise32 = float(np.max(np.abs(forward_logits(model32, ids) - logits64)))
        positions = np.array(sorted({0, n // 2, n - 1}))
        continuation, margins = greedy(model64, ids, GREEDY_TOKENS)
        arrays[f"{name}/ids"] = np.array(ids, dtype=np.int64)
        arrays[f"{name}/positions"] = positions
        arrays[f"{name}/logits"] = logits64[positions].astype(np.float32)  # [len(positions), V]
        arrays[f"{name}/greedy_ids"] = np.array(continuation, dtype=np.int64)
        arrays[f"{name}/greedy_margins"] = np.array(margins)
        arrays[f"{name}/greedy_text"] = np.array(text_of(tok, continuation))
        arrays[f"{name}/float32_noise"] = np.array(noise32)
        print(f"{name}: {n} tokens, positions {positions.tolist()}, float32 vs float64 max |diff| {noise32:.2e}, "
              f"smallest greedy margin {min(margins):.3f}, continuation {text_of(tok, continuation)!r}")
    arrays["version"] = np.array(json.dumps(tag))
    return arrays


def main() -> int:
    """Record both fixtures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gguf", type=Path, required=True, help="path to SmolLM2-135M-Instruct.Q4_1.gguf")
    parser.add_argument("--out", type=Path, default=FIXTURES, help="fixture directory")
    parser.add_argument("--only", choices=("tokenizer", "model"), help="record one fixture only")
    args = parser.parse_args()
    if not args.gguf.is_file():
        raise SystemExit(f"no GGUF file at {args.gguf}")
    args.out.mkdir(parents=True, exist_ok=True)
    tag = version_tag(args.gguf)
    print("version:", tag)

    if args.only in (None, "tokenizer"):
        tokenizer_fixture = record_tokenizer(args.gguf, tag)
        path = args.out / "tokenizer_reference.json"
        path.write_text(json.dumps(tokenizer_fixture, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {path} ({path.stat().st_size} bytes)")
    if args.only in (None, "model"):
        arrays = record_model(args.gguf, tag)
        path = args.out / "smollm2_reference.npz"
        np.savez_compressed(path, **arrays)
        print(f"wrote {path} ({path.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
