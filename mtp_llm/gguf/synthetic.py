"""Synthetic hy_v3 models of any size and weight format, with a chosen MTP acceptance rate.

For performance work: a model with the shape and weight bytes of a real one (``150M``
parameters in f16 is a 300 MB file with 150M real weights), whose MTP head agrees with the
target exactly as often as asked. Two kinds:

* **forced** (``acceptance=None`` or ``1.0``): every draft is accepted;
* **calibrated** (``0 <= acceptance < 1``): at every draft position the head is right with
  probability ``acceptance``, independently of the other positions.

How the weights steer the tokens (``R`` = :data:`_RESIDUAL_RMS`, ``d`` = ``n_embd``):

* Token embeddings ``E`` are random Gaussian rows rescaled to rms ``R``. Every transformer
  block (the trunk's and the head's) has dense random weights, with its output projections
  (``attn_output``, ``ffn_down``) scaled so that all blocks together move the residual stream
  by a few percent of ``R``: the blocks do a real model's work (ggml has no shortcut for any
  value), and the residual stream at token ``t`` stays ``~E[t]``.
* The target's next token is a fixed successor ``succ[t]``: the output matrix has row
  ``O[succ[t]] = alpha * E[t] / (R * d)``, so after the final RMS norm the logit of
  ``succ[t]`` is ``alpha`` (:data:`_LOGIT`) and every other logit is ``alpha`` times a random
  cosine (below ~0.6 even for ``d = 64``). ``succ`` is one long cycle through the tokens whose
  text is printable (other tokens lead into it), so generated text never ends or repeats soon.
* The MTP head, given token ``y`` (and the target's hidden state, which it ignores up to the
  noise), computes ``R * enorm(E_head[y])`` through ``eh_proj = [R*I | noise]`` and then the
  same output matrix: it drafts ``succ[y']`` where ``E_head[y] = E[y']``. Forced models use
  the target's own embeddings (``y' = y``: always right). Calibrated models store a separate
  ``nextn.embed_tokens`` table (read with get_rows, one row per token: no extra matmul) with
  ``E_head[y] = E[y]`` for the tokens in the "good" set and ``E[succ[y]]`` otherwise (the
  head then drafts ``succ[succ[y]]``, which is wrong). Draft position ``i`` sees the ``i``-th
  chain token after the last committed one, so each position is accepted with probability
  ``acceptance``, independently (:func:`expected_counters` replays this exactly).

Files are written streamed, one tensor at a time (a 150M f16 model in a few seconds), with
names that encode every parameter, and cached under :func:`mtp_llm.cache.cache_dir`
(``synthetic/``) unless a directory is given. Quantized formats (``q8_0``, ``q4_0``) quantize
every matrix, the embeddings and the output matrix included, with ``gguf.quants``; noise
matrices are drawn directly as quantized blocks (random codes with one scale), which is the
same bytes a quantizer would produce from uniform noise.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from .common import (
    GGUF_FILE_TYPE,
    BpeVocab,
    add_bpe_vocab,
    ggml_type,
    open_writer,
    tiny_vocab,
    write_streamed,
    written_atomically,
)
from .hyv3 import ARCH, HyV3Config, add_hy_v3_keys

WeightFormat = Literal["f32", "f16", "q8_0", "q4_0"]
FORMATS: tuple[str, ...] = ("f32", "f16", "q8_0", "q4_0")

# Bump when the weights a given spec produces change: the cache key includes it.
GENERATOR_VERSION = 1

_RESIDUAL_RMS = 16.0  # rms of the embeddings: the residual stream the blocks perturb
_BLOCK_OUT_SCALE = 0.25  # output projections' std, in units of 1/sqrt(fan_in)
_LOGIT = 40.0  # logit of the steered token; others are _LOGIT times a random cosine
_MIN_VOCAB = 512
_ASPECT = 64.0  # target n_embd / n_layer (GPT-2 small: 768 / 12)


# ---------------------------------------------------------------- shapes ---


@dataclasses.dataclass(frozen=True)
class SyntheticShape(HyV3Config):
    """A dense hy_v3 shape: ``n_layer`` trunk blocks plus one MTP block, untied output."""

    def block_params(self) -> int:
        return sum(math.prod(shape) for shape in self.block_shapes().values())

    @property
    def n_params(self) -> int:
        """The target's parameters: embeddings, trunk, final norm and output matrix (no MTP head)."""
        return 2 * self.n_vocab * self.n_embd + self.n_embd + self.n_layer * self.block_params()

    @property
    def n_params_head(self) -> int:
        """The MTP head's parameters: one block, ``eh_proj`` and its norms (it shares the output matrix)."""
        return self.block_params() + 2 * self.n_embd * self.n_embd + 3 * self.n_embd

    def label(self) -> str:
        return (
            f"d{self.n_embd}-l{self.n_layer}-ff{self.n_ff}-h{self.n_head}kv{self.n_head_kv}-v{self.n_vocab}"
        )


def parse_size(size: str | int) -> int:
    """``"150M"``, ``"1.5B"``, ``"500k"`` or a number of parameters."""
    if isinstance(size, int):
        n = size
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kKmMbBgG]?)\s*", size)
        if not m:
            raise ValueError(f"size {size!r}: expected a parameter count such as 150M, 1.5B or 500k")
        mult = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "g": 10**9}[m.group(2).lower()]
        n = int(round(float(m.group(1)) * mult))
    if n < 100_000:
        raise ValueError(f"size {size!r}: at least 100k parameters")
    return n


def format_size(n: int) -> str:
    for unit, div in (("B", 10**9), ("M", 10**6), ("k", 10**3)):
        if n >= div:
            return f"{n / div:.3g}{unit}"
    return str(n)


def default_vocab(n_params: int) -> int:
    """32000 tokens (Llama 2, Mistral) from 20M parameters up, 4096 (as the built-in model)
    from 2M, 512 below."""
    if n_params >= 20_000_000:
        return 32000
    return 4096 if n_params >= 2_000_000 else _MIN_VOCAB


def _shape_for_embd(n_embd: int) -> tuple[int, int, int]:
    head_dim = 64 if n_embd < 2048 else 128
    n_head = max(1, n_embd // head_dim)
    return n_head, max(1, n_head // 4), 3 * n_embd


def synthetic_shape(size: str | int, n_vocab: int | None = None, n_embd: int | None = None) -> SyntheticShape:
    """A shape of about ``size`` target parameters with a real model's proportions.

    ``n_embd`` is a multiple of 128 and ``n_layer`` follows from the size, picking the pair
    whose ``n_embd / n_layer`` is nearest 64 (GPT-2 small's 768 / 12); head size 64 (128 from
    ``n_embd`` 2048 up), a quarter as many KV heads (GQA), SwiGLU ``n_ff = 3 * n_embd``.
    ``n_embd`` given: that width (e.g. 1024 with ``n_vocab`` 248320, Qwen3.5-0.8B's).
    """
    n = parse_size(size)
    v = default_vocab(n) if n_vocab is None else n_vocab
    if v < _MIN_VOCAB:
        raise ValueError(f"n_vocab {v}: at least {_MIN_VOCAB}")
    best: tuple[float, SyntheticShape] | None = None
    widths = range(128, 16384 + 1, 128) if n_embd is None else (n_embd,)
    for width in widths:
        n_head, n_head_kv, n_ff = _shape_for_embd(width)
        if n_head >= 4 and n_head % 4:
            continue
        probe = SyntheticShape(v, width, 1, n_head, n_head_kv, n_ff)
        rest = n - (probe.n_params - probe.block_params())
        n_layer = round(rest / probe.block_params())
        if n_layer < 1:
            continue
        shape = dataclasses.replace(probe, n_layer=n_layer)
        size_err = abs(math.log(shape.n_params / n))
        score = abs(math.log(width / n_layer / _ASPECT)) + 4 * size_err
        if best is None or score < best[0]:
            best = (score, shape)
    if best is None:
        raise ValueError(f"size {size!r} is too small for a {v}-token vocabulary (pass a smaller n_vocab)")
    return best[1]


# ------------------------------------------------------------- the chain ---


@dataclasses.dataclass(frozen=True)
class SyntheticTokens:
    """What a synthetic model does, as arrays over the vocabulary.

    ``succ[t]``: the target's greedy next token after ``t``. ``good[t]``: whether the head,
    drafting after token ``t``, drafts ``succ[t]`` (otherwise ``succ[succ[t]]``).
    ``head_source[t]``: the row of ``E`` stored as the head's embedding of ``t``.
    """

    succ: np.ndarray
    good: np.ndarray
    head_source: np.ndarray

    def head_draft(self, token: int) -> int:
        return int(self.succ[self.head_source[token]])


def _printable_tokens(vocab: BpeVocab) -> np.ndarray:
    from .common import byte_to_unicode

    b2u = byte_to_unicode()
    printable = {b2u[b] for b in range(0x20, 0x7F)}
    ids = [
        i
        for i, (tok, typ) in enumerate(zip(vocab.tokens, vocab.token_types))
        if typ == 1 and all(ch in printable for ch in tok)
    ]
    return np.array(ids, dtype=np.int64)


def synthetic_vocab(n_vocab: int) -> BpeVocab:
    """The tiny byte-level vocabulary (bytes, a few merges, ``<|endoftext|>``) padded to
    ``n_vocab`` with normal tokens ``<264>``, ``<265>``, ... (printable, never produced by
    tokenizing text, but generated and detokenized like any other)."""
    base = tiny_vocab()
    if n_vocab < len(base.tokens):
        raise ValueError(f"n_vocab {n_vocab}: at least {len(base.tokens)}")
    extra = [f"<{i}>" for i in range(len(base.tokens), n_vocab)]
    return dataclasses.replace(
        base, tokens=list(base.tokens) + extra, token_types=list(base.token_types) + [1] * len(extra)
    )


def synthetic_tokens(n_vocab: int, acceptance: float | None, seed: int = 0) -> SyntheticTokens:
    """The successor cycle and the head's good set of a synthetic model (deterministic)."""
    vocab = synthetic_vocab(n_vocab)
    rng = np.random.default_rng([seed, 1, n_vocab])
    chain = rng.permutation(_printable_tokens(vocab))
    succ = np.empty(n_vocab, dtype=np.int64)
    succ[chain] = np.roll(chain, -1)
    others = np.setdiff1d(np.arange(n_vocab), chain)
    succ[others] = chain[rng.integers(0, len(chain), size=len(others))]
    p = 1.0 if acceptance is None else float(acceptance)
    good = np.ones(n_vocab, dtype=bool)
    if p < 1.0:
        # Exactly round(p * n) of the chain's tokens are good (a random subset), so long
        # generations see close to p; tokens off the chain are good with probability p.
        rng2 = np.random.default_rng([seed, 2, n_vocab, int(round(p * 1e6))])
        good[:] = rng2.random(n_vocab) < p
        chosen = rng2.permutation(len(chain))[: int(round(p * len(chain)))]
        good[chain] = False
        good[chain[chosen]] = True
    head_source = np.where(good, np.arange(n_vocab), succ)
    return SyntheticTokens(succ=succ, good=good, head_source=head_source)


def expected_counters(
    tokens: SyntheticTokens, last_prompt_token: int, max_tokens: int, n_draft: int
) -> dict[str, Any]:
    """The engine's counters for one greedy generation on a synthetic model, replayed.

    Mirrors the draft/verify loop: drafting after committed token ``y`` proposes
    ``min(n_draft, max_tokens - produced - 1)`` tokens; draft ``i`` is right iff the
    ``i``-th chain token from ``y`` is good; the target commits the accepted drafts plus
    one token of its own. Returns ``tokens`` (the generated ids), ``drafts_generated``,
    ``drafts_accepted``, ``iters``, ``drafted_at`` and ``accepted_at`` (per position).
    """
    drafted_at = [0] * n_draft
    accepted_at = [0] * n_draft
    out: list[int] = []
    y = int(last_prompt_token)
    iters = generated = accepted = 0
    while len(out) < max_tokens:
        k = max(0, min(n_draft, max_tokens - len(out) - 1))
        a, x = 0, y
        while a < k and tokens.good[x]:
            a += 1
            x = int(tokens.succ[x])
        for i in range(k):
            drafted_at[i] += 1
            accepted_at[i] += int(i < a)
        for _ in range(a + 1):
            y = int(tokens.succ[y])
            out.append(y)
        iters += 1
        generated += k
        accepted += a
    return {
        "tokens": out,
        "iters": iters,
        "drafts_generated": generated,
        "drafts_accepted": accepted,
        "drafted_at": drafted_at,
        "accepted_at": accepted_at,
    }


# ------------------------------------------------------------- writing ---


@dataclasses.dataclass(frozen=True)
class SyntheticSpec:
    """Everything that determines a synthetic model file."""

    shape: SyntheticShape
    acceptance: float | None = None
    fmt: str = "f16"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.fmt not in FORMATS:
            raise ValueError(f"format {self.fmt!r}: one of {', '.join(FORMATS)}")
        if self.acceptance is not None and not 0.0 <= self.acceptance <= 1.0:
            raise ValueError(f"acceptance {self.acceptance}: between 0 and 1 (or None for forced)")
        if self.fmt in ("q8_0", "q4_0") and self.shape.n_embd % 32:
            raise ValueError(f"{self.fmt} needs n_embd a multiple of 32 (got {self.shape.n_embd})")

    @property
    def forced(self) -> bool:
        return self.acceptance is None or self.acceptance >= 1.0

    def file_name(self) -> str:
        acc = "forced" if self.forced else f"p{self.acceptance:.3f}".rstrip("0").rstrip(".")
        return (
            f"synthetic-hyv3-{format_size(self.shape.n_params)}-{acc}-{self.fmt}-{self.shape.label()}"
            f"-s{self.seed}-g{GENERATOR_VERSION}.gguf"
        )

    def tokens(self) -> SyntheticTokens:
        return synthetic_tokens(self.shape.n_vocab, None if self.forced else self.acceptance, self.seed)


def _encode(array: np.ndarray, fmt: str) -> np.ndarray:
    """A float matrix in the file's format (1-D tensors stay f32)."""
    if array.ndim == 1 or fmt == "f32":
        return np.ascontiguousarray(array, dtype=np.float32)
    if fmt == "f16":
        return array.astype(np.float16)
    import gguf

    return gguf.quants.quantize(np.ascontiguousarray(array, dtype=np.float32), ggml_type(fmt))


def _noise(rng: np.random.Generator, shape: tuple[int, int], std: float, fmt: str) -> np.ndarray:
    """A dense random matrix with about ``std`` per element, drawn directly in ``fmt``.

    f16: random sign and mantissa under one exponent (magnitudes in [a, 2a), rms 1.53a);
    q8_0: codes uniform in [-127, 127] under one scale; q4_0: codes uniform in [0, 15]
    (values -8..7) under one scale. f32 draws Gaussian values.
    """
    rows, cols = shape
    if fmt == "f32":
        return (rng.standard_normal(shape, dtype=np.float32) * np.float32(std)).astype(np.float32)
    if fmt == "f16":
        exponent = int(np.clip(round(math.log2(std / 1.53)) + 15, 1, 30))
        bits = rng.integers(0, 1 << 16, size=shape, dtype=np.uint16)
        bits = (bits & np.uint16(0x83FF)) | np.uint16(exponent << 10)
        return bits.view(np.float16)
    n_blocks = rows * cols // 32
    if fmt == "q8_0":
        scale = np.float16(std / 73.6)  # rms of uniform integers in [-127, 127]
        codes = rng.integers(-127, 128, size=(n_blocks, 32), dtype=np.int8).view(np.uint8)
    else:
        scale = np.float16(std / 4.6)  # rms of uniform integers in [-8, 7]
        codes = rng.integers(0, 256, size=(n_blocks, 16), dtype=np.uint8)
    d = np.full((n_blocks, 1), scale, dtype=np.float16).view(np.uint8)
    return np.concatenate([d, codes], axis=1).reshape(rows, -1)


class _Plan:
    """The tensors of a synthetic model, in file order, each with a function producing its data."""

    def __init__(self, spec: SyntheticSpec) -> None:
        self.spec = spec
        s = spec.shape
        self.tokens = spec.tokens()
        rng = np.random.default_rng([spec.seed, 3, s.n_vocab, s.n_embd])
        embd = rng.standard_normal((s.n_vocab, s.n_embd), dtype=np.float32)
        embd *= np.float32(_RESIDUAL_RMS) / np.sqrt(np.mean(embd * embd, axis=1, keepdims=True))
        self.embd = embd

    def entries(self) -> Iterator[tuple[str, tuple[int, ...], Any]]:
        s, fmt, seed = self.spec.shape, self.spec.fmt, self.spec.seed
        e, hd = s.n_embd, s.head_dim

        def ones(n: int) -> Any:
            return lambda: np.ones(n, dtype=np.float32)

        def noise(name: str, shape: tuple[int, int], std: float) -> Any:
            # One generator per tensor (seeded by its name): any tensor can be made alone.
            key = [seed, 4, *name.encode()]
            return lambda: _noise(np.random.default_rng(key), shape, std, fmt)

        yield "token_embd.weight", (s.n_vocab, e), lambda: _encode(self.embd, fmt)
        yield "output_norm.weight", (e,), ones(e)
        yield "output.weight", (s.n_vocab, e), self._output
        out_std = _BLOCK_OUT_SCALE
        for i in range(s.n_layer + 1):
            p = f"blk.{i}."
            yield p + "attn_norm.weight", (e,), ones(e)
            yield p + "attn_q.weight", (s.n_head * hd, e), noise(p + "q", (s.n_head * hd, e), e**-0.5)
            yield p + "attn_k.weight", (s.n_head_kv * hd, e), noise(p + "k", (s.n_head_kv * hd, e), e**-0.5)
            yield p + "attn_v.weight", (s.n_head_kv * hd, e), noise(p + "v", (s.n_head_kv * hd, e), e**-0.5)
            yield p + "attn_output.weight", (e, s.n_head * hd), noise(
                p + "o", (e, s.n_head * hd), out_std * (s.n_head * hd) ** -0.5
            )
            yield p + "attn_q_norm.weight", (hd,), ones(hd)
            yield p + "attn_k_norm.weight", (hd,), ones(hd)
            yield p + "ffn_norm.weight", (e,), ones(e)
            yield p + "ffn_gate.weight", (s.n_ff, e), noise(p + "gate", (s.n_ff, e), e**-0.5)
            yield p + "ffn_up.weight", (s.n_ff, e), noise(p + "up", (s.n_ff, e), e**-0.5)
            yield p + "ffn_down.weight", (e, s.n_ff), noise(p + "down", (e, s.n_ff), out_std * s.n_ff**-0.5)
        p = f"blk.{s.n_layer}.nextn."
        yield p + "eh_proj.weight", (e, 2 * e), lambda: self._eh_proj(p)
        yield p + "enorm.weight", (e,), ones(e)
        yield p + "hnorm.weight", (e,), ones(e)
        yield p + "shared_head_norm.weight", (e,), ones(e)
        if not self.spec.forced:
            yield p + "embed_tokens.weight", (s.n_vocab, e), lambda: _encode(
                self.embd[self.tokens.head_source], fmt
            )

    def _output(self) -> np.ndarray:
        s = self.spec.shape
        scale = np.float32(_LOGIT / (_RESIDUAL_RMS * s.n_embd))
        out = np.zeros((s.n_vocab, s.n_embd), dtype=np.float32)
        succ = self.tokens.succ
        # Each token's successor row points at the token; a token with two preimages (a
        # chain token that an unprintable token also leads to) gets the sum of both.
        _, first = np.unique(succ, return_index=True)  # one preimage of every reached token
        is_first = np.zeros(s.n_vocab, dtype=bool)
        is_first[first] = True
        out[succ[is_first]] = self.embd[is_first] * scale
        for t in np.nonzero(~is_first)[0]:
            out[succ[t]] += self.embd[t] * scale
        # Rows no token leads to (end-of-text, unprintable bytes): small noise, never the argmax.
        unreached = np.setdiff1d(np.arange(s.n_vocab), succ)
        rng = np.random.default_rng([self.spec.seed, 5])
        out[unreached] = 0.1 * scale * self.embd[rng.integers(0, s.n_vocab, size=len(unreached))]
        return _encode(out, self.spec.fmt)

    def _eh_proj(self, prefix: str) -> np.ndarray:
        s, fmt = self.spec.shape, self.spec.fmt
        e = s.n_embd
        # [R * I | noise]: the head's residual stream is R * enorm(its token's embedding).
        ident = _encode(np.eye(e, dtype=np.float32) * np.float32(_RESIDUAL_RMS), fmt)
        rng = np.random.default_rng([self.spec.seed, 4, *(prefix + "eh").encode()])
        rest = _noise(rng, (e, e), _BLOCK_OUT_SCALE * e**-0.5, fmt)
        return np.concatenate([ident, rest.astype(ident.dtype) if fmt in ("f32", "f16") else rest], axis=1)


def write_synthetic(path: str | Path, spec: SyntheticSpec) -> Path:
    """Write the model ``spec`` describes to ``path`` (streamed: one tensor in memory at a time)."""
    path = Path(path)
    s = spec.shape
    plan = _Plan(spec)
    acc = "forced" if spec.forced else f"acceptance {spec.acceptance}"
    config = dataclasses.replace(s, name=f"mtp-llm-synthetic-{format_size(s.n_params)}-{acc}")
    writer = open_writer(path, ARCH, config, file_type=GGUF_FILE_TYPE[spec.fmt])
    add_hy_v3_keys(writer, config)
    add_bpe_vocab(writer, synthetic_vocab(s.n_vocab))

    write_streamed(writer, [
        (name, shape, ggml_type("f32" if len(shape) == 1 else spec.fmt), make) for name, shape, make in plan.entries()
    ])
    return path


def synthetic_model(
    size: str | int | SyntheticShape,
    acceptance: float | None = None,
    fmt: str = "f16",
    out_dir: str | Path | None = None,
    *,
    n_vocab: int | None = None,
    n_embd: int | None = None,
    seed: int = 0,
) -> Path:
    """The path of a synthetic hy_v3 model, written on first use and cached.

    ``size``: target parameters (``"150M"``, ``"1.5B"``, an int) or an explicit
    :class:`SyntheticShape`; ``acceptance``: ``None`` or ``1.0`` for forced acceptance,
    else the per-position probability that the head is right; ``fmt``: ``f32``, ``f16``,
    ``q8_0`` or ``q4_0``; ``n_vocab``, ``n_embd``: see :func:`synthetic_shape`; ``out_dir``: default ``cache_dir()/synthetic``. The same
    arguments always give the same file (named by all of them).
    """
    shape = size if isinstance(size, SyntheticShape) else synthetic_shape(size, n_vocab, n_embd)
    spec = SyntheticSpec(shape=shape, acceptance=acceptance, fmt=fmt, seed=seed)
    if out_dir is None:
        from ..cache import cache_dir

        out_dir = cache_dir() / "synthetic"
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / spec.file_name()
    if not path.exists():
        with written_atomically(path) as tmp:
            write_synthetic(tmp, spec)
    return path


def spec_of(path: str | Path) -> SyntheticSpec | None:
    """The spec of a file written by :func:`synthetic_model` (from its name), else None."""
    m = re.fullmatch(
        r"synthetic-hyv3-[^-]+-(forced|p[0-9.]+)-(\w+)-d(\d+)-l(\d+)-ff(\d+)-h(\d+)kv(\d+)-v(\d+)-s(\d+)-g(\d+)\.gguf",
        Path(path).name,
    )
    if not m or int(m.group(10)) != GENERATOR_VERSION:
        return None
    acc = None if m.group(1) == "forced" else float(m.group(1)[1:])
    d, layers, ff, h, kv, v = (int(m.group(i)) for i in range(3, 9))
    return SyntheticSpec(SyntheticShape(v, d, layers, h, kv, ff), acc, m.group(2), int(m.group(9)))


__all__: Sequence[str] = (
    "FORMATS",
    "SyntheticShape",
    "SyntheticSpec",
    "SyntheticTokens",
    "expected_counters",
    "parse_size",
    "spec_of",
    "synthetic_model",
    "synthetic_shape",
    "synthetic_tokens",
    "synthetic_vocab",
    "write_synthetic",
)
