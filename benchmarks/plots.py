"""The plots of docs/performance.md, drawn from the recorded results in benchmarks/results.

    .venv/bin/python benchmarks/plots.py [--results benchmarks/results] [--out docs/img]

Needs matplotlib (the ``bench`` extra). Each plot reads only result files (nothing is measured here), so
rerunning a benchmark and then this script brings the page's plots up to date. Files written:

- ``speed-per-n-draft.png``: tokens/s against plain decoding per draft length, the built-in model
  (``built_in_speed.json``) and the synthetic 150M models (``synthetic/*.json``, ``mtp-llm bench`` output)
- ``acceptance-per-position.png``: acceptance per draft position, the built-in model's head
  (``built_in_acceptance.json``) and the calibrated synthetic models (``synthetic_acceptance.md``)
- ``llama-cpp-python.png``: decode tokens/s against llama-cpp-python on the same file (``llama_cpp_python.json``)
- ``iteration-costs.png``: a verify pass's cost by rows, and the speedup the cost model expects per
  acceptance (``costs.json``, ``synthetic/costs-*.json``)
- ``parallel.png``: aggregate tokens/s of 1, 2 and 4 streams per draft length (``parallel/synthetic-128M-*.json``)

PNGs are written with a reduced palette to stay small (under 80 KB each).
"""

from __future__ import annotations

import argparse
import io
import json
import re
import statistics
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

SYNTHETIC = [  # file, label, colour, line style
    ("150M-f16-forced", "f16, every draft accepted", "tab:blue", "-"),
    ("150M-f16-forced-q4_0-head", "f16 + q4_0 draft head, every draft accepted", "tab:orange", "-"),
    ("150M-q8_0-forced", "q8_0, every draft accepted", "tab:green", "-"),
    ("150M-f16-0.75", "f16, acceptance 0.75", "tab:blue", "--"),
    ("150M-f16-0.75-q4_0-head", "f16 + q4_0 draft head, acceptance 0.75", "tab:orange", "--"),
]


# The CPU of recorded files whose format does not carry it (a file that does, in meta.cpu_label or meta.cpu, wins).
RECORDED_CPU = {
    "built_in_speed.json": "AMD EPYC Zen 5",
    "costs.json": "AMD EPYC Zen 5",
    "synthetic": "AMD EPYC Zen 5",
    "parallel": "AMD EPYC Zen 5",
}


def load(path: Path) -> Any:
    return json.loads(path.read_text())


def cpu_of(data: Any, key: str) -> str:
    meta = data.get("meta", {}) if isinstance(data, dict) else {}
    return str(meta.get("cpu_label") or meta.get("cpu") or data.get("cpu") or RECORDED_CPU.get(key, "CPU not recorded"))


def save(fig: Any, path: Path) -> None:
    """Writes the figure as a palette PNG (a few dozen colours: a plot needs no more)."""
    from PIL import Image

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    buf.seek(0)
    image = Image.open(buf).convert("RGB").quantize(colors=64, method=Image.Quantize.MEDIANCUT)
    image.save(path, optimize=True)
    print(f"{path}: {path.stat().st_size // 1024} KB")


def speed_per_n_draft(results: Path, out: Path, plt: Any) -> None:
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6), gridspec_kw={"width_ratios": [1, 1.4]})
    data = load(results / "built_in_speed.json")
    runs = data.get("runs", [data])
    configs = ["plain", "n_draft 1", "n_draft 2", "auto"]
    width = 0.8 / len(runs)
    for i, run in enumerate(runs):
        rows = {r["config"]: r for r in run["rows"]}
        xs = [j + (i - (len(runs) - 1) / 2) * width for j, c in enumerate(configs) if c in rows]
        ys = [rows[c]["x_plain"] for c in configs if c in rows]
        bars = left.bar(xs, ys, width * 0.95, label=f"--reps {run['meta']['reps']}")
        left.bar_label(bars, fmt="%.2f", fontsize=7)
    left.set_xticks(range(len(configs)), configs)
    left.axhline(1.0, color="grey", lw=0.8)
    left.set_ylabel("tokens/s, x plain decoding")
    meta = runs[0]["meta"]
    left.set_title(f"Built-in model (SmolLM2-135M), {cpu_of(runs[0], 'built_in_speed.json')}, "
                   f"{meta['threads']} threads", fontsize=9)
    left.legend(fontsize=7, loc="lower right")
    for name, label, color, style in SYNTHETIC:
        path = results / "synthetic" / f"{name}.json"
        if not path.exists():
            continue
        rows = [r for r in load(path)["rows"] if r["n_draft"] > 0]
        right.plot([r["n_draft"] for r in rows], [r["speedup"] for r in rows], marker="o", ms=3, label=label,
                   color=color, ls=style)
    right.axhline(1.0, color="grey", lw=0.8)
    right.set_xlabel("n_draft")
    right.set_ylabel("tokens/s, x plain decoding")
    first = load(results / "synthetic" / f"{SYNTHETIC[0][0]}.json")
    right.set_title(f"Synthetic 150M models, {cpu_of(first, 'synthetic')}, {first['meta']['threads']} threads",
                    fontsize=9)
    right.legend(fontsize=7)
    save(fig, out / "speed-per-n-draft.png")
    plt.close(fig)


def synthetic_acceptance(path: Path) -> dict[str, list[float]]:
    """p -> the measured acceptance per position given the previous (from the table's text)."""
    rows: dict[str, list[float]] = {}
    for line in path.read_text().splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 6 and re.fullmatch(r"\d\.\d+", cells[1]):
            rows[cells[1]] = [float(m) for m in re.findall(r"(\d\.\d+) \(\d+\)", cells[5])]
    return rows


def acceptance_per_position(results: Path, out: Path, plt: Any) -> None:
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    data = load(results / "built_in_acceptance.json")
    cumulative = data["n_draft"]["3"]["per_position"]
    conditional = [cumulative[0]] + [b / a for a, b in zip(cumulative, cumulative[1:])]
    positions = range(1, len(cumulative) + 1)
    ax.plot(positions, conditional, marker="o", lw=2, label="built-in head, given the drafts before it accepted")
    ax.plot(positions, cumulative, marker="s", lw=2, ls="--", label="built-in head, all drafts up to it accepted")
    for p, values in synthetic_acceptance(results / "synthetic_acceptance.md").items():
        ax.plot(range(1, len(values) + 1), values, marker=".", lw=1, alpha=0.8,
                label=f"synthetic model built for {p}, given the previous")
    ax.set_xticks(list(positions))
    ax.set_xlabel("draft position (n_draft 3)")
    ax.set_ylabel("acceptance")
    ax.set_ylim(0, 1)
    ax.set_title("Acceptance per draft position (greedy; independent of the CPU)", fontsize=9)
    ax.legend(fontsize=7, loc="lower left")
    save(fig, out / "acceptance-per-position.png")
    plt.close(fig)


def llama_cpp_python(results: Path, out: Path, plt: Any) -> None:
    data = load(results / "llama_cpp_python.json")
    names = list(data["results"])
    medians = [statistics.median(v) for v in data["results"].values()]
    low = [m - min(v) for m, v in zip(medians, data["results"].values())]
    high = [max(v) - m for m, v in zip(medians, data["results"].values())]
    fig, ax = plt.subplots(figsize=(6.5, 2.6))
    colors = ["tab:grey" if n.startswith("llama-cpp-python") else "tab:blue" for n in names]
    bars = ax.barh(range(len(names)), medians, xerr=[low, high], color=colors, capsize=3)
    ax.bar_label(bars, labels=[f"{m:.0f} ({m / medians[0]:.2f}x)" for m in medians], fontsize=7, padding=18)
    ax.set_yticks(range(len(names)), names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("decode tokens/s (median, min-max)")
    ax.set_xlim(0, max(medians) * 1.35)
    weights = "same trunk weights" if data.get("peer_model", data["model"]) != data["model"] else "same file"
    ax.set_title(f"{Path(data['model']).name} ({weights}), {cpu_of(data, 'llama_cpp_python.json')}", fontsize=9)
    save(fig, out / "llama-cpp-python.png")
    plt.close(fig)


def iteration_costs(results: Path, out: Path, plt: Any) -> None:
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    built_in = load(results / "costs.json")
    curves = [(f"built-in SmolLM2-135M Q4_1 ({cpu_of(built_in, 'costs.json')})", built_in)]
    for fmt in ("f16", "q8_0"):
        path = results / "synthetic" / f"costs-150M-{fmt}.json"
        if path.exists():
            d = load(path)
            curves.append((f"synthetic 150M {fmt} ({cpu_of(d, 'synthetic')})", d))
    for label, d in curves:
        t = d["target_ms"]
        left.plot(range(1, len(t) + 1), [x / t[0] for x in t], marker="o", ms=3, label=label)
    left.plot([1, 3.2], [1, 3.2], color="grey", lw=0.8, ls=":", label="each row a full pass")
    left.set_ylim(0.8, 3.2)
    left.set_xlabel("rows in the target's pass (n_draft + 1)")
    left.set_ylabel("time, x a one-row pass")
    left.set_title("What a verify pass costs, 2 threads", fontsize=9)
    left.legend(fontsize=7)
    speedup = built_in["speedup"]
    accept = sorted(speedup, key=float)
    for k in ("1", "2", "3", "4"):
        right.plot([float(a) for a in accept], [speedup[a][k] for a in accept], marker="o", ms=3, label=f"n_draft {k}")
    right.axhline(1.0, color="grey", lw=0.8)
    right.axvline(built_in["measured_acceptance"][0], color="tab:red", lw=0.8, ls="--",
                  label="the head's measured acceptance at position 1")
    right.set_xlabel("acceptance per draft position")
    right.set_ylabel("expected tokens/s, x plain")
    right.set_title(f"Built-in model: the cost model's speedup ({cpu_of(built_in, 'costs.json')})", fontsize=9)
    right.legend(fontsize=7)
    save(fig, out / "iteration-costs.png")
    plt.close(fig)


def parallel(results: Path, out: Path, plt: Any) -> None:
    panels = [("synthetic-128M-0.75", "acceptance 0.75"), ("synthetic-128M-forced", "every draft accepted")]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    cpu = "CPU not recorded"
    for ax, (name, label) in zip(axes, panels):
        data = load(results / "parallel" / f"{name}.json")
        rows, cpu = data["rows"], cpu_of(data, "parallel")
        lengths = list(dict.fromkeys(r["n_draft"] for r in rows))
        for k in lengths:
            mine = [r for r in rows if r["n_draft"] == k]
            style = {"lw": 2.5, "color": "black"} if k == "auto" else {"lw": 1.2}
            ax.plot([r["streams"] for r in mine], [r["aggregate_tps"] for r in mine], marker="o", ms=3,
                    label="plain" if k == 0 else f"n_draft {k}", **style)
        ax.set_xticks([1, 2, 4])
        ax.set_xlabel("concurrent streams (n_parallel)")
        ax.set_title(f"Synthetic 128M f16, {label}", fontsize=9)
        ax.legend(fontsize=7)
    axes[0].set_ylabel("aggregate tokens/s (median)")
    fig.suptitle(f"Parallel streams, {cpu}, {data['meta']['threads']} threads", fontsize=9)
    save(fig, out / "parallel.png")
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    args = parser.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    args.out.mkdir(parents=True, exist_ok=True)
    for plot in (speed_per_n_draft, acceptance_per_position, llama_cpp_python, iteration_costs, parallel):
        plot(args.results, args.out, plt)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
