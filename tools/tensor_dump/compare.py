"""Compares two tensor dumps of tools/tensor_dump/dump.cpp: which graph tensors differ, and by how much.

Usage: python compare.py A.bin B.bin [--all]   (prints the unlike tensors, the first 20 unless --all; exit status 1
if any differ)
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Iterator

import numpy as np


def records(path: str) -> Iterator[tuple[str, str, np.ndarray]]:
    data = open(path, "rb").read()
    at = 0
    while at < len(data):
        (n,) = struct.unpack_from("<I", data, at)
        name = data[at + 4 : at + 4 + n].decode()
        at += 4 + n
        (n,) = struct.unpack_from("<I", data, at)
        op = data[at + 4 : at + 4 + n].decode()
        at += 4 + n
        (count,) = struct.unpack_from("<Q", data, at)
        yield name, op, np.frombuffer(data, np.float32, count, at + 8)
        at += 8 + 4 * count


def main() -> int:
    a_path, b_path = sys.argv[1], sys.argv[2]
    show_all = "--all" in sys.argv[3:]
    total = unlike = 0
    for k, ((name, op, a), (name_b, _, b)) in enumerate(zip(records(a_path), records(b_path), strict=True)):
        if name != name_b:
            raise SystemExit(f"tensor {k}: {name} vs {name_b}: not dumps of the same model and passes")
        total += 1
        differ = np.count_nonzero(a.view(np.uint32) != b.view(np.uint32))
        if differ:
            unlike += 1
            if unlike <= 20 or show_all:
                rel = float(np.max(np.abs(a - b)) / (np.max(np.abs(a)) + 1e-30))
                print(f"{k:5d} {name:28s} {op:16s} {differ}/{a.size} elements unlike, max relative {rel:.2e}")
    print(f"{unlike} of {total} tensors unlike")
    return 1 if unlike else 0


if __name__ == "__main__":
    raise SystemExit(main())
