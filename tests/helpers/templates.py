"""Chat templates of the pinned llama.cpp tree (``models/templates/``) and tiny models carrying them."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from mtp_llm.gguf.common import tiny_vocab
from mtp_llm.gguf.hyv3 import write_hy_v3
from mtp_llm.gguf.tiny_models import TINY_CONFIG, _named, _random_tensors


def _llama_cpp_tree() -> Path:
    if os.environ.get("MTP_LLM_LLAMA_CPP_DIR"):
        return Path(os.environ["MTP_LLM_LLAMA_CPP_DIR"])
    spec = importlib.util.spec_from_file_location("fetch", Path(__file__).resolve().parents[2] / "cmake" / "fetch_llama_cpp.py")
    assert spec is not None and spec.loader is not None
    fetch = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fetch)
    return Path(fetch.default_cache_dir()) / f"llama.cpp-{fetch.SDIST_VERSION}-{fetch.SDIST_SHA256[:12]}"


TEMPLATE_DIR = _llama_cpp_tree() / "models" / "templates"
TEMPLATES = sorted(p.stem for p in TEMPLATE_DIR.glob("*.jinja"))

TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather forecast of a city",
        "parameters": {
            "type": "object",
            "properties": {"days": {"type": "integer", "enum": [2, 5], "description": "forecast length"}},
            "required": ["days"],
        },
    },
}


def write_template_models(out: Path) -> dict[str, Path]:
    """A tiny random-weight model per template in ``out`` (written once), by template name."""
    out.mkdir(parents=True, exist_ok=True)
    tensors = _random_tensors(TINY_CONFIG, seed=1234)
    paths = {}
    for name in TEMPLATES:
        path = out / f"{name}.gguf"
        if not path.exists():
            tmp = path.with_suffix(".tmp")
            chat_template = (TEMPLATE_DIR / f"{name}.jinja").read_text()
            write_hy_v3(tmp, _named(TINY_CONFIG, "random"), tensors, tiny_vocab(), chat_template=chat_template)
            tmp.replace(path)
        paths[name] = path
    return paths
