"""A loaded GGUF model: metadata, tokenizer and chat template."""

from __future__ import annotations

import errno
import os
import stat
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from . import _core
from .devices import GPUUnavailableWarning
from .errors import IncompatibleDraftError, InvalidOptionError, InvalidPromptError, ModelLoadError
from .options import INT32_MAX, fit_threads, utf8_text
from .sidecars import HeadSearch, TargetFacts, find_head

Message = Mapping[str, Any] | tuple[str, str]

#: Architectures for which the bundled llama.cpp has an MTP draft graph. Other
#: architectures (glm4, exaone4, ...) may store nextn tensors but cannot draft.
MTP_ARCHITECTURES: tuple[str, ...] = tuple(_core.mtp_graph_architectures())


class Model:
    """A GGUF model loaded by llama.cpp. Create it with :meth:`Model.load`.

    The weights stay loaded while any :class:`~mtp_llm.MTP` session or
    reference uses the model; several sessions can share one model.
    """

    __slots__ = ("_load_options", "_native", "_sidecar")

    def __init__(self, native: _core.Model, *, sidecar: Path | None = None, **load_options: Any) -> None:
        self._native = native
        self._sidecar = sidecar
        self._load_options = load_options

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        *,
        load_mtp: bool = True,
        n_gpu_layers: int | None = None,
        use_mmap: bool = True,
        use_mlock: bool = False,
        rpc_servers: Sequence[str] | None = None,
        tensor_split: Sequence[float] | None = None,
        mtp_placement: Literal["local", "layers"] = "local",
        rpc_timeout: float = 5.0,
        mtp_device: str | None = None,
    ) -> Model:
        """Load a GGUF file.

        Args:
            path: the ``.gguf`` file (a target with an embedded MTP head, a
                trunk-only target, or an ``mtp-*.gguf`` sidecar); ``~`` is expanded.
            load_mtp: load the MTP head's tensors (needed for speculation).
            n_gpu_layers: layers to offload to GPU backends and RPC servers, counted from the
                top: the output layer, then the MTP head, then the trunk's last blocks; -1 = all.
                None: 0, or all with ``rpc_servers``. Without a GPU device or server (a CPU
                build) anything but 0 warns (:class:`~mtp_llm.GPUUnavailableWarning`) and runs
                on the CPU.
            use_mmap: map the file instead of reading it.
            use_mlock: lock the weights in RAM.
            rpc_servers: ``"host:port"`` of ``mtp-llm rpc-server`` processes (ggml's RPC
                backend) whose devices take offloaded layers (see docs/scale-out.md). Each is
                checked (connection and protocol handshake) before loading.
            tensor_split: share of the offloaded layers per device: each server's devices in
                ``rpc_servers`` order, then local GPUs (None = by free memory).
            mtp_placement: with ``rpc_servers``: ``"local"`` keeps the MTP head's weights in this
                process's memory (its KV cache follows the last device; ``mtp_device="CPU"``
                keeps both local); ``"layers"`` places them like the other layers.
            rpc_timeout: seconds to wait for each server's connection and handshake.
            mtp_device: the device for the MTP head's layers and its context's KV cache (a name
                from :func:`~mtp_llm.list_devices`: ``"CPU"``, ``"CUDA0"``, ``"Vulkan0"``, ...);
                None leaves the head where ``n_gpu_layers`` / ``mtp_placement`` put it.

        Raises:
            ModelLoadError: also for an RPC endpoint that is malformed, unreachable, busy
                (a server takes one client at a time) or speaks another protocol version.
            InvalidOptionError: ``mtp_device`` names no device there is (the message lists them),
                or the file has no MTP head to place.
        """
        if not isinstance(rpc_timeout, (int, float)) or isinstance(rpc_timeout, bool) or not 0 < rpc_timeout < 1e6:
            raise InvalidOptionError(f"rpc_timeout must be a number of seconds above 0 (got {rpc_timeout!r})")
        servers = _endpoints(rpc_servers)
        split = _split(tensor_split)
        for name, flag in dict(load_mtp=load_mtp, use_mmap=use_mmap, use_mlock=use_mlock).items():
            if not isinstance(flag, bool):
                raise InvalidOptionError(f"{name} must be True or False (got {flag!r})")
        if mtp_placement not in ("local", "layers"):
            raise InvalidOptionError(f"mtp_placement must be 'local' or 'layers' (got {mtp_placement!r})")
        if n_gpu_layers is not None and (isinstance(n_gpu_layers, bool) or not isinstance(n_gpu_layers, int)):
            raise InvalidOptionError(f"n_gpu_layers must be an int or None (got {type(n_gpu_layers).__name__})")
        if n_gpu_layers is not None and not -1 <= n_gpu_layers <= INT32_MAX:
            raise InvalidOptionError(f"n_gpu_layers must be from -1 (-1 offloads every layer) to {INT32_MAX}")
        if mtp_device is not None and not isinstance(mtp_device, str):
            raise InvalidOptionError(f"mtp_device must be a device name or None (got {type(mtp_device).__name__})")
        layers = n_gpu_layers if n_gpu_layers is not None else (-1 if servers else 0)
        if layers != 0 and not servers and not _core.has_gpu():
            warnings.warn(
                f"n_gpu_layers={layers} but this mtp_llm build has no GPU device (backends: "
                f"{', '.join(_core.list_backends())}): the model runs on the CPU; see docs/gpu.md to build with CUDA, "
                "Vulkan, Metal or HIP",
                GPUUnavailableWarning,
                stacklevel=2,
            )
        native_options = _core.ModelOptions()
        for name, value in dict(
            load_mtp=load_mtp, n_gpu_layers=layers, use_mmap=use_mmap, use_mlock=use_mlock, rpc_servers=servers,
            tensor_split=split, mtp_local=mtp_placement == "local", rpc_timeout=rpc_timeout,
            mtp_device=mtp_device or "",
        ).items():
            setattr(native_options, name, value)
        path = _model_path(path)
        try:
            native = _core.Model(path, native_options)
        except ModelLoadError:
            _refuse_the_shipped_head(path)
            raise
        options: dict[str, Any] = dict(n_gpu_layers=n_gpu_layers, use_mmap=use_mmap, use_mlock=use_mlock)
        if mtp_device is not None:
            options.update(mtp_device=mtp_device)
        if servers:
            options.update(
                rpc_servers=servers, tensor_split=tensor_split, mtp_placement=mtp_placement, rpc_timeout=rpc_timeout
            )
        return cls(native, **options)

    @classmethod
    def from_pretrained(
        cls,
        repo_id: str,
        filename: str,
        *,
        revision: str | None = None,
        mtp_filename: str | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        refresh: bool = False,
        **load_options: Any,
    ) -> Model:
        """Load a GGUF from a Hugging Face Hub repository (needs ``pip install 'mtp-llm[hub]'``).

        Downloads go to huggingface_hub's cache (with its progress bars) and are reused: once a
        revision's files are cached, no request is made (``HF_HUB_OFFLINE=1`` forbids any).

        Args:
            repo_id: ``owner/name`` of the repository.
            filename: file name or glob matching one model, e.g. ``"*Q4_K_M.gguf"``; every
                part of a split GGUF (``-00001-of-0000N.gguf``) is fetched and the first loaded.
            revision: branch, tag or commit hash (default ``main``).
            mtp_filename: the ``mtp-*.gguf`` head to use; default: the repository's head
                when the target carries none (see :attr:`sidecar_path`).
            cache_dir: huggingface_hub cache folder (default: its own, ``HF_HUB_CACHE``).
            refresh: ask the Hub for the revision's newest commit even when the cache has the files.
            load_options: :meth:`load`'s keyword arguments.

        Raises:
            ModelLoadError: naming the repository, the pattern and what was found.
        """
        from .hub import pretrained_files

        if cache_dir is not None:
            cache_dir = os.path.expanduser(os.fspath(cache_dir))

        loaded: list[Model] = []

        def trunk_only(path: Path) -> bool:
            loaded.append(cls.load(path, **load_options))
            return loaded[0].needs_sidecar

        files = pretrained_files(
            repo_id,
            filename,
            revision=revision,
            mtp_filename=mtp_filename,
            cache_dir=cache_dir,
            refresh=refresh,
            is_trunk_only=trunk_only,
        )
        model = loaded[0] if loaded else cls.load(files.target, **load_options)
        model._sidecar = files.sidecar
        return model

    @classmethod
    def load_default(cls, **kwargs: Any) -> Model:
        """Load the built-in default model (shipped with the package)."""
        from .default_model import default_model_path

        return cls.load(default_model_path(), **kwargs)

    @property
    def path(self) -> Path:
        return Path(self._native.path)

    @property
    def rpc_servers(self) -> list[str]:
        """The RPC servers holding part of this model (empty for a local model)."""
        return list(self._native.rpc_servers)

    @property
    def devices(self) -> list[str]:
        """The devices offloaded layers went to (RPC servers first, then local GPUs; the CPU
        holds the rest)."""
        return list(self._native.devices)

    def check_rpc(self) -> None:
        """Raise :class:`RPCConnectionError` if the connection to one of :attr:`rpc_servers`
        was lost (every generation checks this before and after each step)."""
        self._native.check_rpc()

    @property
    def architecture(self) -> str:
        """GGUF ``general.architecture``, e.g. ``hy_v3``."""
        return self._native.architecture

    @property
    def description(self) -> str:
        return self._native.description

    @property
    def n_vocab(self) -> int:
        return self._native.n_vocab

    @property
    def n_embd(self) -> int:
        """Hidden size."""
        return self._native.n_embd

    @property
    def n_ctx_train(self) -> int:
        """Context length the model was trained with."""
        return self._native.n_ctx_train

    @property
    def n_layer(self) -> int:
        return self._native.n_layer

    @property
    def n_mtp_heads(self) -> int:
        """Number of MTP (nextn) heads declared by the model (0 = none)."""
        return self._native.n_mtp_heads

    @property
    def has_mtp_head(self) -> bool:
        """True when the file itself carries MTP head tensors."""
        return self._native.has_mtp_head

    @property
    def has_mtp_graph(self) -> bool:
        """True when llama.cpp can run an MTP head of this architecture (see :data:`MTP_ARCHITECTURES`)."""
        return self._native.has_mtp_graph

    @property
    def is_mtp_sidecar(self) -> bool:
        """True for an ``mtp-*.gguf`` file that holds only the head."""
        return self._native.is_mtp_sidecar

    @property
    def draft_vocab_size(self) -> int:
        """Tokens this file's MTP head scores: N for a trimmed head (a ``d2t`` draft-to-target map,
        ``docs/draft-vocab.md``), :attr:`n_vocab` for a full one, 0 without a head."""
        return int(self._native.draft_vocab_size)

    @property
    def needs_sidecar(self) -> bool:
        """True for a target whose file carries no MTP head (trunk-only, or no head declared):
        speculation needs an ``mtp-*.gguf`` sidecar."""
        return not self.has_mtp_head and not self.is_mtp_sidecar

    @property
    def sidecar_path(self) -> Path | None:
        """The MTP head file that ``MTP(model)`` (``draft_model="auto"``) loads: the one
        :meth:`from_pretrained` fetched with this model, else, for a target without its own
        head, the head beside the file (see :mod:`mtp_llm.sidecars`): ``mtp-<name>.gguf``,
        the converter's ``mtp-<name without size label>.gguf``, or the one other GGUF there
        whose metadata makes it a head for this model; None when there is none.

        Raises:
            AmbiguousDraftError: several files beside it are heads for it and none is named after it.
        """
        return self._find_sidecar().path

    def _find_sidecar(self) -> HeadSearch:
        if self._sidecar is not None:
            return HeadSearch(self._sidecar)
        if not self.needs_sidecar:
            return HeadSearch(None)
        facts = TargetFacts(
            architecture=self.architecture,
            n_embd=self.n_embd,
            n_vocab=self.n_vocab,
            n_trunk_layers=self.n_layer,  # llama.cpp counts the trunk only
            n_heads=self.n_mtp_heads,
        )
        return find_head(self.path, facts, scan=self.has_mtp_graph)

    def load_sidecar(self) -> Model | None:
        """Load :attr:`sidecar_path` with this model's load options (None when there is none).

        Raises:
            IncompatibleDraftError: no head fits, but files named as this model's head are there
                (the message says why each does not fit).
            AmbiguousDraftError: see :attr:`sidecar_path`.
        """
        path = self._auto_sidecar()
        return None if path is None else Model.load(path, **self._load_options)

    def _auto_sidecar(self) -> Path | None:
        """:attr:`sidecar_path`, raising when only files that do not fit are named as its head."""
        search = self._find_sidecar()
        if search.path is None and search.rejected:
            why = "; ".join(f"{p.name!r}: {reason}" for p, reason in search.rejected)
            raise IncompatibleDraftError(
                f"'{self.path}' has no MTP head of its own, and the head files beside it do not fit it ({why}): "
                "pass draft_model=Model.load(...) with the head made for this model, or n_draft=0 for plain decoding"
            )
        return search.path

    @property
    def load_mtp(self) -> bool:
        return self._native.load_mtp

    @property
    def n_gpu_layers(self) -> int:
        """Layers offloaded as asked at load (-1: all)."""
        return int(self._native.n_gpu_layers)

    @property
    def mtp_device(self) -> str | None:
        """The device the MTP head was placed on at load, or None (where ``n_gpu_layers`` put it)."""
        return self._native.mtp_device or None

    @property
    def n_params(self) -> int:
        return self._native.n_params

    @property
    def size_bytes(self) -> int:
        return self._native.size_bytes

    @property
    def chat_template(self) -> str | None:
        """The GGUF's Jinja chat template, or None."""
        return self._native.chat_template

    @property
    def token_bos(self) -> int:
        return self._native.token_bos

    @property
    def token_eos(self) -> int:
        return self._native.token_eos

    def is_eog(self, token: int) -> bool:
        """True if ``token`` ends generation (EOS, EOT, ...)."""
        self.check_tokens([token])
        return self._native.is_eog(token)

    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = True) -> list[int]:
        """Tokenize ``text``; ``parse_special`` turns ``<|...|>`` markers into special tokens."""
        if not isinstance(text, str):
            raise InvalidPromptError(f"text must be a str (got {type(text).__name__})")
        utf8_text("the text", text, InvalidPromptError)
        return self._native.tokenize(text, bool(add_special), bool(parse_special))

    def check_tokens(self, tokens: Sequence[int]) -> None:
        """InvalidPromptError unless every token is an int id inside the vocabulary."""
        n_vocab = self.n_vocab
        for i, token in enumerate(tokens):
            if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token < n_vocab:
                raise InvalidPromptError(
                    f"token id {token!r} at index {i} is outside the vocabulary [0, {n_vocab})"
                )

    def detokenize(self, tokens: Sequence[int], *, render_special: bool = False) -> str:
        tokens = list(tokens)
        self.check_tokens(tokens)
        return self._native.detokenize(tokens, bool(render_special))

    def token_piece(self, token: int) -> bytes:
        """Raw bytes of one token (may be part of a multi-byte character)."""
        self.check_tokens([token])
        return self._native.token_piece(token, False)

    def embed(self, texts: Sequence[str], *, n_threads: int | None = None) -> list[list[float]]:
        """Mean-pooled, L2-normalised hidden states of each text: local embeddings for retrieval."""
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise InvalidPromptError("texts must be a list of strings")
        for i, text in enumerate(texts):
            utf8_text(f"texts[{i}]", text, InvalidPromptError)
        if n_threads is not None and (isinstance(n_threads, bool) or not isinstance(n_threads, int) or n_threads < 1):
            raise InvalidOptionError(f"n_threads must be a positive integer or None (got {n_threads!r})")
        return self._native.embed(list(texts), fit_threads("n_threads", n_threads) or 0)

    def apply_chat_template(
        self,
        messages: Sequence[Message],
        *,
        add_generation_prompt: bool = True,
        chat_template: str | None = None,
    ) -> str:
        """Render chat messages into a prompt with the GGUF's template (or ``chat_template``).

        Messages are ``{"role": ..., "content": ...}`` mappings or ``(role, content)`` pairs.
        """
        pairs = [_as_pair(m) for m in messages]
        if chat_template is not None:
            if not isinstance(chat_template, str):
                raise InvalidOptionError(f"chat_template must be a str or None (got {type(chat_template).__name__})")
            utf8_text("chat_template", chat_template)
        return self._native.apply_chat_template(pairs, bool(add_generation_prompt), chat_template or "")

    def __repr__(self) -> str:
        return (
            f"Model(path={str(self.path)!r}, architecture={self.architecture!r}, "
            f"n_embd={self.n_embd}, n_mtp_heads={self.n_mtp_heads})"
        )


def _refuse_the_shipped_head(path: str) -> None:
    """ModelLoadError saying what the head file the package ships is, when ``path`` is that file."""
    from .smollm2 import HEAD_FILE

    try:
        shipped = os.path.samefile(path, HEAD_FILE)
    except OSError:
        return
    if shipped:
        raise ModelLoadError(
            f"'{path}' is the built-in model's MTP head (head tensors only, no trunk or vocabulary), not a model: "
            "the built-in model (Model.load_default()) embeds it"
        )


def _endpoints(rpc_servers: Sequence[str] | str | None) -> list[str]:
    """``rpc_servers`` as a list of ``host:port`` strings (a comma-separated string is accepted)."""
    if rpc_servers is None:
        return []
    if isinstance(rpc_servers, str):
        rpc_servers = [s for s in rpc_servers.split(",") if s.strip()]
    servers = [s.strip() for s in rpc_servers if isinstance(s, str)]
    if len(servers) != len(rpc_servers):
        raise InvalidOptionError(f"rpc_servers must be 'host:port' strings (got {rpc_servers!r})")
    return servers


def _as_pair(message: Message) -> tuple[str, str]:
    role: Any
    content: Any
    if isinstance(message, tuple) and len(message) == 2:
        role, content = message
    elif isinstance(message, Mapping):
        role, content = message.get("role"), message.get("content")
    else:
        raise InvalidOptionError(f"a chat message must be a mapping or a (role, content) pair, got {message!r}")
    if not isinstance(role, str) or not isinstance(content, str):
        raise InvalidOptionError(f"chat message role and content must be strings, got {message!r}")
    return utf8_text("a chat message's role", role), utf8_text("a chat message's content", content)


def _split(tensor_split: Sequence[float] | None) -> list[float]:
    if tensor_split is None:
        return []
    if isinstance(tensor_split, (str, bytes)) or not isinstance(tensor_split, Sequence) or not all(
        isinstance(x, (int, float)) and not isinstance(x, bool) for x in tensor_split
    ):
        raise InvalidOptionError(f"tensor_split must be a list of numbers (got {tensor_split!r})")
    return [float(x) for x in tensor_split]


def _model_path(path: Any) -> str:
    """``path`` as a str llama.cpp can open (``~`` expanded), or the MTPError saying why not: no NUL,
    no lone surrogate, not a symlink loop, a regular file (a named pipe or device would block or
    never end)."""
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise InvalidOptionError(f"path must be a str or os.PathLike (got {type(path).__name__})")
    text = os.path.expanduser(os.fsdecode(os.fspath(path)))
    if "\0" in text:
        raise ModelLoadError(f"model path {text!r} contains a NUL character: no file name can")
    utf8_text(f"model path {text!r}", text, ModelLoadError)
    try:
        mode = os.stat(text).st_mode
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ModelLoadError(f"model path '{text}' is a symlink loop (a link that leads back to itself)") from None
        return text  # the engine says what is missing or unreadable
    if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        kind = "a named pipe (FIFO)" if stat.S_ISFIFO(mode) else "a device or socket"
        raise ModelLoadError(f"model path '{text}' is {kind}, not a regular file: pass the .gguf file itself")
    return text
