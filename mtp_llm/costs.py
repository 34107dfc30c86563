"""What one draft/verify iteration costs on this machine, and where MTP pays (``mtp-llm bench --costs``).

:func:`measure_costs` times llama.cpp's passes directly (the native probe in
``csrc/cost_probe.cpp``: contexts made as a session makes them, a filled context, every
pass repeated with the caches rolled back in between, passes interleaved):

* the target's decode of ``r`` rows, each with logits, for ``r = 1 .. n_draft + 1``
  (``r = 1`` is plain decoding's pass; ``r = k + 1`` verifies ``k`` drafts);
* one greedy sample from a row of target logits;
* the MTP head drafting ``k`` tokens (``k`` one-row head passes, each with its top-k
  sampling), for ``k = 1 .. n_draft``;
* the head's catch-up over ``r`` verified rows (``common_speculative_process``);
* with mtp_llm's fused driver (``csrc/drafter.*``, single-head models, the engine's default):
  the draft of ``k`` tokens whose first decode also carries the ``j`` accepted rows.

:class:`CostCurve` turns these into the expected speedup of MTP over plain decoding for a
per-position acceptance ``a`` (each draft is right with probability ``a`` given the earlier
ones were) and draft length ``k``. With ``A`` the number of accepted drafts,
``P(A = j) = a**j * (1 - a)`` for ``j < k`` and ``P(A = k) = a**k``:

    E[committed tokens per iteration] = 1 + a + a**2 + ... + a**k
    iteration = verify(k + 1) + E[head(k, A) + (A + 1) * sample]
    plain token = pass(1) + sample
    speedup = E[committed] * plain token / iteration

where ``head(k, j)`` is the fused draft of ``k`` after ``j`` accepted drafts, or, with llama.cpp's
driver, ``draft(k) + catch_up(j + 1)`` (the head catches up on the last committed token and the
accepted drafts, then drafts). The target samples the accepted drafts plus one token of its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ACCEPTANCES = (0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


@dataclasses.dataclass(frozen=True)
class CostCurve:
    """Measured pass times in milliseconds (medians; ``*_min`` the fastest repetition)."""

    target_ms: tuple[float, ...]
    """[r - 1]: one target decode of r rows, r = 1 .. n_draft + 1."""
    sample_ms: float
    """One greedy sample from a row of target logits."""
    draft_ms: tuple[float, ...]
    """[k - 1]: the head drafting k tokens (k passes with sampling); empty without a head."""
    catch_up_ms: tuple[float, ...]
    """[r - 1]: the head's catch-up over r verified rows; empty without a head."""
    fused_ms: tuple[tuple[float, ...], ...] = ()
    """[k - 1][j]: the fused driver's draft of k tokens after j accepted drafts; empty where it does not apply."""
    driver: str = "upstream"
    """The driver a session with the probe's options uses: "fused", "upstream" or "none"."""
    target_min_ms: tuple[float, ...] = ()
    draft_min_ms: tuple[float, ...] = ()
    catch_up_min_ms: tuple[float, ...] = ()
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_native(cls, d: dict[str, Any], meta: dict[str, Any] | None = None) -> CostCurve:
        def med(rows: Sequence[Sequence[float]]) -> tuple[float, ...]:
            return tuple(r[0] / 1000.0 for r in rows)

        def low(rows: Sequence[Sequence[float]]) -> tuple[float, ...]:
            return tuple(r[1] / 1000.0 for r in rows)

        info = {k: d[k] for k in ("fill", "reps", "n_threads", "n_threads_batch", "flash_attn")}
        return cls(
            target_ms=med(d["target_rows"]),
            sample_ms=d["sample"][0] / 1000.0,
            draft_ms=med(d["draft_passes"]),
            catch_up_ms=med(d["catch_up_rows"]),
            target_min_ms=low(d["target_rows"]),
            draft_min_ms=low(d["draft_passes"]),
            catch_up_min_ms=low(d["catch_up_rows"]),
            fused_ms=tuple(med(rows) for rows in d.get("fused", [])),
            driver=str(d.get("driver", "upstream")),
            meta={**info, **(meta or {})},
        )

    @property
    def n_draft(self) -> int:
        return len(self.draft_ms)

    @property
    def one_row_ms(self) -> float:
        return self.target_ms[0]

    def verify_ms(self, k: int) -> float:
        """The target pass over ``[last, k drafts]``."""
        return self.target_ms[k]

    def head_pass_ms(self) -> float:
        """One head pass with its sampling (drafting one token)."""
        return self.draft_ms[0]

    def plain_token_ms(self) -> float:
        return self.target_ms[0] + self.sample_ms

    def head_ms(self, k: int, j: int, driver: str | None = None) -> float:
        """The head's time in an iteration drafting ``k`` after ``j`` drafts were accepted."""
        if (driver or self.driver) == "fused" and self.fused_ms:
            return self.fused_ms[k - 1][j]
        return self.draft_ms[k - 1] + self.catch_up_ms[j]

    def iteration_ms(self, k: int, a: Acceptance, driver: str | None = None) -> float:
        """Expected time of one draft/verify iteration with draft length ``k``."""
        probs = accepted_distribution(k, a)
        after = sum(p * (self.head_ms(k, j, driver) + (j + 1) * self.sample_ms) for j, p in enumerate(probs))
        return self.verify_ms(k) + after

    def speedup(self, k: int, a: Acceptance, driver: str | None = None) -> float:
        """Expected decode speed of MTP with draft length ``k`` over plain decoding."""
        return expected_committed(k, a) * self.plain_token_ms() / self.iteration_ms(k, a, driver)

    def best(self, a: Acceptance, driver: str | None = None) -> tuple[int, float]:
        """The draft length with the highest expected speedup at acceptance ``a``, and that speedup."""
        return max(((k, self.speedup(k, a, driver)) for k in range(1, self.n_draft + 1)), key=lambda t: t[1])

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["speedup"] = {
            f"{a:.2f}": {str(k): round(self.speedup(k, a), 4) for k in range(1, self.n_draft + 1)}
            for a in ACCEPTANCES
        } if self.n_draft else {}
        return d


Acceptance = float | Sequence[float]
"""A per-position acceptance: one rate for every position, or the rate at positions 1, 2, ...
(each given the earlier drafts were accepted; the last one repeats)."""


def _rates(k: int, a: Acceptance) -> list[float]:
    if isinstance(a, (int, float)):
        return [float(a)] * k
    rates = list(a) or [0.0]
    return [rates[min(i, len(rates) - 1)] for i in range(k)]


def median_curve(curves: Sequence[CostCurve]) -> CostCurve:
    """Pass by pass, the median of several measurements of one model."""
    import statistics

    def med(rows: Sequence[Sequence[float]]) -> tuple[float, ...]:
        return tuple(statistics.median(col) for col in zip(*rows))

    first = curves[0]
    return dataclasses.replace(
        first,
        target_ms=med([c.target_ms for c in curves]),
        sample_ms=statistics.median(c.sample_ms for c in curves),
        draft_ms=med([c.draft_ms for c in curves]),
        catch_up_ms=med([c.catch_up_ms for c in curves]),
        fused_ms=tuple(med([c.fused_ms[k] for c in curves]) for k in range(len(first.fused_ms))),
        target_min_ms=(), draft_min_ms=(), catch_up_min_ms=(),
    )


def accepted_distribution(k: int, a: Acceptance) -> list[float]:
    """``P(A = j)`` for ``j = 0 .. k``: ``j`` drafts accepted in a row, then a rejection (or the end)."""
    rates = _rates(k, a)
    out, reach = [], 1.0
    for r in rates:
        out.append(reach * (1.0 - r))
        reach *= r
    return [*out, reach]


def expected_committed(k: int, a: Acceptance) -> float:
    """Tokens one iteration commits on average: the accepted drafts plus the target's own."""
    return sum((j + 1) * p for j, p in enumerate(accepted_distribution(k, a)))


def measure_costs(
    model: Any,
    *,
    draft_model: Any = None,
    n_draft: int = 4,
    n_threads: int | None = None,
    flash_attn: bool | None = None,
    fill: int = 128,
    reps: int = 20,
    warmup: int = 3,
    fuse_catch_up: bool = True,
) -> CostCurve:
    """Time the passes of the draft/verify loop for ``model`` (an :class:`mtp_llm.Model`).

    ``fill``: tokens of context the passes attend over; ``reps`` repetitions of every
    pass after ``warmup`` unrecorded ones. Contexts are made as :class:`mtp_llm.MTP`
    makes them with the same options.
    """
    from . import _core
    from .options import SessionOptions

    options = SessionOptions(
        n_draft=n_draft, n_ctx=max(512, fill + n_draft + 16), n_threads=n_threads, flash_attn=flash_attn,
        fuse_catch_up=fuse_catch_up,
    )
    native = _core.measure_costs(
        model._native, draft_model._native if draft_model is not None else None, options.to_native(),
        fill, reps, warmup,
    )
    meta = {"model": str(model.path), "architecture": model.architecture, "n_params": model.n_params}
    return CostCurve.from_native(native, meta)


def weight_bytes(path: str | Path) -> dict[str, int]:
    """Bytes of weights one target pass and one head pass read, from the GGUF's tensor table.

    A target pass reads every trunk block and the output matrix (``token_embd`` when the
    output is tied); a head pass reads the head's block, its ``nextn`` projections and the
    LM head it uses (``shared_head_head`` or the target's output). Embedding tables are
    read one row per token and not counted.
    """
    import gguf

    reader = gguf.GGUFReader(str(path))
    arch = reader.fields["general.architecture"].contents()
    n_blocks = int(reader.fields[f"{arch}.block_count"].contents())
    field = reader.fields.get(f"{arch}.nextn_predict_layers")
    n_nextn = int(field.contents()) if field is not None else 0
    n_trunk = n_blocks - n_nextn
    sizes = {t.name: int(t.n_bytes) for t in reader.tensors}
    output = sizes.get("output.weight", sizes.get("token_embd.weight", 0))
    target = output
    head = 0
    shared_head = 0
    for name, n in sizes.items():
        if not name.startswith("blk."):
            continue
        i = int(name.split(".")[1])
        if i < n_trunk:
            target += n
        elif i == n_trunk and "embed_tokens" not in name:
            if "shared_head_head" in name:
                shared_head = n
            head += n
    if not shared_head:
        head += output
    return {"target_pass": target, "head_pass": head if n_nextn else 0, "file": sum(sizes.values())}


def markdown(curve: CostCurve, weights: dict[str, int] | None = None, acceptances: Sequence[float] = ACCEPTANCES,
             mark: float | None = None, measured: Sequence[float] | None = None) -> str:
    """The cost curve and the expected-speedup table as markdown."""
    m = curve.meta
    one = curve.one_row_ms
    lines = [
        f"Passes of `{Path(str(m.get('model', '?'))).name}` ({m.get('architecture', '?')}, "
        f"{m.get('n_params', 0) / 1e6:.1f}M parameters), threads={m.get('n_threads')}/{m.get('n_threads_batch')}, "
        f"flash attention {m.get('flash_attn')}, {m.get('fill')} tokens of context; median of {m.get('reps')} "
        "interleaved repetitions (fastest in brackets):",
        "",
        "| pass | ms | x one-row pass |",
        "|---|---|---|",
    ]
    for r, (t, lo) in enumerate(zip(curve.target_ms, curve.target_min_ms or curve.target_ms), start=1):
        what = "plain decoding" if r == 1 else f"verify of n_draft={r - 1}"
        lines.append(f"| target, {r} row{'s' if r > 1 else ''} ({what}) | {t:.3f} ({lo:.3f}) | {t / one:.2f} |")
    lines.append(f"| greedy sample of one row | {curve.sample_ms:.3f} | {curve.sample_ms / one:.2f} |")
    for k, (t, lo) in enumerate(zip(curve.draft_ms, curve.draft_min_ms or curve.draft_ms), start=1):
        lines.append(
            f"| head: draft {k} token{'s' if k > 1 else ''} ({k} pass{'es' if k > 1 else ''}, {t / k:.3f} ms each) "
            f"| {t:.3f} ({lo:.3f}) | {t / one:.2f} |"
        )
    for r, (t, lo) in enumerate(zip(curve.catch_up_ms, curve.catch_up_min_ms or curve.catch_up_ms), start=1):
        lines.append(f"| head: catch-up over {r} row{'s' if r > 1 else ''} | {t:.3f} ({lo:.3f}) | {t / one:.2f} |")
    for k, per_j in enumerate(curve.fused_ms, start=1):
        lines.append(
            f"| head, fused driver: draft {k} after 0 / {k} accepted "
            f"| {per_j[0]:.3f} / {per_j[-1]:.3f} | {per_j[0] / one:.2f} / {per_j[-1] / one:.2f} |"
        )
    if weights and weights.get("head_pass") and curve.n_draft:
        share = weights["head_pass"] / weights["target_pass"]
        head = curve.head_pass_ms() / one
        lines += [
            "",
            f"Weights read per pass: target {weights['target_pass'] / 1e6:.1f} MB, head "
            f"{weights['head_pass'] / 1e6:.1f} MB ({share:.2f} of the target's). One head pass costs "
            f"{head:.2f} one-row passes: {head / share:.2f}x its share of the weights.",
        ]
    if curve.n_draft:
        ks = range(1, curve.n_draft + 1)
        driver = {"fused": "mtp_llm's fused driver", "upstream": "llama.cpp's common_speculative driver"}.get(
            curve.driver, curve.driver)
        lines += [
            "",
            f"Expected speedup over plain decoding with {driver} (the engine's for these options; cost model: "
            "E[committed] x (pass(1) + sample) / iteration, see `mtp_llm.costs`):",
            "",
            "| acceptance per position | " + " | ".join(f"n_draft={k}" for k in ks) + " | best |",
            "|---|" + "---|" * (len(ks) + 1),
        ]
        for a in sorted({*acceptances, *([mark] if mark is not None else [])}):
            k_best, s_best = curve.best(a)
            cells = " | ".join(f"{curve.speedup(k, a):.2f}x" for k in ks)
            star = " (this model)" if mark is not None and abs(mark - a) < 1e-9 else ""
            lines.append(f"| {a:.2f}{star} | {cells} | n_draft={k_best}: {s_best:.2f}x |")
        if measured:
            k_best, s_best = curve.best(measured)
            cells = " | ".join(f"{curve.speedup(k, measured):.2f}x" for k in ks)
            label = "/".join(f"{r:.2f}" for r in measured)
            lines.append(f"| this model, measured: {label} | {cells} | n_draft={k_best}: {s_best:.2f}x |")
        if curve.driver == "fused":
            other = " / ".join(f"{curve.best(a, 'upstream')[1]:.2f}x" for a in (0.7, 0.8, 0.9, 1.0))
            lines += ["", f"With llama.cpp's driver instead (fuse_catch_up=False), best at 0.7 / 0.8 / 0.9 / 1.0: "
                          f"{other}."]
        breakeven = [a for a in (x / 100 for x in range(0, 101)) if curve.best(a)[1] >= 1.0]
        lines.append("")
        lines.append(
            f"MTP pays from a per-position acceptance of {breakeven[0]:.2f} on this machine."
            if breakeven else "MTP does not pay on this machine at any acceptance."
        )
    return "\n".join(lines)
