"""Export the trained checkpoint to GGUF (hy_v3 with an embedded MTP head) plus test data.

Writes into --out-dir (default: tests/models/ of this repo, where the tests load it from):
  mtp-llm-default.gguf                  trunk + MTP head, matrices f16, norms f32
  mtp-llm-default.tokens.json           test strings with the token ids of the trained tokenizer
  mtp-llm-default.reference.npz         PyTorch outputs on fixed inputs for the parity test
With --split also mtp-llm-default-trunk.gguf and mtp-mtp-llm-default-trunk.gguf.
Uses mtp_llm/gguf/hyv3.py (write_hy_v3) and the vendored gguf package.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
from corpus import DEFAULT_WORK_DIR, EOT  # noqa: E402
from model import gguf_tensors, load_checkpoint  # noqa: E402


def _load_gguf_hyv3():
    """mtp_llm/gguf/hyv3.py loaded by path: importing the mtp_llm package needs its compiled core.

    The mtp_llm/gguf subpackage is loaded under its own top-level name (it imports nothing
    outside itself), so hyv3's relative imports work."""
    import importlib
    import importlib.util

    package_dir = REPO / "mtp_llm" / "gguf"
    spec = importlib.util.spec_from_file_location(
        "mtp_llm_gguf", package_dir / "__init__.py", submodule_search_locations=[str(package_dir)]
    )
    package = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = package  # dataclasses and relative imports look the modules up
    spec.loader.exec_module(package)
    return importlib.import_module("mtp_llm_gguf.hyv3")


_gh = _load_gguf_hyv3()
BpeVocab, HyV3Config, write_hy_v3 = _gh.BpeVocab, _gh.HyV3Config, _gh.write_hy_v3

NAME = "mtp-llm-default"

TEST_STRINGS = [
    "To be, or not to be, that is the question:",
    "Ham.\nO, that this too too solid flesh would melt,\nThaw, and resolve itself into a dew!",
    "  leading spaces, trailing spaces  ",
    "Tabs\tand\nnewlines\n\n\nand   runs   of spaces",
    "What's done can't be undone. I'll go; he'd say we've won, you're right.",
    "Numbers: 1 12 123 1234 12345 3.14159 2026-11-30",
    "MIXED case WORDS, Hyphen-ated and under_scored; (brackets) [more] {braces}",
    "caf\u00e9 na\u00efve \u00fcber \u4e2d\u6587 \U0001F600 emoji",
    "Exit, pursued by a bear.",
    "",
    " ",
    "a",
    "\n",
]


def vocab_from_tokenizer(path: Path) -> tuple[BpeVocab, "Tokenizer"]:  # noqa: F821
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(path))
    data = json.loads(path.read_text())
    vocab = data["model"]["vocab"]
    tokens = [None] * len(vocab)
    for t, i in vocab.items():
        tokens[i] = t
    specials = {a["id"]: a["content"] for a in data["added_tokens"]}
    for i, t in specials.items():
        tokens[i] = t
    assert all(t is not None for t in tokens)
    merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
    types = [3 if i in specials else 1 for i in range(len(tokens))]
    eot = tok.token_to_id(EOT)
    return BpeVocab(tokens=tokens, token_types=types, merges=merges, bos_id=eot, eos_id=eot,
                    pre="gpt-2", add_bos=False), tok


@torch.no_grad()
def reference(model, tok) -> dict[str, np.ndarray]:
    text = "ROMEO.\nBut soft, what light through yonder window breaks?\nIt is the east, and Juliet is the sun."
    ids = tok.encode(text).ids[:16]
    x = torch.tensor([ids])
    h, gs = model(x, 2)
    return {
        "tokens": np.asarray(ids, dtype=np.int32),
        "trunk_logits": model.logits(h[0]).numpy().astype(np.float32),
        "trunk_h": h[0].numpy().astype(np.float32),
        "mtp_step1_logits": model.logits(gs[0][0]).numpy().astype(np.float32),
        "mtp_step1_h": gs[0][0].numpy().astype(np.float32),
        "mtp_step2_logits": model.logits(gs[1][0]).numpy().astype(np.float32),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--work-dir", type=Path, default=DEFAULT_WORK_DIR)
    ap.add_argument("--ckpt", type=Path, default=None)
    ap.add_argument("--out-dir", type=Path, default=REPO / "tests" / "models")
    ap.add_argument("--file-type", choices=["f16", "f32"], default="f16")
    ap.add_argument("--n-ctx-train", type=int, default=2048)
    ap.add_argument("--split", action="store_true", help="also write the trunk-only file and mtp- sidecar")
    args = ap.parse_args(argv)
    torch.set_num_threads(2)

    ck_path = args.ckpt or args.work_dir / "ckpt.pt"
    # the reference uses the weights exactly as stored in the f16 file
    model = load_checkpoint(ck_path, round_to_f16=args.file_type == "f16")
    c = model.cfg
    vocab, tok = vocab_from_tokenizer(args.work_dir / "tokenizer.json")
    assert len(vocab.tokens) == c.n_vocab
    config = HyV3Config(n_vocab=c.n_vocab, n_embd=c.n_embd, n_layer=c.n_layer, n_head=c.n_head,
                        n_head_kv=c.n_head_kv, n_ff=c.n_ff, n_nextn=1, n_ctx_train=args.n_ctx_train,
                        rope_freq_base=c.rope_freq_base, rms_norm_eps=c.rms_norm_eps, name=NAME)
    tensors = gguf_tensors(model)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    written = [write_hy_v3(args.out_dir / f"{NAME}.gguf", config, tensors, vocab, part="full",
                           file_type=args.file_type)]
    if args.split:
        written.append(write_hy_v3(args.out_dir / f"{NAME}-trunk.gguf", config, tensors, vocab,
                                   part="trunk", file_type=args.file_type))
        written.append(write_hy_v3(args.out_dir / f"mtp-{NAME}-trunk.gguf", config, tensors, vocab,
                                   part="mtp", file_type=args.file_type))

    cases = [{"text": s, "ids": tok.encode(s).ids} for s in TEST_STRINGS]
    # add_special=false, parse_special=false in llama.cpp terms: no BOS, EOT text is plain text
    (args.out_dir / f"{NAME}.tokens.json").write_text(json.dumps({
        "tokenizer": "byte-level BPE, llama.cpp tokenizer.ggml.model=gpt2 pre=gpt-2",
        "add_special": False, "parse_special": False,
        "eos_id": vocab.eos_id, "eos_text": EOT, "cases": cases}, indent=1, ensure_ascii=True) + "\n")

    ref = reference(model, tok)
    np.savez_compressed(args.out_dir / f"{NAME}.reference.npz", **ref)
    for p in written:
        print(f"{p}  {p.stat().st_size / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
