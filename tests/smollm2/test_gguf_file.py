"""specref.smollm2.gguf_file: a GGUF file's parse kept in an index beside it, used only while it matches the file.

Each test writes a small GGUF file with gguf's own writer (metadata of several types, an F32 tensor and a Q8_0
tensor), so nothing here needs the model.  The controls: a file rewritten after it was indexed must be read
anew (a stale index would give the old values), and an index that is unreadable or points outside the file is
parsed around, never trusted.
"""

import json
import os

import gguf
import numpy as np
import pytest

from specref.smollm2 import gguf_file
from specref.smollm2.gguf_file import GGUFError, index_path, open_gguf

MATRIX = np.linspace(-1, 1, 64, dtype=np.float32).reshape(2, 32)


def write_gguf(path, blocks: int = 2, tokens=("a", "Ġb", "日")):
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_uint32("llama.block_count", blocks)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    w.add_array("tokenizer.ggml.tokens", list(tokens))
    w.add_tensor("norm", np.arange(6, dtype=np.float32).reshape(2, 3))
    w.add_tensor("matrix", gguf.quants.quantize(MATRIX, gguf.GGMLQuantizationType.Q8_0),
                 raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def parse_is_forbidden(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the file was parsed although its index matches it")
    monkeypatch.setattr(gguf, "GGUFReader", refuse)


def same_file(a, b):
    assert a.values == b.values
    assert list(a.tensors) == list(b.tensors)
    for name in a.tensors:
        assert a.tensors[name].tensor_type == b.tensors[name].tensor_type
        np.testing.assert_array_equal(a.tensors[name].data, b.tensors[name].data)


def test_the_first_open_parses_and_indexes_and_the_next_reads_the_same_from_the_index(tmp_path, monkeypatch):
    path = write_gguf(tmp_path / "m.gguf")
    parsed = open_gguf(path)
    assert parsed.values["llama.block_count"] == 2
    assert parsed.values["tokenizer.ggml.tokens"] == ["a", "Ġb", "日"]
    assert parsed.values["llama.attention.layer_norm_rms_epsilon"] == float(np.float32(1e-5))
    assert parsed.tensors["matrix"].tensor_type == gguf.GGMLQuantizationType.Q8_0
    np.testing.assert_allclose(gguf.quants.dequantize(parsed.tensors["matrix"].data, parsed.tensors["matrix"].tensor_type),
                               MATRIX, atol=0.01)
    assert index_path(path).is_file()
    parse_is_forbidden(monkeypatch)
    same_file(open_gguf(path), parsed)


def test_a_file_changed_after_it_was_indexed_is_parsed_again(tmp_path):
    path = write_gguf(tmp_path / "m.gguf")
    open_gguf(path)
    stale = index_path(path).read_text()
    write_gguf(path, blocks=7, tokens=("x", "y", "z", "w"))   # longer: the old offsets still fall inside it
    index_path(path).write_text(stale)              # the old index is still there
    fresh = open_gguf(path)
    assert fresh.values["llama.block_count"] == 7 and fresh.values["tokenizer.ggml.tokens"] == ["x", "y", "z", "w"]
    assert json.loads(index_path(path).read_text())["values"]["llama.block_count"] == 7   # and it was rewritten


@pytest.mark.parametrize("damage", ["not json", "wrong layout", "outside the file"])
def test_a_damaged_index_is_parsed_around_and_rewritten(tmp_path, monkeypatch, damage):
    path = write_gguf(tmp_path / "m.gguf")
    good = open_gguf(path)
    index = json.loads(index_path(path).read_text())
    if damage == "not json":
        index_path(path).write_text("{ half an ind")
    elif damage == "wrong layout":
        index["tensors"] = [["norm", 0]]
        index_path(path).write_text(json.dumps(index))
    else:
        index["tensors"][1][2] = path.stat().st_size - 8
        index_path(path).write_text(json.dumps(index))
    same_file(open_gguf(path), good)
    monkeypatch.setattr(gguf, "GGUFReader", None)     # the rewritten index serves the next open without a parse
    same_file(open_gguf(path), good)


def test_an_index_that_cannot_be_written_costs_only_the_next_parse(tmp_path, monkeypatch):
    path = write_gguf(tmp_path / "m.gguf")

    def read_only(src, dst):
        raise PermissionError(13, "Permission denied", str(dst))
    monkeypatch.setattr(os, "replace", read_only)
    opened = open_gguf(path)
    assert opened.values["llama.block_count"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.gguf"]        # no index, no leftover temporary file


def test_missing_and_truncated_files_are_clear_errors_and_leave_no_index(tmp_path):
    with pytest.raises(GGUFError, match="no GGUF file at"):
        open_gguf(tmp_path / "missing.gguf")
    path = write_gguf(tmp_path / "m.gguf")
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(path.read_bytes()[:100])
    with pytest.raises(GGUFError, match="not a readable GGUF file .* truncated or corrupt: delete it and rerun"):
        open_gguf(cut)
    assert not index_path(cut).exists()


def test_the_stamp_names_size_time_reader_version_and_format(tmp_path):
    path = write_gguf(tmp_path / "m.gguf")
    size, mtime, version, fmt = gguf_file._stamp(path)
    assert (size, mtime, fmt) == (path.stat().st_size, path.stat().st_mtime_ns, gguf_file.INDEX_FORMAT)
    assert isinstance(version, str) and version
