"""Blockbuster as ``langgraph dev`` configures it; a test using it skips without it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

blockbuster = pytest.importorskip("blockbuster")


@contextmanager
def langgraph_dev_blockbuster() -> Iterator[Any]:
    """``blockbuster_ctx()`` with the exceptions ``langgraph dev`` makes (langgraph-api 0.16)."""
    with blockbuster.blockbuster_ctx() as bb:
        bb.functions["os.path.abspath"].can_block_in("inspect.py", "getmodule")
        allowed = [
            "os.stat",
            "os.listdir",
            "os.remove",
            "io.BufferedReader.read",
            "io.BufferedWriter.write",
            "io.TextIOWrapper.read",
            "io.TextIOWrapper.write",
            "threading.Lock.acquire",
            *(name for name in bb.functions if name.startswith("os.path.")),
        ]
        for name in allowed:
            fn = bb.functions.pop(name, None)
            if fn is not None:
                fn.deactivate()
        yield bb
