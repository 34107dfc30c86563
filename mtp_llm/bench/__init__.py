"""``mtp-llm bench`` and the helpers the scripts in ``benchmarks/`` share.

* :mod:`mtp_llm.bench.common`: default prompts, interleaved runs, tables, the model to run;
* :mod:`mtp_llm.bench.single`: MTP against plain decoding on one stream (the table, the
  wrappers' paths, the cost curve);
* :mod:`mtp_llm.bench.parallel`: aggregate throughput of concurrent streams (``--parallel``);
* :mod:`mtp_llm.bench.cli`: the ``bench`` subcommand's flags and dispatch.
"""

from __future__ import annotations

from .common import DEFAULT_PROMPTS, SYNTHETIC_PROMPTS, load_prompts, median_span, run_interleaved, write_table
from .single import ConfigResult, conditional_rates, run_bench

__all__ = [
    "DEFAULT_PROMPTS",
    "SYNTHETIC_PROMPTS",
    "ConfigResult",
    "conditional_rates",
    "load_prompts",
    "median_span",
    "run_bench",
    "run_interleaved",
    "write_table",
]
