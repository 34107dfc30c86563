"""GGUF files the project writes itself, from numpy arrays (nothing can be downloaded here).

* :mod:`~mtp_llm.gguf.common`: the byte-level BPE vocabulary and the helpers every writer shares;
* :mod:`~mtp_llm.gguf.hyv3`: dense hy_v3 models with an MTP head, and splitting one into trunk + sidecar;
* :mod:`~mtp_llm.gguf.qwen35`: hybrid qwen35 models (Gated DeltaNet + attention) with an MTP head;
* :mod:`~mtp_llm.gguf.glm4`: glm4 models with a nextn block llama.cpp has no MTP graph for;
* :mod:`~mtp_llm.gguf.draft_head`: a model's MTP head written as a quantized ``mtp-`` sidecar (draft head);
* :mod:`~mtp_llm.gguf.draft_vocab`: trimmed draft vocabularies (a head scoring N tokens, ``d2t``);
* :mod:`~mtp_llm.gguf.tiny_models`: the tiny test models, written with the above;
* :mod:`~mtp_llm.gguf.synthetic`: hy_v3 models of any size and weight format with a chosen MTP
  acceptance rate, for performance work (``mtp-llm bench --synthetic``).

The package imports nothing outside itself, so ``tools/train_default_model/export.py`` loads it
by path without the compiled core.
"""
