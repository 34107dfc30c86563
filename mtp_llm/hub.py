"""GGUF models from a Hugging Face Hub repository, through huggingface_hub (``pip install 'mtp-llm[hub]'``).

:meth:`mtp_llm.Model.from_pretrained` and the integrations' ``repo_id``/``filename`` fields use
:func:`pretrained_files`: the file name may be a glob (``*Q4_K_M.gguf``), a split GGUF
(``-00001-of-0000N.gguf``) is fetched whole, and a trunk-only target gets the ``mtp-*.gguf``
head of the same repository. Files land in huggingface_hub's shared cache; once a revision's
files are there, later calls use them without contacting the Hub, and with ``HF_HUB_OFFLINE=1``
nothing else is tried. ``HF_ENDPOINT``, ``HF_HUB_CACHE`` and ``HF_HUB_OFFLINE`` are read at
each call.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from .errors import ModelLoadError
from .sidecars import sidecar_names

__all__ = ["HubFiles", "pretrained_files", "sidecar_names", "split_group"]

_SPLIT = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_GGUF_MAGIC = b"GGUF"
_LISTED = 8  # file names quoted in an error message


@dataclasses.dataclass(frozen=True)
class HubFiles:
    """Local paths of a model fetched from a repository (in huggingface_hub's cache)."""

    repo_id: str
    commit: str
    """The commit the files were taken from."""
    target: Path
    """The file to load (the first part of a split GGUF)."""
    parts: tuple[Path, ...]
    """Every file of the target (one unless split)."""
    sidecar: Path | None
    """The ``mtp-*.gguf`` MTP head used with a trunk-only target (or ``mtp_filename``), else None."""


@dataclasses.dataclass(frozen=True)
class _RepoFile:
    name: str
    size: int | None = None
    sha256: str | None = None


def split_group(name: str, names: Sequence[str]) -> list[str] | None:
    """Every part of the split GGUF ``name`` belongs to, in order, as named in ``names``; None
    when ``name`` is not a split part. Raises :class:`ModelLoadError` when a part is missing."""
    match = _SPLIT.match(name)
    if match is None:
        return None
    count = int(match["count"])
    parts = [f"{match['prefix']}-{k:05d}-of-{count:05d}.gguf" for k in range(1, count + 1)]
    missing = [p for p in parts if p not in names]
    if missing:
        raise ModelLoadError(f"split GGUF {parts[0]!r} is incomplete: {_listing(missing)} not found")
    return parts


class _Repo:
    """A repository at one commit: its file list, from the Hub or from the local cache."""

    def __init__(self, hf: ModuleType, spec: _Spec, commit: str, files: dict[str, _RepoFile], online: bool) -> None:
        self.hf, self.spec, self.commit, self.files, self.online = hf, spec, commit, files, online

    @property
    def snapshot(self) -> Path:
        return Path(self.spec.cache_dir) / f"models--{self.spec.repo_id.replace('/', '--')}" / "snapshots" / self.commit

    def match(self, pattern: str, *, heads: bool = False) -> list[list[str]]:
        """Files matching ``pattern`` (``mtp-*`` heads only if ``heads``), split parts grouped;
        GGUF files preferred over others."""
        names = [n for n in self.files if fnmatch.fnmatchcase(n, pattern) and (heads or not _is_sidecar(n))]
        if any(n.endswith(".gguf") for n in names):
            names = [n for n in names if n.endswith(".gguf")]
        groups: dict[str, list[str]] = {}
        for name in sorted(names):
            parts = split_group(name, list(self.files)) or [name]
            groups.setdefault(parts[0], parts)
        return list(groups.values())

    def remember(self) -> None:
        """Record which commit the revision names (``refs/<revision>``, as huggingface_hub does),
        so that later calls find the files without asking the Hub."""
        if self.online and self.spec.revision != self.commit:
            ref = self.snapshot.parent.parent / "refs" / self.spec.revision
            ref.parent.mkdir(parents=True, exist_ok=True)
            ref.write_text(self.commit)

    def fetch(self, name: str) -> Path:
        """The local path of ``name``, downloaded (with huggingface_hub's progress bar) if needed."""
        pointer = self.snapshot / name
        if not self.online:
            return pointer
        known = self.files[name]
        fresh = not pointer.exists()
        try:
            path = Path(
                self.hf.hf_hub_download(
                    self.spec.repo_id,
                    name,
                    revision=self.commit,
                    cache_dir=self.spec.cache_dir,
                    endpoint=self.spec.endpoint,
                )
            )
        except Exception as exc:  # huggingface_hub's HTTP, cache and consistency errors
            raise self.spec.error(f"downloading {name!r} failed: {_reason(exc)}") from exc
        self._verify(path, known, fresh)
        return path

    def _verify(self, path: Path, known: _RepoFile, fresh: bool) -> None:
        """Size always, sha256 after a download: a partial or corrupt file is never loaded."""
        size = path.stat().st_size
        problem = None
        if known.size is not None and size != known.size:
            problem = f"it has {size} bytes, the repository lists {known.size}"
        elif fresh and known.sha256 is not None:
            digest = _sha256(path)
            if digest != known.sha256:
                problem = f"its sha256 is {digest}, the repository lists {known.sha256}"
        if problem is not None:
            _remove_cached(path)
            raise self.spec.error(f"the download of {known.name!r} is corrupt ({problem}); it was removed from the cache, try again")


@dataclasses.dataclass(frozen=True)
class _Spec:
    repo_id: str
    pattern: str
    revision: str
    cache_dir: str
    endpoint: str | None

    def error(self, what: str) -> ModelLoadError:
        return ModelLoadError(f"Hugging Face repo {self.repo_id!r} (revision {self.revision!r}), file {self.pattern!r}: {what}")


def pretrained_files(
    repo_id: str,
    filename: str,
    *,
    revision: str | None = None,
    mtp_filename: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    refresh: bool = False,
    is_trunk_only: Callable[[Path], bool] | None = None,
) -> HubFiles:
    """Fetch a GGUF model (and its sidecar head) from a Hub repository into the local cache.

    Args:
        repo_id: ``owner/name`` of a model repository.
        filename: a file name or glob matching exactly one model (all parts of a split GGUF count as one).
        revision: branch, tag or commit (default ``main``).
        mtp_filename: name or glob of the ``mtp-*.gguf`` head to fetch with the target. Default: the
            repository's head when ``is_trunk_only(target)`` says the target carries none.
        cache_dir: huggingface_hub cache folder (default: ``HF_HUB_CACHE``, as huggingface_hub does).
        refresh: ask the Hub for the revision's newest commit even when the cache holds the files.
        is_trunk_only: tells from the fetched target whether it needs a sidecar head.

    Raises:
        ModelLoadError: huggingface_hub is missing; the repository, revision or file does not exist;
            the pattern matches nothing or several models; a download failed or is corrupt; the
            file is not a GGUF; offline mode with nothing cached.
    """
    hf = _import_hub()
    spec = _Spec(
        repo_id=repo_id,
        pattern=filename,
        revision=revision or "main",
        cache_dir=os.fspath(cache_dir) if cache_dir is not None else _default_cache(hf),
        endpoint=os.environ.get("HF_ENDPOINT") or None,
    )
    offline = _offline(hf)
    repo = None if refresh and not offline else _cached_repo(hf, spec)
    try:
        if repo is not None and not repo.match(filename):
            repo = None
    except ModelLoadError:  # a split GGUF only partly cached
        repo = None
    if repo is None:
        if offline:
            raise spec.error(
                f"HF_HUB_OFFLINE is set and the cache {spec.cache_dir} has no matching file: "
                "run once with network access, or unset HF_HUB_OFFLINE"
            )
        repo = _remote_repo(hf, spec)
    parts = [repo.fetch(name) for name in _choose(repo, filename, spec)]
    for part in parts:
        _check_gguf(part, spec)
    repo.remember()
    sidecar = None
    if mtp_filename is not None or (is_trunk_only is not None and is_trunk_only(parts[0])):
        name = _sidecar_name(repo, mtp_filename, parts[0].name, spec)
        if name is None and not repo.online and not offline:
            repo = _remote_repo(hf, spec)
            name = _sidecar_name(repo, mtp_filename, parts[0].name, spec)
        if name is not None:
            sidecar = repo.fetch(name)
            _check_gguf(sidecar, spec)
    return HubFiles(repo_id=repo_id, commit=repo.commit, target=parts[0], parts=tuple(parts), sidecar=sidecar)


def _choose(repo: _Repo, pattern: str, spec: _Spec, *, heads: bool = False) -> list[str]:
    """The one model (or MTP head) ``pattern`` matches."""
    groups = repo.match(pattern, heads=heads)
    what = "MTP head" if heads else "model"
    if len(groups) == 1:
        return groups[0]
    where = "in the cache" if not repo.online else f"at commit {repo.commit[:12]}"
    if not groups:
        gguf = [n for n in repo.files if n.endswith(".gguf")]
        sidecars = [n for n in repo.files if _is_sidecar(n) and fnmatch.fnmatchcase(n, pattern)]
        hint = " (only MTP heads match: name the target; the head is found by itself)" if sidecars else ""
        raise spec.error(f"no {what} file matches {where}{hint}; its GGUF files: {_listing(gguf) or 'none'}")
    firsts = [g[0] for g in groups]
    raise spec.error(f"{len(groups)} {what} files match {where}: {_listing(firsts)}; pass a pattern that matches one")


def _sidecar_name(repo: _Repo, mtp_filename: str | None, target: str, spec: _Spec) -> str | None:
    """The repository's MTP head for ``target``: ``mtp_filename``, else the first of :func:`sidecar_names`
    (``mtp-<target>``, the converter's ``mtp-<target without size label>``), else its only ``mtp-*.gguf``."""
    if mtp_filename is not None:
        return _choose(repo, mtp_filename, spec, heads=True)[0]
    heads = [n for n in repo.files if _is_sidecar(n) and n.endswith(".gguf")]
    for name in sidecar_names(target):
        same = [h for h in heads if h.rsplit("/", 1)[-1] == name]
        if same:
            return same[0]
    if len(heads) > 1:
        raise spec.error(f"the target has no MTP head and the repository has several: {_listing(heads)}; pass mtp_filename")
    return heads[0] if heads else None


def _is_sidecar(name: str) -> bool:
    return name.rsplit("/", 1)[-1].startswith("mtp-")


def _cached_repo(hf: ModuleType, spec: _Spec) -> _Repo | None:
    """The revision as the local cache holds it (no network), or None."""
    root = Path(spec.cache_dir) / f"models--{spec.repo_id.replace('/', '--')}"
    if _COMMIT.match(spec.revision):
        commit = spec.revision
    else:
        ref = root / "refs" / spec.revision
        if not ref.is_file():
            return None
        commit = ref.read_text().strip()
    snapshot = root / "snapshots" / commit
    if not snapshot.is_dir():
        return None
    files = {
        p.relative_to(snapshot).as_posix(): _RepoFile(p.relative_to(snapshot).as_posix())
        for p in snapshot.rglob("*")
        if p.is_file()  # follows the symlink: a pointer to a missing blob is not listed
    }
    return _Repo(hf, spec, commit, files, online=False)


def _remote_repo(hf: ModuleType, spec: _Spec) -> _Repo:
    """The revision's commit and file list (names, sizes, sha256) from the Hub."""
    try:
        info = hf.HfApi(endpoint=spec.endpoint).model_info(spec.repo_id, revision=spec.revision, files_metadata=True)
    except Exception as exc:  # huggingface_hub's HTTP and validation errors
        raise spec.error(_reason(exc)) from exc
    files: dict[str, _RepoFile] = {}
    for sibling in info.siblings or []:
        lfs: Any = sibling.lfs
        sha = lfs.get("sha256") if isinstance(lfs, dict) else getattr(lfs, "sha256", None)
        files[sibling.rfilename] = _RepoFile(sibling.rfilename, sibling.size, sha if sha and _SHA256.match(sha) else None)
    return _Repo(hf, spec, str(info.sha), files, online=True)


def _check_gguf(path: Path, spec: _Spec) -> None:
    with open(path, "rb") as f:
        head = f.read(4)
    if head != _GGUF_MAGIC:
        raise spec.error(f"{path.name!r} is not a GGUF file (it starts with {head!r}, not {_GGUF_MAGIC!r})")


def _import_hub() -> ModuleType:
    try:
        import huggingface_hub
        import huggingface_hub.constants  # a submodule the package does not import itself
    except ImportError as exc:
        raise ModelLoadError(
            "loading from the Hugging Face Hub needs huggingface_hub: pip install 'mtp-llm[hub]'"
        ) from exc
    return huggingface_hub


def _offline(hf: ModuleType) -> bool:
    value = os.environ.get("HF_HUB_OFFLINE")
    if value is not None:
        return value.strip().upper() in {"1", "ON", "YES", "TRUE"}
    return bool(hf.constants.HF_HUB_OFFLINE)


def _default_cache(hf: ModuleType) -> str:
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    if os.environ.get("HF_HOME"):
        return os.path.join(os.environ["HF_HOME"], "hub")
    return str(hf.constants.HF_HUB_CACHE)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _remove_cached(pointer: Path) -> None:
    blob = pointer.resolve()
    pointer.unlink(missing_ok=True)
    if blob != pointer:
        blob.unlink(missing_ok=True)


_REASONS = {
    "RepositoryNotFoundError": "repository not found (check the repo id; a private or gated one needs `hf auth login`)",
    "RevisionNotFoundError": "revision not found (check the branch, tag or commit)",
    "EntryNotFoundError": "file not found in the repository",
    "OfflineModeIsEnabled": "HF_HUB_OFFLINE is set: unset it to download",
}


def _reason(exc: BaseException) -> str:
    """What went wrong in huggingface_hub, in one line."""
    for cls in type(exc).__mro__:
        if cls.__name__ in _REASONS:
            return _REASONS[cls.__name__]
    text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    return f"{type(exc).__name__}: {text[:300]}"


def _listing(names: Sequence[str]) -> str:
    shown = ", ".join(names[:_LISTED])
    return shown + (f" and {len(names) - _LISTED} more" if len(names) > _LISTED else "")
