"""Structure-aware mutations of GGUF files, for proving that loading untrusted files never
takes the process down (tests/engine/test_errors.py, tools/fuzz.py).

Each mutant is a copy of a real file with one to three metadata values or tensor-info
fields (dimensions, types, offsets) overwritten in place by edge values: 0, 1, small
sizes, type maxima and minima, NaN and infinities, or random bytes inside strings.
The file stays parseable often enough to reach llama.cpp's loader and graph builders,
which is where its asserts live.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np


def _file_offset(reader: Any, part: np.ndarray) -> int:
    """Where a ``gguf.GGUFReader`` field part (a view of the memory-mapped file) starts in the file."""
    return int(part.__array_interface__["data"][0] - reader.data.__array_interface__["data"][0])


def _write_patched(src: Path, dst: Path, offset: int, raw: bytes) -> Path:
    data = bytearray(src.read_bytes())
    data[offset : offset + len(raw)] = raw
    dst.write_bytes(bytes(data))
    return dst


def overwrite_field(src: str | Path, dst: str | Path, key: str, value: int | float | bytes) -> Path:
    """Copy a GGUF with one metadata value overwritten in place: a number of the same
    type, or the bytes of a string of the same length (the first element of an array)."""
    import gguf

    reader = gguf.GGUFReader(src)
    part = reader.fields[key].parts[reader.fields[key].data[0]]
    raw = value if isinstance(value, bytes) else np.array([value], dtype=part.dtype).tobytes()
    if len(raw) != part.nbytes:
        raise ValueError(f"{key}: {len(raw)} bytes given, the field holds {part.nbytes}")
    return _write_patched(Path(src), Path(dst), _file_offset(reader, part), raw)


def overwrite_tensor_type(src: str | Path, dst: str | Path, tensor: str, ggml_type: int) -> Path:
    """Copy a GGUF with one tensor's declared type overwritten (its data left as it was)."""
    import gguf

    reader = gguf.GGUFReader(src)
    part = next(t for t in reader.tensors if t.name == tensor).field.parts[4]  # name len, name, n_dims, dims, type
    raw = np.array([ggml_type], dtype=part.dtype).tobytes()
    return _write_patched(Path(src), Path(dst), _file_offset(reader, part), raw)


def mutate_gguf(src: str | Path, out_dir: str | Path, count: int, seed: int) -> list[Path]:
    """Write ``count`` mutants of ``src`` into ``out_dir`` (deterministic for a ``seed``)."""
    import gguf

    src, out_dir = Path(src), Path(out_dir)
    reader = gguf.GGUFReader(src)
    parts = [f.parts[i] for f in reader.fields.values() for i in f.data]
    parts += [p for t in reader.tensors for p in t.field.parts[2:]]  # n_dims, dims, type, offset
    targets = [(_file_offset(reader, p), p.nbytes, p.dtype) for p in parts if p.nbytes]

    def mutate(rng: random.Random, data: bytearray) -> None:
        offset, nbytes, dtype = rng.choice(targets)
        if dtype.kind in "uif" and nbytes > dtype.itemsize:  # one element of an array
            offset += rng.randrange(nbytes // dtype.itemsize) * dtype.itemsize
            nbytes = dtype.itemsize
        data[offset : offset + nbytes] = _edge_value(rng, dtype, nbytes)

    return _write_mutants(src, out_dir / f"{src.stem}-mutant-{seed}", count, seed, mutate)


def _write_mutants(
    src: Path, prefix: Path, count: int, seed: int, mutate: Callable[[random.Random, bytearray], None]
) -> list[Path]:
    """``count`` copies of ``src`` (``{prefix}-{n}.gguf``), each changed by one to three
    ``mutate`` calls drawn from one seeded generator."""
    rng = random.Random(seed)
    original = src.read_bytes()
    paths = []
    for n in range(count):
        data = bytearray(original)
        for _ in range(rng.choice([1, 1, 2, 3])):
            mutate(rng, data)
        path = prefix.parent / f"{prefix.name}-{n}.gguf"
        path.write_bytes(bytes(data))
        paths.append(path)
    return paths


# Metadata keys that are not hyperparameters (the tokenizer, names, file bookkeeping).
_NOT_HYPERPARAMETERS = ("general.", "tokenizer.", "split.", "quantize.")


def mutate_metadata(src: str | Path, out_dir: str | Path, count: int, seed: int) -> list[Path]:
    """Write ``count`` mutants of ``src`` whose hyperparameters (the ``{arch}.*`` keys the loader
    reads) take well-typed edge values: 0, 1, huge, a whole array set to one value (all zero,
    all one, all false, all huge), counts inconsistent with each other. Only values change, so
    every mutant is a well-formed GGUF (deterministic for a ``seed``)."""
    import gguf

    src, out_dir = Path(src), Path(out_dir)
    reader = gguf.GGUFReader(src)
    keys = [k for k, f in reader.fields.items()
            if not k.startswith(_NOT_HYPERPARAMETERS) and f.types and f.types[-1] != gguf.GGUFValueType.STRING]

    def mutate(rng: random.Random, data: bytearray) -> None:
        field = reader.fields[rng.choice(keys)]
        dtype = field.parts[field.data[0]].dtype
        if dtype.kind == "f":
            value: float = rng.choice([0.0, 1.0, 1e-30, 1e30, -1.0])
        elif dtype.kind == "b" or dtype == np.bool_:
            value = rng.choice([0, 1])
        else:
            info = np.iinfo(dtype)
            value = rng.choice([0, 1, 2, 3, 7, 64, 4096, 65536, int(info.max)])
        raw = np.array([value], dtype=dtype).tobytes()
        indices = field.data if rng.random() < 0.7 else [rng.choice(field.data)]  # whole array or one element
        for i in indices:
            offset = _file_offset(reader, field.parts[i])
            data[offset : offset + len(raw)] = raw

    return _write_mutants(src, out_dir / f"{src.stem}-meta-{seed}", count, seed, mutate)


def _edge_value(rng: random.Random, dtype: np.dtype, nbytes: int) -> bytes:
    if dtype.kind in "ui":
        info = np.iinfo(dtype)
        edge = rng.choice([0, 1, 2, 3, 8, 255, 4096, info.max, info.max - 1, info.min, info.max // 2 + 1])
        return np.array([min(max(edge, info.min), info.max)], dtype=dtype).tobytes()[:nbytes]
    if dtype.kind == "f":
        real = rng.choice([0.0, -1.0, float("nan"), float("inf"), 1e30])
        return np.array([real], dtype=dtype).tobytes()[:nbytes]
    return bytes(rng.randrange(256) for _ in range(nbytes))
