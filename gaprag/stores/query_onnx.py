"""MiniLM for queries without torch: the same model exported once to ONNX and run with
onnxruntime, its tokenizer read by ``tokenizers``.

Loading sentence-transformers (torch, transformers, the weights) takes seconds in every new
process; a query is a few words. When the MiniLM model is loaded with torch (indexing, or a
first query), :func:`export` writes it, with its mean pooling and normalisation, to
``GAPRAG_HOME/models/minilm-<digest>.onnx`` (``onnx`` needed, once; the digest is the weights'
size and time, so a new package version exports anew). Later processes embed queries with
:class:`OnnxMiniLM` in well under a second. Its vectors are the torch model's (cosine 1.0 to
the sixth decimal), so passages embedded by one are found by queries embedded by the other.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from gaprag.config import gaprag_home, home_path, torch_threads

#: tokens a MiniLM input keeps (sentence-transformers' max_seq_length for the model)
MAX_TOKENS = 256
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def onnx_path(model_dir: Path) -> Path:
    """Where the export of the model in ``model_dir`` lives (it may not exist yet)."""
    weights = model_dir / "model.safetensors"
    stat = weights.stat()
    digest = f"{stat.st_size:x}-{int(stat.st_mtime):x}"
    return home_path() / "models" / f"minilm-{digest}.onnx"


class OnnxMiniLM:
    """The exported model: ``embed(texts)`` -> normalised float32 vectors."""

    def __init__(self, model_dir: Path, path: Path) -> None:
        import onnxruntime
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.tokenizer.enable_truncation(MAX_TOKENS)
        self.tokenizer.enable_padding()
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = torch_threads() or 0
        options.log_severity_level = 3
        self.session = onnxruntime.InferenceSession(
            str(path), options, providers=["CPUExecutionProvider"]
        )
        self._lock = threading.Lock()

    def embed(self, texts: list[str]) -> Any:
        with self._lock:  # the tokenizer's padding settings are shared
            encoded = self.tokenizer.encode_batch(texts)
        ids = np.asarray([e.ids for e in encoded], dtype=np.int64)
        mask = np.asarray([e.attention_mask for e in encoded], dtype=np.int64)
        feeds = dict(zip(_INPUTS, (ids, mask, np.zeros_like(ids)), strict=True))
        return np.asarray(self.session.run(None, feeds)[0], dtype=np.float32)


def load(model_dir: Path) -> OnnxMiniLM | None:
    """The exported model, or None when it has not been exported (or cannot be read)."""
    path = onnx_path(model_dir)
    if not path.is_file():
        return None
    try:
        return OnnxMiniLM(model_dir, path)
    except Exception:  # a damaged or foreign file: torch embeds instead
        return None


def export(model: Any, model_dir: Path) -> Path | None:
    """Write the export of a loaded sentence-transformers MiniLM ``model`` if there is none;
    its path, or None when ``onnx`` is missing or the export fails (torch embeds then)."""
    path = onnx_path(model_dir)
    if path.is_file():
        return path
    try:
        import onnx  # noqa: F401  (torch's exporter needs it)
        import torch
    except ImportError:
        return None
    gaprag_home()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    try:
        _export(torch, model[0].auto_model, tmp)
        os.replace(tmp, path)
    except Exception:
        tmp.unlink(missing_ok=True)
        return None
    return path


def _export(torch: Any, bert: Any, out: Path) -> None:
    import warnings

    class Pooled(torch.nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            hidden = self.bert(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state
            weight = attention_mask.unsqueeze(-1).to(hidden.dtype)
            mean = (hidden * weight).sum(1) / weight.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(mean, dim=1)

    example = tuple(torch.ones((2, 8), dtype=torch.long) for _ in _INPUTS)
    axes = {name: {0: "batch", 1: "tokens"} for name in _INPUTS}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            Pooled().eval(), example, str(out), input_names=list(_INPUTS),
            output_names=["embedding"], dynamic_axes={**axes, "embedding": {0: "batch"}},
            opset_version=17, dynamo=False,
        )  # fmt: skip
