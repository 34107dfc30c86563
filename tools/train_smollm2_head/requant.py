"""A Q8_0 copy of the Q4_1 source, for generating the training answers faster.

Batched decoding of Q4_1 weights runs ggml's per-column ``vec_dot`` (each weight block decoded once
per sequence in the batch); Q8_0 weights take a tiled GEMM that decodes them once per batch. The
Q4_1 values of a block are 16 levels of an affine grid, which Q8_0's 255 levels at the block's own
scale hold to within 0.4% of the block's largest value: far inside the distance between the Q4_1
file and the original weights, so greedy answers of the copy follow the source's near-ties aside
(the head is trained on the Q4_1 trunk's own hidden states either way: hidden.py).

    .venv/bin/python tools/train_smollm2_head/requant.py     # -> WORK/SmolLM2-135M-Instruct.Q8_0.gguf
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gen_data import DEFAULT_WORK  # noqa: E402


def q8_0_copy(source: Path, out: Path, to: str = "q8_0") -> Path:
    """``to``: q8_0 (default), f16 or bf16 (a hidden-state speed probe: they run as fast as Q8_0)."""
    import gguf

    from mtp_llm.gguf.common import written_atomically

    reader = gguf.GGUFReader(str(source))
    arch = str(reader.fields["general.architecture"].contents())
    with written_atomically(out) as tmp:
        writer = gguf.GGUFWriter(str(tmp), arch)
        for f in reader.fields.values():
            if f.name.startswith("GGUF.") or f.name == "general.architecture":
                continue
            sub_type = f.types[-1] if f.types[0] == gguf.GGUFValueType.ARRAY else None
            writer.add_key_value(f.name, f.contents(), f.types[0], sub_type=sub_type)
        tensors = []
        for t in reader.tensors:
            data, qtype = np.asarray(t.data), t.tensor_type
            if qtype == gguf.GGMLQuantizationType.Q4_1:
                f32 = gguf.quants.dequantize(data, qtype)
                if to == "f16":
                    data, qtype = f32.astype(np.float16), gguf.GGMLQuantizationType.F16
                else:
                    qtype = gguf.GGMLQuantizationType[to.upper()]
                    data = gguf.quants.quantize(f32, qtype)
            tensors.append((t.name, qtype, data))
        for name, qtype, data in tensors:
            writer.add_tensor_info(name, data.shape, data.dtype, data.nbytes, raw_dtype=qtype)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for _, _, data in tensors:
            writer.write_tensor_data(data)
        writer.close()
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work-dir", type=Path, default=DEFAULT_WORK)
    ap.add_argument("--type", choices=("q8_0", "f16", "bf16"), default="q8_0")
    args = ap.parse_args(argv)
    from mtp_llm.smollm2 import source_path

    out = args.work_dir / f"SmolLM2-135M-Instruct.{args.type.upper()}.gguf"
    if not out.exists():
        q8_0_copy(source_path(), out, args.type)
    print(out)


if __name__ == "__main__":
    main()
