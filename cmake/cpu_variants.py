"""The CPU variants of ggml's CPU backend that the build compiles, and the one a machine would load.

ggml names a variant after the first CPU that has all its instruction sets (``haswell``: AVX2, FMA, F16C, BMI2) and
loads, at run time, the variant with the highest score among those whose instruction sets the CPU has
(``ggml/src/ggml-cpu/arch/*/cpu-feats.cpp``). CMake calls this script for the list to build
(``--processor ... --variants all``); ``--host`` prints the variant this machine would load, which the tests compare
with the one the extension reports.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

# Upstream's variants (ggml/src/CMakeLists.txt) with the instruction sets each needs, as /proc/cpuinfo names them.
_AVX = ("sse4_2", "avx")
_AVX2 = (*_AVX, "f16c", "fma", "avx2", "bmi2")
_AVX512 = (*_AVX2, "avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw")
_ZEN4 = (*_AVX512, "avx512vbmi", "avx512_vnni", "avx512_bf16")
X86_VARIANTS: dict[str, tuple[str, ...]] = {
    "x64": (),
    "sse42": ("sse4_2",),
    "sandybridge": _AVX,
    "ivybridge": (*_AVX, "f16c"),
    "piledriver": (*_AVX, "f16c", "fma"),
    "haswell": _AVX2,
    "alderlake": (*_AVX2, "avx_vnni"),
    "skylakex": _AVX512,
    "cannonlake": (*_AVX512, "avx512vbmi"),
    "cascadelake": (*_AVX512, "avx512_vnni"),
    "icelake": (*_AVX512, "avx512vbmi", "avx512_vnni"),
    "cooperlake": (*_AVX512, "avx512_vnni", "avx512_bf16"),
    "zen4": _ZEN4,
    "sapphirerapids": (*_ZEN4, "amx_tile", "amx_int8"),
}
# ggml's scores (cpu-feats.cpp): 1 plus a bit per instruction set the variant was compiled for.
X86_WEIGHTS = {
    "fma": 1 << 0, "f16c": 1 << 1, "sse4_2": 1 << 2, "bmi2": 1 << 3, "avx": 1 << 4, "avx2": 1 << 5,
    "avx_vnni": 1 << 6, "avx512f": 1 << 7, "avx512vbmi": 1 << 8, "avx512_bf16": 1 << 9, "avx512_vnni": 1 << 10,
    "amx_int8": 1 << 11,
}
ARM_VARIANTS: dict[str, tuple[str, ...]] = {
    "armv8.0_1": (),
    "armv8.2_1": ("asimddp",),
    "armv8.2_2": ("asimddp", "asimdhp"),
    "armv8.2_3": ("asimddp", "asimdhp", "sve"),
    "armv8.6_1": ("asimddp", "asimdhp", "sve", "i8mm"),
    "armv8.6_2": ("asimddp", "asimdhp", "sve", "i8mm", "sve2"),
    "armv9.2_1": ("asimddp", "asimdhp", "sve", "i8mm", "sme"),
    "armv9.2_2": ("asimddp", "asimdhp", "sve", "i8mm", "sve2", "sme"),
}
ARM_WEIGHTS = {"asimddp": 1 << 1, "asimdhp": 1 << 2, "sve": 1 << 3, "i8mm": 1 << 4, "sve2": 1 << 5, "sme": 1 << 6}


def family(processor: str) -> str:
    """``x86``, ``arm`` or ``""`` (another architecture: upstream's own variants, if any)."""
    p = processor.lower()
    if p in {"x86_64", "amd64", "x64", "i686", "i386", "x86"}:
        return "x86"
    if p in {"aarch64", "arm64", "armv8", "armv8l"}:
        return "arm"
    return ""


def compiler_accepts(compiler: str, flag: str) -> bool:
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "probe.c"
        source.write_text("int main(void) { return 0; }\n")
        result = subprocess.run([compiler, flag, "-c", str(source), "-o", os.devnull], capture_output=True)
        return result.returncode == 0


def variants_to_build(processor: str, requested: str, compiler: str | None, amx: bool) -> list[str]:
    """The variants to compile: ``all`` means every variant of the architecture that the package ships (the AMX one
    only with ``amx``; the SME ones only where the compiler knows SME); a ``;``-list is checked against the names."""
    fam = family(processor)
    known = X86_VARIANTS if fam == "x86" else ARM_VARIANTS if fam == "arm" else {}
    if requested.strip().lower() == "all":
        names = list(known)
        if fam == "x86" and not amx:
            names.remove("sapphirerapids")
        if fam == "arm" and compiler and not compiler_accepts(compiler, "-march=armv9.2-a+sve2+sme"):
            names = [n for n in names if not n.startswith("armv9.2")]
        return names
    names = [n.strip() for n in requested.replace(",", ";").split(";") if n.strip()]
    unknown = [n for n in names if known and n not in known]
    if unknown or not names:
        raise SystemExit(f"MTP_LLM_CPU_VARIANTS={requested!r}: unknown variant(s) {unknown}; "
                         f"the variants of {processor} are {', '.join(known) or 'upstream defaults'} (or 'all')")
    return names


def cpu_flags() -> set[str]:
    """The CPU's feature names as Linux's /proc/cpuinfo gives them (x86 ``flags``, arm ``Features``)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in {"flags", "Features"}:
            return set(value.split())
    return set()


def best_variant(flags: set[str], built: list[str], processor: str | None = None) -> str | None:
    """The variant ggml would load from ``built`` on a CPU with ``flags``: the highest score among those it runs."""
    fam = family(processor or platform.machine())
    needs = X86_VARIANTS if fam == "x86" else ARM_VARIANTS
    weights = X86_WEIGHTS if fam == "x86" else ARM_WEIGHTS
    runnable = [v for v in built if v in needs and set(needs[v]) <= flags]
    if not runnable:
        return None
    return max(runnable, key=lambda v: 1 + sum(weights.get(f, 0) for f in needs[v]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processor", default=platform.machine())
    parser.add_argument("--variants", default="all")
    parser.add_argument("--compiler")
    parser.add_argument("--amx", action="store_true")
    parser.add_argument("--host", action="store_true", help="print the variant this machine would load")
    args = parser.parse_args()
    built = variants_to_build(args.processor, args.variants, args.compiler, args.amx)
    if args.host:
        print(best_variant(cpu_flags(), built, args.processor) or "")
    else:
        sys.stdout.write(";".join(built))


if __name__ == "__main__":
    main()
