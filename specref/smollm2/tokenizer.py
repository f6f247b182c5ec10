"""SmolLM2's tokenizer: GPT-2 style byte-level BPE, read from the GGUF metadata.

Text becomes token ids in four steps (`encode_and_show_work` returns each of them):

1. Control tokens such as `<|im_start|>` are cut out of the text whole (optional).
2. Pre-tokenization cuts the rest into pieces, the `smollm` pre-tokenizer of llama.cpp, which is
   SmolLM2's own `tokenizer.json` chain `Digits(individual_digits=True)` then GPT-2's `ByteLevel`
   regex: every numeric character is a piece of its own, and each stretch between numerals is cut
   by the GPT-2 pattern
       's|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+
3. Each piece's UTF-8 bytes are spelled with GPT-2's printable byte alphabet (byte 0x20 -> 'Ġ').
4. Byte-pair merges are applied by rank (lowest rank first, leftmost first), and the resulting
   symbols are looked up in the vocabulary.

Python's `re` has no `\\p{L}`, so the classes are built here from `unicodedata` (letters = categories
L*, numerals = N*, whitespace = the Unicode White_Space property). They follow the Unicode version of
this Python's `unicodedata` (14.0 for Python 3.11); a character assigned in a later Unicode version
may be classed differently by other implementations.

The vocabulary was trained on a restricted byte alphabet: 21 of the 256 bytes have no token (six
ASCII control characters, e.g. U+0004, and the UTF-8 lead bytes 0xC0, 0xC1, 0xF1, 0xF2, 0xF5..0xFF).
Text containing them cannot round-trip. `encode` raises on such text by default; with
`missing_bytes="drop"` it drops those bytes silently, as Hugging Face `tokenizers` and llama.cpp do.
For all other text `decode(encode(text)) == text` exactly.
"""

import heapq
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from specref.sampling import check_tokens
from specref.smollm2.gguf_file import GGUFFile, open_gguf


# llama.cpp's token types (`tokenizer.ggml.token_type`).
TOKEN_TYPE_CONTROL = 3
TOKEN_TYPE_USER_DEFINED = 4

# The Unicode White_Space property (PropList.txt); it is what `\s` means in the reference regex
# engines. (Python's `\s` differs: it also matches U+001C..U+001F.)
WHITESPACE_CODEPOINTS = (
    list(range(0x09, 0x0E)) + [0x20, 0x85, 0xA0, 0x1680] + list(range(0x2000, 0x200B))
    + [0x2028, 0x2029, 0x202F, 0x205F, 0x3000]
)

# The chat template this module knows how to render (ChatML with a default system message),
# written as a pattern over the template text stored in the GGUF; group 1 is the default system message.
CHATML_TEMPLATE = re.compile(
    re.escape("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
              "{{ '<|im_start|>system\n")
    + r"([^'\\]*)"
    + re.escape("<|im_end|>\n' }}{% endif %}"
                "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
                "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
)


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte alphabet: a printable character for each of the 256 byte values."""
    # Bytes that are already printable (and not a space) stand for themselves; the other 68 are
    # given the code points 256, 257, ... in byte order, so 0x20 (space) -> 'Ġ', 0x0A -> 'Ċ'.
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    others = [b for b in range(256) if b not in printable]
    table = {b: chr(b) for b in printable}
    table.update({b: chr(256 + i) for i, b in enumerate(others)})
    return table


def codepoint_class(codepoints: Iterable[int]) -> str:
    """The body of a regex character class `[...]` matching exactly the given code points."""
    ranges: list[list[int]] = []
    for c in sorted(codepoints):
        if ranges and c == ranges[-1][1] + 1:
            ranges[-1][1] = c
        else:
            ranges.append([c, c])
    return "".join(re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}"
                   for a, b in ranges)


def category_classes(*majors: str) -> list[str]:
    """Character classes for the code points whose general category starts with each of `majors` ("L", "N"),
    found in one pass over all 0x110000 code points."""
    found: dict[str, list[int]] = {major: [] for major in majors}
    for c in range(0x110000):
        points = found.get(unicodedata.category(chr(c))[0])
        if points is not None:
            points.append(c)
    return [codepoint_class(found[major]) for major in majors]


LETTER, NUMBER = category_classes("L", "N")  # \p{L}, \p{N}
SPACE = codepoint_class(WHITESPACE_CODEPOINTS)  # \s

# Stage 1 of the smollm pre-tokenizer: every numeral is a piece of its own.
NUMERAL_PATTERN = re.compile(f"[{NUMBER}]")
# Stage 2: GPT-2's pattern on each stretch between numerals, with \p{..} and \s spelled out.
GPT2_PATTERN = re.compile(
    f"'s|'t|'re|'ve|'m|'ll|'d"
    f"| ?[{LETTER}]+"
    f"| ?[{NUMBER}]+"
    f"| ?[^{SPACE}{LETTER}{NUMBER}]+"
    f"|[{SPACE}]+(?![^{SPACE}])"  # a whitespace run, less its last char if a non-space follows
    f"|[{SPACE}]+"
)


def pre_tokenize(text: str) -> list[str]:
    """Cut text (without control tokens) into the pieces BPE works on, as the `smollm` pre-tokenizer does."""
    pieces = []
    start = 0
    for numeral in NUMERAL_PATTERN.finditer(text):
        pieces += GPT2_PATTERN.findall(text, start, numeral.start())
        pieces.append(numeral.group())
        start = numeral.end()
    pieces += GPT2_PATTERN.findall(text, start)
    return pieces


def bpe_merge(symbols: Sequence[str], ranks: Mapping[tuple[str, str], int]) -> tuple[list[str], list[tuple[str, str, int]]]:
    """Apply byte-pair merges to one piece until none applies; return the symbols and the merges made.

    The rule (GPT-2's, and that of HF tokenizers and llama.cpp): repeatedly merge the adjacent pair
    with the lowest rank, the leftmost one first when it occurs several times. A heap of candidate
    pairs keyed by (rank, position) gives that order in O(n log n); an entry is stale, and skipped,
    when one of its two symbols has been merged since it was pushed.
    """
    symbols = list(symbols)
    n = len(symbols)
    nxt = list(range(1, n + 1))  # index of the next live symbol (n = none)
    prv = list(range(-1, n - 1))  # index of the previous live symbol (-1 = none)
    alive = [True] * n
    heap = [(ranks[pair], i, pair) for i in range(n - 1)
            if (pair := (symbols[i], symbols[i + 1])) in ranks]
    heapq.heapify(heap)
    merges = []
    while heap:
        rank, i, pair = heapq.heappop(heap)
        j = nxt[i] if alive[i] else n
        if j >= n or (symbols[i], symbols[j]) != pair:
            continue  # stale: a neighbour was merged after this entry was pushed
        symbols[i] = pair[0] + pair[1]
        alive[j] = False
        nxt[i] = nxt[j]
        if nxt[j] < n:
            prv[nxt[j]] = i
        merges.append((pair[0], pair[1], rank))
        for left, right in ((prv[i], i), (i, nxt[i])):
            if left >= 0 and right < n and (new := (symbols[left], symbols[right])) in ranks:
                heapq.heappush(heap, (ranks[new], left, new))
    return [s for s, live in zip(symbols, alive) if live], merges


@dataclass(frozen=True)
class PieceWork:
    """How one pre-token became token ids (one row of `encode_and_show_work`)."""

    text: str  # the piece as it appears in the input
    utf8: bytes  # its UTF-8 bytes
    byte_symbols: str  # the bytes in GPT-2's byte alphabet (' ' -> 'Ġ'), BPE's starting symbols
    merges: tuple[tuple[str, str, int], ...]  # (left, right, rank) in the order applied
    tokens: tuple[str, ...]  # the final symbols (vocabulary entries)
    ids: tuple[int, ...]  # their ids
    special: bool  # True if the piece is a control token matched whole


@dataclass(frozen=True)
class ShowWork:
    """Every intermediate step of encoding one text."""

    text: str
    pieces: tuple[PieceWork, ...]
    ids: tuple[int, ...]


class Tokenizer:
    """Byte-level BPE with control tokens and the ChatML chat template, as stored in a GGUF file."""

    def __init__(self, tokens: Sequence[str], merges: Sequence[str], token_types: Sequence[int],
                 bos_id: int, eos_id: int, pad_id: int | None = None, chat_template: str | None = None):
        """Build from the GGUF tokenizer fields: the vocabulary, "left right" merges ranked by position."""
        if len(tokens) == 0 or len(token_types) != len(tokens):
            raise ValueError(f"expected one token type per token, got {len(tokens)} tokens "
                             f"and {len(token_types)} types")
        self.tokens = list(tokens)
        self.token_types = [int(t) for t in token_types]
        self.vocab = {t: i for i, t in enumerate(self.tokens)}
        if len(self.vocab) != len(self.tokens):
            raise ValueError("the vocabulary has duplicate tokens")
        for name, i in (("bos", bos_id), ("eos", eos_id), ("pad", pad_id)):
            if i is not None and not 0 <= i < len(self.tokens):
                raise ValueError(f"{name} token id {i} is outside the vocabulary [0, {len(self.tokens)})")
        self.bos_id, self.eos_id, self.pad_id = bos_id, eos_id, pad_id
        self.chat_template = chat_template

        self.byte_encoder = bytes_to_unicode()
        self.byte_decoder = {s: b for b, s in self.byte_encoder.items()}
        self.merge_ranks: dict[tuple[str, str], int] = {}
        for rank, merge in enumerate(merges):
            pair = tuple(merge.split(" "))
            if len(pair) != 2 or pair[0] + pair[1] not in self.vocab:
                raise ValueError(f"merge {rank} {merge!r} is not two symbols whose join is in the vocabulary")
            self.merge_ranks[pair] = rank
        # Every token, special ones included, is spelled in the byte alphabet, so its bytes are known.
        try:
            self.token_bytes = [bytes(self.byte_decoder[c] for c in t) for t in self.tokens]
        except KeyError as e:
            raise ValueError(f"a token uses {e.args[0]!r}, which is not in the byte alphabet") from None
        self.missing_bytes = frozenset(b for b, s in self.byte_encoder.items() if s not in self.vocab)
        # Control (and user-defined) tokens are matched whole, longest first at the same position.
        self.special_ids = {t: i for i, t in enumerate(self.tokens)
                            if self.token_types[i] in (TOKEN_TYPE_CONTROL, TOKEN_TYPE_USER_DEFINED)}
        by_length = sorted(self.special_ids, key=len, reverse=True)
        self.special_pattern = re.compile("|".join(map(re.escape, by_length))) if by_length else None
        self.cache: dict[str, tuple[int, ...]] = {}

    @classmethod
    def from_gguf(cls, path: str | Path) -> "Tokenizer":
        """Read the tokenizer from a GGUF file (a GGUFError, a ValueError, if it is missing or damaged)."""
        return cls.from_file(open_gguf(path))

    @classmethod
    def from_file(cls, file: GGUFFile) -> "Tokenizer":
        """Read the tokenizer from an opened GGUF file (so a model loader opens the file once)."""
        def field(key: str, required: bool = True):
            if key not in file.values:
                if required:
                    raise ValueError(f"the GGUF file has no {key!r} field; is it a GGUF with a tokenizer?")
                return None
            return file.values[key]

        if (model := field("tokenizer.ggml.model")) != "gpt2":
            raise ValueError(f"expected a byte-level BPE tokenizer (tokenizer.ggml.model 'gpt2'), got {model!r}")
        if (pre := field("tokenizer.ggml.pre", required=False)) not in (None, "smollm"):
            raise ValueError(f"this tokenizer implements the 'smollm' pre-tokenizer, the file asks for {pre!r}")
        return cls(tokens=field("tokenizer.ggml.tokens"), merges=field("tokenizer.ggml.merges"),
                   token_types=field("tokenizer.ggml.token_type"),
                   bos_id=field("tokenizer.ggml.bos_token_id"), eos_id=field("tokenizer.ggml.eos_token_id"),
                   pad_id=field("tokenizer.ggml.padding_token_id", required=False),
                   chat_template=field("tokenizer.chat_template", required=False))

    @property
    def vocab_size(self) -> int:
        """Number of tokens (the model's V)."""
        return len(self.tokens)

    # ---- encoding -------------------------------------------------------------------------------

    def split_special(self, text: str, allow_special: bool = True) -> list[tuple[str, bool]]:
        """Cut text into (segment, is_control_token) pairs; control tokens are kept whole."""
        if not allow_special or self.special_pattern is None:
            return [(text, False)] if text else []
        segments = []
        start = 0
        for m in self.special_pattern.finditer(text):
            if m.start() > start:
                segments.append((text[start:m.start()], False))
            segments.append((m.group(), True))
            start = m.end()
        if start < len(text):
            segments.append((text[start:], False))
        return segments

    def byte_symbols(self, piece: str, missing_bytes: str = "error") -> str:
        """A piece's UTF-8 bytes in the byte alphabet, without the bytes the vocabulary lacks if dropping."""
        try:
            data = piece.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ValueError(f"text contains {piece[e.start]!r} (a lone surrogate), which has no UTF-8 "
                             f"encoding; pass well-formed text") from None
        if self.missing_bytes.intersection(data):
            if missing_bytes == "error":
                bad = next(c for c in piece if self.missing_bytes.intersection(c.encode("utf-8")))
                raise ValueError(
                    f"character {bad!r} (U+{ord(bad):04X}) needs a byte that has no token in this "
                    f"vocabulary, so the text cannot round-trip; remove it or pass missing_bytes='drop'")
            data = bytes(b for b in data if b not in self.missing_bytes)
        return "".join(self.byte_encoder[b] for b in data)

    def bpe(self, symbols: str) -> tuple[int, ...]:
        """Token ids for one pre-token given in the byte alphabet (cached)."""
        ids = self.cache.get(symbols)
        if ids is None:
            merged, _ = bpe_merge(symbols, self.merge_ranks)
            ids = tuple(self.vocab[s] for s in merged)
            if len(self.cache) >= 200_000:
                self.cache.clear()
            self.cache[symbols] = ids
        return ids

    def encode(self, text: str, allow_special: bool = True, missing_bytes: str = "error") -> list[int]:  # -> [n]
        """Token ids for text. No BOS is added (SmolLM2 adds none).

        allow_special: match control tokens such as `<|im_start|>` whole (as HF and llama.cpp do);
            False treats them as plain text.
        missing_bytes: "error" raises on text needing a byte the vocabulary lacks; "drop" drops it.
        """
        if not isinstance(text, str):
            raise ValueError(f"expected text as str, got {type(text).__name__}")
        if missing_bytes not in ("error", "drop"):
            raise ValueError(f"missing_bytes must be 'error' or 'drop', got {missing_bytes!r}")
        ids: list[int] = []
        for segment, special in self.split_special(text, allow_special):
            if special:
                ids.append(self.special_ids[segment])
                continue
            for piece in pre_tokenize(segment):
                if symbols := self.byte_symbols(piece, missing_bytes):
                    ids += self.bpe(symbols)
        return ids

    def encode_and_show_work(self, text: str, allow_special: bool = True) -> ShowWork:
        """Encode text and return every intermediate step: pieces, their bytes, byte symbols, merges, ids."""
        pieces = []
        for segment, special in self.split_special(text, allow_special):
            if special:
                i = self.special_ids[segment]
                pieces.append(PieceWork(segment, segment.encode("utf-8"), segment, (), (segment,), (i,), True))
                continue
            for piece in pre_tokenize(segment):
                symbols = self.byte_symbols(piece)
                merged, merges = bpe_merge(symbols, self.merge_ranks)
                pieces.append(PieceWork(piece, piece.encode("utf-8"), symbols, tuple(merges), tuple(merged),
                                        tuple(self.vocab[s] for s in merged), False))
        return ShowWork(text, tuple(pieces), tuple(i for p in pieces for i in p.ids))

    # ---- decoding -------------------------------------------------------------------------------

    def check_ids(self, ids: Iterable[int]) -> list[int]:  # [n] -> [n]
        """The ids as a list of Python ints, after checking each is a token id."""
        return check_tokens(ids, self.vocab_size, "ids", allow_empty=True).tolist()

    def decode_bytes(self, ids: Iterable[int]) -> bytes:  # [n] -> bytes
        """The exact bytes the tokens stand for (control tokens as their text).

        To stream text token by token, feed these bytes to
        `codecs.getincrementaldecoder("utf-8")(errors="replace")`, which holds back a character
        whose bytes are split across tokens.
        """
        return b"".join(self.token_bytes[i] for i in self.check_ids(ids))

    def decode(self, ids: Iterable[int]) -> str:  # [n] -> str
        """The text the tokens stand for.

        A model can emit a token sequence that is not valid UTF-8 (a character cut off mid-bytes,
        or bytes in an impossible order); only those bytes decode to U+FFFD. Any sequence that
        `encode` produced decodes to exactly the text it came from.
        """
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    # ---- chat -------------------------------------------------------------------------------------

    def default_system_message(self) -> str:
        """The system message the stored chat template inserts when a conversation has none."""
        match = CHATML_TEMPLATE.fullmatch(self.chat_template or "")
        if match is None:
            raise ValueError("the GGUF's chat template is not the ChatML template this tokenizer renders; "
                             "render the conversation yourself and call encode()")
        return match.group(1)

    def render_chat(self, messages: Sequence[Mapping[str, str]], add_generation_prompt: bool = True) -> str:
        """The chat template applied to messages: ChatML, with the default system message if none given."""
        if isinstance(messages, (str, Mapping)) or not all(
                isinstance(m, Mapping) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                for m in messages):
            raise ValueError("expected messages as a list of {'role': str, 'content': str} dicts")
        parts = []
        if messages and messages[0]["role"] != "system":
            parts.append(f"<|im_start|>system\n{self.default_system_message()}<|im_end|>\n")
        else:
            self.default_system_message()  # still check that the template is the one rendered here
        for m in messages:
            parts.append(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n")
        if add_generation_prompt:
            parts.append("<|im_start|>assistant\n")
        return "".join(parts)

    def chat(self, messages: Sequence[Mapping[str, str]], add_generation_prompt: bool = True) -> list[int]:
        """Token ids of a conversation rendered with the chat template (control tokens matched whole)."""
        return self.encode(self.render_chat(messages, add_generation_prompt))
