"""Models exported by PyTorch's own ONNX exporter, in torch's cached venv; the main venv never imports torch.

The venv (``$NNVM_CACHE_DIR/venvs/torch-2.13``, built once with uv from the local CPU wheel in
``$NNVM_TORCH_FIND_LINKS``, default ``/opt/wheels``) is shared by ``tests/test_pytorch_export.py``
(``scripts/torch_export.py``'s exporter variants) and the issue-19 benchmark zoo
(``scripts/torch_zoo.py``: eleven CNNs and three transformers, ``bench/zoo.py``); a second venv with
Hugging Face ``transformers`` exports that library's models (``hf_model_path``, ``scripts/hf_export.py``,
``bench/transformers.py``). ``zoo_model_path``
exports one zoo model at one batch size into ``$NNVM_CACHE_DIR/models`` and redoes it only when the
scripts or the venv change (a stamp file next to it). Raises ``VenvUnavailable`` when a tool or the
wheel is missing and ``VenvBuildError`` when the build or the export fails.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from nnvm_testing.venvs import (
    VenvBuildError,
    VenvUnavailable,
    build_venv,
    cache_dir,
    clean_env,
    file_lock,
    ready_venv,
    run_checked,
    torch_find_links,
)

# Pinned to what was tested; torch comes from the local CPU wheel (PyPI's torch would pull CUDA).
REQUIREMENTS = ["torch==2.13.0", "onnx==1.23.2", "onnxscript==0.7.2", "onnx-ir==1.1.0", "numpy==2.4.6"]
PYTHON = "3.11"
VENV = "torch-2.13"
SCRIPTS = Path(__file__).resolve().parents[4] / "scripts"  # the checkout's scripts/ (workspace install)
ZOO_SCRIPT = SCRIPTS / "torch_zoo.py"
# Keep in step with scripts/torch_zoo.py (checked by tests/test_zoo_models.py).
ZOO_CNNS = ("alexnet", "densenet121", "googlenet", "inception_v2", "resnet50", "shufflenet", "squeezenet",
            "vgg19", "zfnet512", "resnet18", "mobilenet_v2")
ZOO_TRANSFORMERS = ("bert", "gpt2", "vit")
# Hugging Face's own modules at their default sizes (``scripts/hf_export.py``) need ``transformers``: a
# venv of their own, the torch venv's pins plus these, so adding it never rebuilds the venv the torch
# export tests share (uv links the same torch wheel into both).
HF_REQUIREMENTS = [*REQUIREMENTS, "transformers==5.23.0", "tokenizers==0.23.3", "safetensors==0.8.0",
                   "huggingface-hub==2.4.0"]
HF_VENV = "torch-2.13-transformers"
HF_SCRIPT = SCRIPTS / "hf_export.py"
HF_MODELS = ("gpt2", "bert", "distilbert", "vit", "roberta", "albert", "electra", "deberta-v2", "mpnet",
             "gpt-neo", "llama", "qwen2", "mistral", "t5-encoder", "bart-encoder", "clip-text", "clip-vision",
             "swin", "convnext")  # keep in step with scripts/hf_export.py's ARCHS
HF_DECODERS = ("gpt2", "llama")  # with their KV cache (``--with-past``); scripts/hf_export.py's DECODERS


def find_links() -> str:
    return torch_find_links()


def torch_python(venv: str = VENV, requirements: list[str] = REQUIREMENTS) -> Path:
    """The torch venv's Python (or ``venv``'s, holding ``requirements`` with torch), built on first use
    (``nnvm_testing.venvs``)."""
    ready = ready_venv(venv, requirements, PYTHON)
    if ready:
        return ready
    if not list(Path(find_links()).glob(f"torch-2.13.0*-cp{PYTHON.replace('.', '')}-*.whl")):
        raise VenvUnavailable(f"no torch 2.13.0 CPU wheel for Python {PYTHON} in {find_links()} "
                              "(NNVM_TORCH_FIND_LINKS)")
    return build_venv(venv, requirements, python=PYTHON, find_links=find_links())


def hf_python() -> Path:
    """The Python of the torch venv with Hugging Face ``transformers`` (``HF_REQUIREMENTS``)."""
    return torch_python(HF_VENV, HF_REQUIREMENTS)


def _stamp(python: Path, scripts: list[Path]) -> str:
    """Changes when a script or the torch venv does, so a stale export is redone."""
    digest = hashlib.sha256(b"".join(s.read_bytes() for s in scripts)).hexdigest()[:16]
    return f"{digest} {(python.parent.parent / '.nnvm-complete').read_text()}"


def zoo_model_path(name: str, batch: int = 1, dynamic_batch: bool = False) -> str:
    """Path of zoo model ``name`` (``ZOO_CNNS`` or ``ZOO_TRANSFORMERS``) exported with a fixed batch, or
    with ``dynamic_batch`` its batch the dim_param ``batch`` (``batch`` then unused)."""
    if name not in (*ZOO_CNNS, *ZOO_TRANSFORMERS):
        raise KeyError(f"unknown zoo model {name!r}; known: {', '.join([*ZOO_CNNS, *ZOO_TRANSFORMERS])}")
    if not ZOO_SCRIPT.exists():
        raise VenvUnavailable(f"{ZOO_SCRIPT} is missing: the zoo is exported from a source checkout")
    scripts = [ZOO_SCRIPT, SCRIPTS / "torch_export.py"]
    if dynamic_batch:
        if name not in ZOO_CNNS:
            raise KeyError(f"zoo model {name!r} is not a CNN; a dynamic batch is exported for {ZOO_CNNS}")
        return _exported(torch_python(), [SCRIPTS / "torch_zoo_dynamic.py", *scripts],
                         f"torch_zoo_{name}_dynamic_batch", [name], f"{name} (symbolic batch)")
    return _exported(torch_python(), scripts, f"torch_zoo_{name}_b{batch}", [name, "--batch", str(batch)],
                     f"{name} (batch {batch})")


def hf_model_path(name: str, batch: int = 1, seq: int = 128, layers: int | None = None,
                  width: int | None = None, heads: int | None = None, dynamic: bool = False,
                  exporter: str = "dynamo") -> str:
    """Path of Hugging Face model ``name`` (``HF_MODELS``: its default config, seeded random weights)
    exported with fixed shapes, or with ``dynamic`` batch and sequence axes (dim_params ``batch``, ``seq``);
    ``layers``, ``width`` and ``heads`` make a smaller one (tests); ``exporter``: torch's ``dynamo`` or the
    legacy ``torchscript``."""
    if name not in HF_MODELS:
        raise KeyError(f"unknown Hugging Face model {name!r}; known: {', '.join(HF_MODELS)}")
    if not HF_SCRIPT.exists():
        raise VenvUnavailable(f"{HF_SCRIPT} is missing: the models are exported from a source checkout")
    args, tag = [name, "--batch", str(batch), "--seq", str(seq)], f"hf_{name}_b{batch}_s{seq}"
    for flag, value in (("layers", layers), ("width", width), ("heads", heads)):
        if value:
            args += [f"--{flag}", str(value)]
            tag += f"_{flag[0]}{value}"
    if dynamic:
        args.append("--dynamic")
        tag += "_dynamic"
    if exporter != "dynamo":
        args += ["--exporter", exporter]
        tag += f"_{exporter}"
    return _exported(hf_python(), [HF_SCRIPT], tag, args, f"{name} (batch {batch}, seq {seq})")


def decoder_prompt(sess, tokens: int = 5, seed: int = 2, kv_heads: int = 2, head_dim: int = 32):
    """``(input names, output names, feeds, past)`` for a with-past decoder's first step in onnxruntime
    session ``sess``: seeded token ids, a mask of ones and every ``past_key_values`` empty (past = 0)."""
    import numpy as np

    names = [i.name for i in sess.get_inputs()]
    out_names = [o.name for o in sess.get_outputs()]
    empty = np.zeros((1, kv_heads, 0, head_dim), np.float32)
    past = {n: empty for n in names if n.startswith("past_key_values")}
    ids = np.random.default_rng(seed).integers(0, 50257, (1, tokens)).astype(np.int64)
    feeds = {"input_ids": ids, "attention_mask": np.ones((1, tokens), np.int64), **past}
    return names, out_names, feeds, past


def hf_decoder_path(name: str, layers: int | None = None, width: int | None = None, heads: int | None = None,
                    kv_heads: int | None = None) -> str:
    """Path of decoder ``name`` (``HF_DECODERS``) exported with its KV cache (``--with-past``: every dim
    symbolic, ``past`` may be 0); ``layers``, ``width``, ``heads`` and ``kv_heads`` make a smaller one."""
    if name not in HF_DECODERS:
        raise KeyError(f"unknown Hugging Face decoder {name!r}; known: {', '.join(HF_DECODERS)}")
    if not HF_SCRIPT.exists():
        raise VenvUnavailable(f"{HF_SCRIPT} is missing: the models are exported from a source checkout")
    args, tag = [name, "--with-past"], f"hf_{name}_with_past"
    for flag, value in (("layers", layers), ("width", width), ("heads", heads), ("kv-heads", kv_heads)):
        if value:
            args += [f"--{flag}", str(value)]
            tag += f"_{flag[0]}{value}"
    return _exported(hf_python(), [HF_SCRIPT], tag, args, f"{name} with past")


def _exported(python: Path, scripts: list[Path], tag: str, args: list[str], what: str,
              timeout: float = 1800) -> str:
    """``$NNVM_CACHE_DIR/models/<tag>.onnx``, written by ``scripts[0] args... OUT`` unless a file made by
    the same scripts and venv is there."""
    directory = cache_dir() / "models"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{tag}.onnx"
    stamp_file = path.with_name(path.name + ".stamp")
    stamp = _stamp(python, scripts)
    with file_lock(directory / f".{tag}.lock"):
        if not (path.exists() and stamp_file.exists() and stamp_file.read_text() == stamp):
            tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
            try:
                run_checked([str(python), str(scripts[0]), args[0], str(tmp), *args[1:]],
                            f"exporting {what} with torch", timeout, SCRIPTS.parent, clean_env())
                os.replace(tmp, path)  # readers never see a half-written model
            finally:
                tmp.unlink(missing_ok=True)
            stamp_file.write_text(stamp)
    return str(path)


__all__ = ["REQUIREMENTS", "PYTHON", "VENV", "ZOO_CNNS", "ZOO_TRANSFORMERS", "HF_REQUIREMENTS", "HF_VENV",
           "HF_MODELS", "HF_DECODERS",
           "VenvBuildError", "VenvUnavailable", "find_links", "torch_python", "hf_python",
           "zoo_model_path", "hf_model_path", "hf_decoder_path"]
