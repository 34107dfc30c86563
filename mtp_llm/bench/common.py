"""What every benchmark shares: the default prompts, interleaved runs, table output, the model to run."""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..options import DraftLength

DEFAULT_PROMPTS = [
    "ROMEO: But soft, what light through yonder window breaks?",
    "To be, or not to be, that is the question:",
    "KING LEAR: Blow, winds, and crack your cheeks! rage! blow!",
    "Of Man's first disobedience, and the fruit",
]


# Chat questions the built-in model's head never saw in training (benchmarks on the real model).
CHAT_QUESTIONS = [
    "Why is the sky blue?",
    "Explain how a rainbow forms.",
    "What are the benefits of reading books?",
    "Describe how bread is made.",
]


# Twenty everyday chat requests: the built-in model's parity and cross-variant checks.
CHAT_PROMPTS = [
    "What is the capital of France?",
    "Explain photosynthesis in simple terms.",
    "Write a short poem about the sea.",
    "Give me three tips for learning a new language.",
    "What is the difference between weather and climate?",
    "How do airplanes stay in the air?",
    "Write a friendly email inviting a friend to dinner.",
    "What are the benefits of regular exercise?",
    "Describe a cat to someone who has never seen one.",
    "Why is the sky blue?",
    "List five fruits that are rich in vitamin C.",
    "What is a prime number?",
    "How do I make a cup of tea?",
    "Tell me a fun fact about octopuses.",
    "What should I pack for a weekend camping trip?",
    "Summarize the story of Cinderella in two sentences.",
    "What does a computer's CPU do?",
    "How can I save money on groceries?",
    "Write a haiku about autumn leaves.",
    "What is the boiling point of water at sea level?",
]


# Tools for the tool-call benchmarks and tests on the built-in model (OpenAI function shapes):
# enums, integers, a number, a boolean and free strings.
WEATHER = {
    "name": "get_weather",
    "description": "Current weather and forecast for a city",
    "parameters": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "enum": ["Paris", "London", "Tokyo", "New York"]},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 14},
        },
        "required": ["city", "unit", "days"],
    },
}
SEARCH = {
    "name": "search_books",
    "description": "Search a library catalogue",
    "parameters": {
        "type": "object",
        "properties": {
            "query": {"type": "string"},
            "max_results": {"type": "integer", "minimum": 1, "maximum": 20},
            "available_only": {"type": "boolean"},
        },
        "required": ["query", "max_results", "available_only"],
    },
}
CONVERT = {
    "name": "convert_currency",
    "description": "Convert an amount between currencies",
    "parameters": {
        "type": "object",
        "properties": {
            "amount": {"type": "number"},
            "from_currency": {"type": "string", "enum": ["USD", "EUR", "GBP", "JPY"]},
            "to_currency": {"type": "string", "enum": ["USD", "EUR", "GBP", "JPY"]},
        },
        "required": ["amount", "from_currency", "to_currency"],
    },
}
EXAMPLE_TOOLS = [{"type": "function", "function": f} for f in (WEATHER, SEARCH, CONVERT)]


# A synthetic model's continuation depends only on the prompt's last token (it walks a fixed
# token cycle from there), so its prompts end in distinct tokens: each walks its own stretch.
SYNTHETIC_PROMPTS = [f"Synthetic model, walk {c}" for c in "abcdefghijklmnop"]



def cpu_name() -> str:
    """The CPU's model name with its family and model numbers (``/proc/cpuinfo``; virtual machines often show only
    "AMD EPYC", which the numbers tell apart), for the header of a benchmark's table."""
    fields: dict[str, str] = {}
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        key, _, value = line.partition(":")
        if not key.strip():
            break  # the first processor's block is enough
        fields.setdefault(key.strip(), value.strip())
    if "model name" not in fields:
        return platform.processor() or platform.machine()
    if "cpu family" in fields and "model" in fields:
        return f"{fields['model name']} (family {fields['cpu family']} model {fields['model']})"
    return fields["model name"]


def run_interleaved(
    sessions: Mapping[Any, Any], prompts: Sequence[str], tokens: int, reps: int, warmup: int = 1
) -> dict[Any, list[Any]]:
    """Each repetition generates ``tokens`` tokens greedily for every prompt on every
    session in turn, so machine noise hits them alike; returns each session's
    ``MTPStats`` per measured repetition (after ``warmup`` unmeasured ones)."""
    results: dict[Any, list[Any]] = {key: [] for key in sessions}
    for rep in range(warmup + reps):
        for key, session in sessions.items():
            session.reset_stats()
            for prompt in prompts:
                session.generate(prompt, max_tokens=tokens, temp=0)
            if rep >= warmup:
                results[key].append(session.stats())
    return results



def median_span(values: Sequence[float]) -> str:
    """``median (min-max)`` of tokens/s figures, as the tables print them."""
    return f"{statistics.median(values):.0f} ({min(values):.0f}-{max(values):.0f})"



def write_table(table: str, out_dir: str | Path, name: str) -> Path:
    """Print a markdown table and write it to ``out_dir/name``."""
    print(table)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / name).write_text(table + "\n")
    return out / name



def load_prompts(path: str) -> list[str]:
    """Prompts from a text file (one per line) or a JSON file (a list, or {"prompts": [...]})."""
    text = Path(path).read_text()
    if path.endswith(".json"):
        data = json.loads(text)
        return list(data["prompts"] if isinstance(data, dict) else data)
    return [line for line in text.splitlines() if line.strip()]



def draft_lengths(text: str) -> list[DraftLength]:
    """``--n-draft``: comma-separated draft lengths, ``auto`` among them (``1,2,auto``)."""
    from ..errors import InvalidOptionError
    from ..options import MAX_DRAFT, draft_length

    try:
        lengths = [draft_length("n_draft", x.strip() if x.strip() == "auto" else int(x)) for x in text.split(",")
                   if x.strip()]
    except (ValueError, InvalidOptionError):
        lengths = []
    if not lengths:
        raise InvalidOptionError(
            f"--n-draft {text!r}: give comma-separated draft lengths, each 'auto' or 0..{MAX_DRAFT} (e.g. 1,2,3,auto)"
        )
    return list(dict.fromkeys(lengths))


def resolve_model(args: argparse.Namespace) -> str | None:
    """``--model``, or the synthetic model ``--synthetic/--acceptance/--format`` describe (written on first use)."""
    if not getattr(args, "synthetic", None):
        if getattr(args, "acceptance", None) is not None:
            raise SystemExit("mtp-llm bench: --acceptance needs --synthetic SIZE")
        return args.model  # type: ignore[no-any-return]
    if args.model:
        raise SystemExit("mtp-llm bench: pass --model or --synthetic, not both")
    from ..gguf.synthetic import synthetic_model

    start = time.perf_counter()
    path = synthetic_model(args.synthetic, args.acceptance, args.format, n_vocab=args.vocab,
                           n_embd=getattr(args, "n_embd", None))
    print(f"synthetic model: {path} ({time.perf_counter() - start:.1f} s)")
    return str(path)
