"""A ``gaprag`` command run in its own process, its embedded LLM server a stand-in script.

``PATCH`` skips the model file's lookup and assembly (a stand-in reads no model); ``COMMAND`` is ``gaprag``'s
CLI after it, for ``python -c COMMAND args``. ``embedded_env`` writes the stand-in as the
``llama-server`` binary and returns the environment that makes a command start it.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PATCH = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    import gaprag.llm.server as server
    server.ensure_model = lambda name, quiet=False: Path("/dev/null")
    server.model_path = lambda model: Path("/dev/null")
    """
)
COMMAND = PATCH + "from gaprag.cli import main\nsys.exit(main(sys.argv[1:]))\n"


def embedded_env(directory: Path, script: str, **extra: str) -> dict[str, str]:
    """The environment of a command whose embedded server is ``script`` (a ``/bin/sh`` body,
    written to ``directory/llama-server``), servers kept 600 s after a normal exit, plus
    ``extra``; an endpoint or model from the caller's environment is dropped."""
    binary = directory / "llama-server"
    binary.write_text("#!/bin/sh\n" + script)
    binary.chmod(0o755)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "GAPRAG_LOCAL_ENGINE": "llama-server",
        "GAPRAG_LLAMA_SERVER": str(binary),
        "GAPRAG_LOCAL_MODEL": "smollm2-135m",
        "GAPRAG_LOCAL_KEEP_S": "600",
        **extra,
    }
    for name in ("GAPRAG_BASE_URL", "OPENAI_BASE_URL", "GAPRAG_MODEL"):
        if name not in extra:
            env.pop(name, None)
    return env
