"""Tiny f32 GGUF models with an MTP head, written from numpy for tests and demos.

Nothing can be downloaded here, so the project makes its own models:

* ``random``: random weights, a real but untrained model (acceptance ~0%);
* ``random-trunk.gguf`` + ``mtp-random-trunk.gguf``: the same model split into
  a trunk-only target and an MTP sidecar;
* ``accept100``: the target always emits one token and the head always agrees;
* ``accept33``: the head agrees only at draft position 1, so at n_draft=3
  exactly one draft in three is accepted;
* ``random-split-0000k-of-00003.gguf``: ``random`` written as a split GGUF (as llama.cpp's
  ``gguf-split`` does), the MTP head in the last part;
* ``eos``: the target emits end-of-generation at once;
* ``sampling``: the target's next-token distribution is the same at every
  position, :data:`SAMPLING_PROBABILITIES` over ("a", "b", "c", any other token),
  and the head always drafts "a": for checking that sampled MTP output follows
  the target's distribution (drafts are accepted about half the time);
* ``hybrid``: a random-weight qwen35 (Gated DeltaNet + attention) model whose
  head is right about a third of the time (partial acceptances), to exercise
  recurrent-state rollback and checkpoint save/restore;
* ``glm4-nextn``: a glm4 model that stores a nextn block llama.cpp has no MTP
  graph for (plain decoding only);
* ``llama-mtp``, ``glm4moe``: random-weight models of the built-in model's layout (llama with an
  embedded nextn block, patch 0005) and of GLM-4.5's (MoE nextn block), from
  :mod:`mtp_llm.gguf.mtp_layouts`.

The forced models use identity blocks (all projections zero, norms one) so
the hidden state is the normalised token embedding, and a few chosen
directions steer the logits; see :func:`_forced_tensors`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from .common import tiny_vocab
from .glm4 import write_glm4
from .hyv3 import HyV3Config, split_mtp, write_hy_v3
from .mtp_layouts import write_glm4moe, write_llama_mtp
from .qwen35 import write_qwen35

# Dimensions with a fixed meaning in the forced models.
_D_TOKEN_X = 0  # steers the logits to TOKEN_X
_D_FROM_TARGET = 1  # set only in the target's hidden state
_D_TOKEN_Y = 2  # steers the logits to TOKEN_Y


TINY_CONFIG = HyV3Config(
    n_vocab=len(tiny_vocab().tokens), n_embd=64, n_layer=2, n_head=4, n_head_kv=2, n_ff=128
)

SPLIT_PARTS = 3  # random-split: 39 tensors, at most 16 a file

# Emitted by the forced models: "a" and "b" in byte-level form.
TOKEN_X = ord("a")
TOKEN_Y = ord("b")


# The ``sampling`` model's next-token distribution: "a", "b", "c", then every other token together.
SAMPLING_TOKENS = (TOKEN_X, TOKEN_Y, ord("c"))
SAMPLING_PROBABILITIES = (0.5, 0.25, 0.15, 0.10)


def _sampling_tensors(config: HyV3Config) -> dict[str, np.ndarray]:
    """The accept100 weights with an output matrix that gives every position the
    distribution SAMPLING_PROBABILITIES (the hidden state's X component is the same
    for every token, so the logits do not depend on the context)."""
    tensors = _forced_tensors(config, head_agrees_after_first=True)
    h_x = float(np.sqrt(config.n_embd / 2.0))  # rmsnorm of an embedding with two unit components
    n_rest = config.n_vocab - len(SAMPLING_TOKENS)
    # Every other token has logit ~0, so together they weigh n_rest; scale the partition to match.
    partition = n_rest / SAMPLING_PROBABILITIES[-1]
    output = tensors["output.weight"]
    output[:, : _D_TOKEN_Y + 1] = 0.0
    for token, p in zip(SAMPLING_TOKENS, SAMPLING_PROBABILITIES):
        output[token, _D_TOKEN_X] = np.log(p * partition) / h_x
    return tensors


def _random_tensors(config: HyV3Config, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    tensors = {}
    for name, shape in config.tensor_shapes().items():
        if name.endswith("norm.weight"):
            tensors[name] = (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
        elif name == "token_embd.weight":
            tensors[name] = rng.standard_normal(shape).astype(np.float32)
        else:
            fan_in = shape[1]
            tensors[name] = (rng.standard_normal(shape) * 1.5 / np.sqrt(fan_in)).astype(np.float32)
    return tensors


def _forced_tensors(config: HyV3Config, head_agrees_after_first: bool) -> dict[str, np.ndarray]:
    """Weights for a target that always emits TOKEN_X and a head that follows it.

    Every block is the identity, so the target's hidden state is
    rmsnorm(embedding) with the X and FROM_TARGET directions set. The head maps
    the FROM_TARGET direction of its hidden input to X. When
    ``head_agrees_after_first`` is false the head's own output (which seeds its
    next draft step) lacks FROM_TARGET, and a constant pull towards Y wins from
    draft position 2 on.
    """
    rng = np.random.default_rng(7)
    e, v = config.n_embd, config.n_vocab
    tensors = {n: np.zeros(s, dtype=np.float32) for n, s in config.tensor_shapes().items()}
    for name in tensors:
        if name.endswith("norm.weight"):
            tensors[name][:] = 1.0
    embd = 0.01 * rng.standard_normal((v, e)).astype(np.float32)
    embd[:, _D_TOKEN_X] = 1.0
    embd[:, _D_FROM_TARGET] = 1.0
    embd[:, _D_TOKEN_Y] = 0.0
    tensors["token_embd.weight"] = embd

    output = 0.01 * rng.standard_normal((v, e)).astype(np.float32)
    output[:, :3] = 0.0
    output[TOKEN_X, _D_TOKEN_X] = 10.0
    output[TOKEN_Y, _D_TOKEN_Y] = 10.0
    tensors["output.weight"] = output

    head = config.n_layer
    eh = np.zeros((e, 2 * e), dtype=np.float32)  # input: [enorm(embedding), hnorm(hidden)]
    eh[_D_TOKEN_X, e + _D_FROM_TARGET] = 1.0
    if head_agrees_after_first:
        eh[_D_TOKEN_X, _D_TOKEN_X] = 1.0
    else:
        eh[_D_TOKEN_Y, _D_TOKEN_X] = 0.5
    tensors[f"blk.{head}.nextn.eh_proj.weight"] = eh
    return tensors


def make_tiny_models(out_dir: str | Path) -> dict[str, Path]:
    """Write every tiny model into ``out_dir`` (idempotent) and return their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    vocab = tiny_vocab()
    config = TINY_CONFIG
    paths: dict[str, Path] = {}

    specs: dict[str, Callable[[], dict[str, np.ndarray]]] = {
        "random": lambda: _random_tensors(config, seed=1234),
        "accept100": lambda: _forced_tensors(config, head_agrees_after_first=True),
        "accept33": lambda: _forced_tensors(config, head_agrees_after_first=False),
        "sampling": lambda: _sampling_tensors(config),
    }
    for name, make in specs.items():
        path = out / f"{name}.gguf"
        if not path.exists():
            write_hy_v3(path.with_suffix(".tmp"), _named(config, name), make(), vocab)
            path.with_suffix(".tmp").replace(path)
        paths[name] = path

    eos_path = out / "eos.gguf"
    if not eos_path.exists():
        tensors = _forced_tensors(config, head_agrees_after_first=True)
        tensors["output.weight"][vocab.eos_id, _D_TOKEN_X] = 20.0
        write_hy_v3(eos_path.with_suffix(".tmp"), _named(config, "eos"), tensors, vocab)
        eos_path.with_suffix(".tmp").replace(eos_path)
    paths["eos"] = eos_path

    trunk = out / "random-trunk.gguf"
    sidecar = out / "mtp-random-trunk.gguf"
    if not (trunk.exists() and sidecar.exists()):
        split_mtp(paths["random"], out)
    paths["random-trunk"] = trunk
    paths["mtp-random-trunk"] = sidecar

    split = [out / f"random-split-{k:05d}-of-{SPLIT_PARTS:05d}.gguf" for k in range(1, SPLIT_PARTS + 1)]
    if not all(p.exists() for p in split):
        tmp = out / ".random-split.tmp"
        tmp.mkdir(exist_ok=True)
        write_hy_v3(tmp / "random-split.gguf", _named(config, "random"), _random_tensors(config, seed=1234), vocab,
                    split_max_tensors=16)
        for part in split:
            (tmp / part.name).replace(part)
        tmp.rmdir()
    paths["random-split"] = split[0]

    hybrid = out / "hybrid.gguf"
    if not hybrid.exists():
        write_qwen35(hybrid.with_suffix(".tmp"), seed=4321, successor_scale=0.1, vocab=vocab)
        hybrid.with_suffix(".tmp").replace(hybrid)
    paths["hybrid"] = hybrid

    glm4 = out / "glm4-nextn.gguf"
    if not glm4.exists():
        write_glm4(glm4.with_suffix(".tmp"), vocab, seed=77)
        glm4.with_suffix(".tmp").replace(glm4)
    paths["glm4-nextn"] = glm4

    for name, write in (("llama-mtp", write_llama_mtp), ("glm4moe", write_glm4moe)):
        path = out / f"{name}.gguf"
        if not path.exists():
            write(path.with_suffix(".tmp"), vocab, seed=5)
            path.with_suffix(".tmp").replace(path)
        paths[name] = path
    return paths


def _named(config: HyV3Config, name: str) -> HyV3Config:
    from dataclasses import replace

    return replace(config, name=f"mtp-llm-tiny-{name}")
