"""MiniLM queries without torch: the ONNX export gives the torch model's vectors, and a new
process embeds its first query without importing torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gaprag.stores import query_onnx
from gaprag.stores.embeddings import MiniLMEmbedder

pytestmark = pytest.mark.integration

QUERIES = ["What is the Krakow office Wi-Fi network?", "leave", "Wer prüft Rechnungen?"]


def test_the_export_embeds_queries_as_torch_does(tmp_path: Path) -> None:
    torch_side = MiniLMEmbedder()
    assert torch_side.prepare_queries()  # exported into this test's GAPRAG_HOME
    expected = torch_side.embed(QUERIES * 3)  # more than a query batch: sentence-transformers
    fast = query_onnx.load(MiniLMEmbedder.model_dir())
    assert fast is not None
    got = fast.embed(QUERIES)
    assert np.allclose((got * expected[:3]).sum(1), 1.0, atol=1e-5)
    script = (
        "import sys\nfrom gaprag.stores.embeddings import MiniLMEmbedder\n"
        f"v = MiniLMEmbedder().embed({QUERIES!r})\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\nprint(v.shape)"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "(3, 384)"
