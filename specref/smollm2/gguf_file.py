"""A GGUF file opened once: its metadata values and its tensors, with the parse kept in an index beside it.

GGUF (llama.cpp's format) is a header of key/value metadata, then a table of tensors (name, shape, type,
offset), then the tensors' bytes.  The GGML project's `gguf` package reads it.  Its reader walks the
header one item at a time through a NumPy memory map, which for SmolLM2's 49,152 vocabulary strings and
48,900 merges takes about 7 s on a 2.5 GHz Xeon: longer than dequantizing the weights.

What the parse finds is small: the metadata values (about 2 MB of JSON) and, for each tensor, its type,
the dtype and shape of its stored blocks, and its byte offset.  `open_gguf` writes that to
`<file>.index.json` after a successful parse and, on later opens, reads the index and maps the tensors at
their recorded offsets instead (about 0.2 s).  The index is used only if it names this file's size and
modification time, this `gguf` package's version and this module's INDEX_FORMAT; otherwise the file is
parsed again and the index rewritten (atomically: a reader never sees half an index).  An index that
cannot be written (a read-only folder) only costs the next open its parse.

    f = open_gguf(path)
    f.values["llama.block_count"]          # 30: a metadata value, as gguf's `ReaderField.contents()` gives it
    f.tensors["blk.0.attn_q.weight"]       # GGUFTensor(name, tensor_type, data): data as stored (quantized blocks)
"""

import dataclasses
import importlib.metadata
import json
import os
import pathlib
from typing import Any

import gguf
import numpy as np

INDEX_FORMAT = 1  # raised whenever the index's layout changes, so that an older index is parsed again


class GGUFError(ValueError):
    """A GGUF file that is missing, truncated or corrupt."""


def advice(path) -> str:
    """What to do about a damaged copy of a fetched file."""
    return f"The file {path} looks truncated or corrupt: delete it and rerun (it will be downloaded again)."


@dataclasses.dataclass(frozen=True)
class GGUFTensor:
    name: str
    tensor_type: gguf.GGMLQuantizationType
    data: np.ndarray  # the stored bytes viewed as gguf's reader views them: [rows, bytes per row] for quantized types


@dataclasses.dataclass(frozen=True)
class GGUFFile:
    path: pathlib.Path
    values: dict[str, Any]            # metadata key -> value (str, int, float, bool, or a list of them)
    tensors: dict[str, GGUFTensor]    # tensor name -> tensor, in the file's order


def index_path(path) -> pathlib.Path:
    path = pathlib.Path(path)
    return path.with_name(path.name + ".index.json")


def open_gguf(path) -> GGUFFile:
    """The GGUF file at `path`, from its index if the index matches the file, else parsed (and indexed).
    Raises GGUFError, with advice, for a missing, truncated or corrupt file."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise GGUFError(f"no GGUF file at {path}")
    stamp = _stamp(path)
    try:
        index = json.loads(index_path(path).read_text(encoding="utf-8"))
        if index.get("stamp") == stamp:
            return _from_index(path, index)
    except (OSError, ValueError, KeyError, TypeError):
        pass  # no index, an unreadable one, or one for another file: parse again
    try:
        reader = gguf.GGUFReader(path)
        values = {key: field.contents() for key, field in reader.fields.items()}
        tensors = {t.name: GGUFTensor(t.name, gguf.GGMLQuantizationType(int(t.tensor_type)),
                                       np.asarray(t.data))
                   for t in reader.tensors}
        places = [[t.name, int(t.tensor_type), int(t.data_offset), t.data.dtype.str, list(t.data.shape)]
                  for t in reader.tensors]
    except Exception as e:  # the reader raises ValueError, IndexError, struct errors, ... on bad bytes
        raise GGUFError(f"{path} is not a readable GGUF file ({type(e).__name__}: {e}). {advice(path)}") from e
    _write_index(path, {"stamp": stamp, "values": values, "tensors": places})
    return GGUFFile(path, values, tensors)


def _stamp(path: pathlib.Path) -> list:
    st = path.stat()
    return [st.st_size, st.st_mtime_ns, importlib.metadata.version("gguf"), INDEX_FORMAT]


def _from_index(path: pathlib.Path, index: dict) -> GGUFFile:
    raw = np.asarray(np.memmap(path, mode="r"))  # a plain array over the map: slicing a memmap costs more
    tensors = {}
    for name, tensor_type, offset, dtype, shape in index["tensors"]:
        dtype = np.dtype(dtype)
        n_bytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if offset < 0 or offset + n_bytes > raw.size:
            raise ValueError("the index places a tensor outside the file")
        data = raw[offset:offset + n_bytes].view(dtype).reshape(shape)
        tensors[name] = GGUFTensor(name, gguf.GGMLQuantizationType(tensor_type), data)
    return GGUFFile(path, index["values"], tensors)


def _write_index(path: pathlib.Path, index: dict) -> None:
    target = index_path(path)
    tmp = target.with_name(target.name + f".{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(index), encoding="utf-8")
        os.replace(tmp, target)
    except OSError:
        tmp.unlink(missing_ok=True)  # a read-only folder: the next open parses again
