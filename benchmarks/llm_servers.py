"""Compare the embedded server engines on this machine: llama-cpp-python vs xllamacpp.

For each engine and model: start time, prompt processing (tokens/s, a ~1,200-token RAG prompt
with a nonce so no prefix cache helps), generation (tokens/s), and API compatibility
(json_schema, json_object+schema, logprobs, max_completion_tokens honoured, usage returned).

    python benchmarks/llm_servers.py [--models qwen2.5-coder-1.5b] [--engines llama-cpp-python,xllamacpp]

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from openai import OpenAI

from gaprag.llm.server import EmbeddedServer, free_port

DEMO = (
    Path(__file__).resolve().parent.parent
    / "gaprag"
    / "data"
    / "demo"
    / "hotpotqa_paragraphs.jsonl"
)


def rag_prompt() -> str:
    paras = [json.loads(line) for line in DEMO.open()][:9]
    passages = "\n".join(f"[{i}] {p['title']}: {p['text']}" for i, p in enumerate(paras, 1))
    return f"Request {uuid.uuid4().hex}.\nAnswer from the passages.\n\nPassages:\n{passages}\n\nQuestion: Which genus has more species?\nAnswer:"


def measure(engine: str, model: str, repeats: int) -> dict[str, Any]:
    t = time.perf_counter()
    server = EmbeddedServer(model=model, engine=engine, port=free_port()).start(quiet=True)  # type: ignore[arg-type]
    out: dict[str, Any] = {"start_s": round(time.perf_counter() - t, 2)}
    client = OpenAI(base_url=server.base_url, api_key="x", max_retries=0, timeout=600)
    try:
        pp, gen = [], []
        for _ in range(repeats):
            t = time.perf_counter()
            r = client.chat.completions.create(
                model=model,
                messages=[{"role": "user", "content": rag_prompt()}],
                max_tokens=1,
                temperature=0,
            )
            assert r.usage is not None
            pp.append(r.usage.prompt_tokens / (time.perf_counter() - t))
            out["prompt_tokens"] = r.usage.prompt_tokens
            short = f"{uuid.uuid4().hex[:6]} Write the numbers from 1 to 400, separated by commas."
            t0 = time.perf_counter()
            client.chat.completions.create(
                model=model,
                messages=[{"role": "user", "content": short}],
                max_tokens=1,
                temperature=0,
            )
            prefill = time.perf_counter() - t0
            t = time.perf_counter()
            r = client.chat.completions.create(
                model=model,
                messages=[
                    {"role": "user", "content": short.replace(short[:6], uuid.uuid4().hex[:6])}
                ],
                max_tokens=96,
                temperature=0,
            )
            assert r.usage is not None
            gen.append(r.usage.completion_tokens / max(1e-6, time.perf_counter() - t - prefill))
        out["prompt_tok_s"] = round(sum(pp) / len(pp), 1)
        out["gen_tok_s"] = round(sum(gen) / len(gen), 1)
        rag_time = out["prompt_tokens"] / out["prompt_tok_s"] + 30 / out["gen_tok_s"]
        out["rag_call_s_est"] = round(rag_time, 1)  # ~1,200-token prompt + 30 output tokens
        schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
        msgs = [{"role": "user", "content": "Is 2+2=4? Reply in JSON."}]
        compat: dict[str, Any] = {}
        for name, fmt in {
            "json_schema": {"type": "json_schema", "json_schema": {"name": "r", "schema": schema}},
            "json_object_schema": {"type": "json_object", "schema": schema},
        }.items():
            try:
                r = client.chat.completions.create(
                    model=model, messages=msgs, max_tokens=20, response_format=fmt
                )  # type: ignore[arg-type]
                json.loads(r.choices[0].message.content or "")
                compat[name] = True
            except Exception as exc:
                compat[name] = f"no ({type(exc).__name__})"
        try:
            r = client.chat.completions.create(
                model=model, messages=msgs, max_tokens=1, logprobs=True, top_logprobs=5
            )
            compat["logprobs"] = bool(r.choices[0].logprobs and r.choices[0].logprobs.content)
        except Exception as exc:
            compat["logprobs"] = f"no ({type(exc).__name__})"
        r = client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "Count to 100."}],
            max_completion_tokens=5,
        )
        compat["max_completion_tokens_honoured"] = bool(r.usage and r.usage.completion_tokens <= 5)
        compat["usage_returned"] = r.usage is not None
        out["api"] = compat
    finally:
        server.stop()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="qwen2.5-coder-1.5b")
    ap.add_argument("--engines", default="llama-cpp-python,xllamacpp")
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    result: dict[str, Any] = {}
    for engine in args.engines.split(","):
        for model in args.models.split(","):
            result.setdefault(engine, {})[model] = measure(engine, model, args.repeats)
            print(f"{engine} {model}: {result[engine][model]}", file=sys.stderr, flush=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
