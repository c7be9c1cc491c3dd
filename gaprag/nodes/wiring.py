"""How a method's module-level nodes and routers become a graph.

A node is a module-level function named exactly like its graph node::

    async def retrieve(state: State, runtime: Runtime[Context], deps: Deps) -> dict[str, Any]

(``deps`` may be left out; a node without I/O may be a plain ``def``). :func:`add_nodes`
turns each into a LangGraph node that runs natively under both ``invoke`` and ``ainvoke``
(:mod:`gaprag.aio`), hands it the run's settings as ``runtime.context`` (an instance of the
graph's context class, whatever the caller passed), and meters it
(:mod:`gaprag.accounting`).

The ``first`` node starts every question. When it runs for a new question (the previous
question on the thread has ended, which every method marks by setting ``stop_reason`` only when
it ends, or the question differs from the one the state was last reset for) its update also
resets every per-question field to its default (reducer fields included, with LangGraph's
``Overwrite``), so a second question on a checkpointed thread starts clean; when it runs again
inside a loop of the same question, nothing is reset. A field annotated with
:data:`gaprag.state.base.PERSISTENT` is kept across a thread's questions. Every node validates
the question it is given, whichever way it was written into the state.

A router is a module-level function ``(state, runtime) -> Literal[...]``; :func:`add_router`
gives it the resolved settings too and passes its ``Literal`` values as the edge map, so
Studio draws every edge. Nodes and routers resolve the run's settings with
:func:`gaprag.context.aresolve_context`, so a run-time path is resolved off the event loop.
An error a node raises in a graph whose operator hides paths (the served graphs) is told
without the server's paths (:meth:`gaprag.operator.OperatorPolicy.hidden`).

:func:`compile_graph` compiles every method the same way. A method names its loop bounds (the
context fields that bound its rounds, each with a ``maximum``) and the steps one round takes;
the compiled graph's recursion limit is what the longest valid run needs (every node once,
each bound at its maximum, and a margin), so any bound a run may set works in ``invoke``,
``ainvoke``, ``stream``, a subgraph and LangGraph's server, and a runaway loop still stops.

Every node runs inside its run's ledger (:mod:`gaprag.llm.spend`): the LLM layer checks the
run's limits (the operator's deadline and token budget, :mod:`gaprag.operator`, and a
graph's ``call_budget``: :func:`run_limits`) before every call and refuses a call the run
cannot afford; the node that made it ends there with the
limit as its ``stop_reason``. A router given ``on_limit`` sends a run that reached a limit, or
whose nodes ran more rounds than its own loop bounds allow (:func:`runs_cap`, counted by the
ledger, not read from the state), from a loop's next round to the step that answers with what
was gathered, and a step that ends the question after a limit was reached reports the limit as
its ``stop_reason``. A run whose metadata ``filter`` keeps no passage of its store is stopped
the same way at its first node (:meth:`gaprag.deps.Deps.afilter_stop`): it ends with
``stop_reason`` ``no_matching_passages`` and no model call.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import time
import typing
import weakref
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import is_dataclass
from typing import Any, get_args, get_origin

from langchain_core.runnables import RunnableConfig, RunnableLambda
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.constants import START
from langgraph.errors import GraphBubbleUp
from langgraph.graph import StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime, get_runtime
from langgraph.types import Overwrite

from gaprag.accounting import metered, record_decision
from gaprag.aio import run_sync
from gaprag.context import BaseContext, aresolve_context, field_range
from gaprag.deps import Deps
from gaprag.llm import spend
from gaprag.llm.memo import run_scope
from gaprag.operator import policy_of
from gaprag.state.base import PERSISTENT, InputState
from gaprag.validate import check_question

NodeFn = Callable[..., Any]

#: Supersteps a run may take beyond every node once and each loop at its bound's maximum.
STEP_MARGIN = 10


def _is_reducer_field(annotation: Any) -> bool:
    meta: tuple[Any, ...] = getattr(annotation, "__metadata__", ())
    return len(meta) > 0 and callable(meta[-1])


def reset_values(
    state_cls: type[Any], inputs: frozenset[str] = frozenset()
) -> dict[str, tuple[Any, bool]]:
    """Every per-question field of ``state_cls``: (its default, whether it has a reducer),
    leaving out the input fields (the shared ones and ``inputs``) and fields marked
    persistent."""
    hints = typing.get_type_hints(state_cls, include_extras=True)
    inputs = inputs | {f.name for f in dataclasses.fields(InputState)}
    out: dict[str, tuple[Any, bool]] = {}
    for f in dataclasses.fields(state_cls):
        annotation = hints.get(f.name)
        if f.name in inputs or PERSISTENT in getattr(annotation, "__metadata__", ()):
            continue
        if f.default is not dataclasses.MISSING:
            value: Any = f.default
        elif f.default_factory is not dataclasses.MISSING:
            value = f.default_factory()
        else:
            continue
        out[f.name] = (value, _is_reducer_field(annotation))
    return out


def new_question(state: Any) -> bool:
    """Whether the first node runs for a new question (not again inside a loop)."""
    return bool(getattr(state, "stop_reason", "")) or getattr(state, "asked", "") != getattr(
        state, "question", ""
    )


def _stale(state: Any, inputs: frozenset[str]) -> dict[str, tuple[Any, bool]]:
    """The per-question fields that still hold a previous question's value."""
    out = {}
    for name, (default, reducer) in reset_values(type(state), inputs).items():
        current = getattr(state, name, default)
        if current == default or (reducer and not current):  # a reducer channel starts empty
            continue
        out[name] = (default, reducer)
    return out


def _start_update(update: Any, stale: dict[str, tuple[Any, bool]], question: str) -> Any:
    """A first node's update for a new question: the stale fields reset (or overwritten by
    the node's own values), and the question the state was reset for recorded."""
    if not isinstance(update, dict):
        return update
    merged = {**update, "asked": question}
    for name, (default, reducer) in stale.items():
        value = update.get(name, default)
        merged[name] = Overwrite(value) if reducer else value
    return merged


def _thread(runtime: Runtime[Any], graph: object) -> str:
    """The checkpointed thread a node of ``graph`` (its built objects) runs on, and the
    graph's place in it ('' without a thread)."""
    info = getattr(runtime, "execution_info", None)
    thread = getattr(info, "thread_id", None)
    if not thread:
        return ""
    namespace = str(getattr(info, "checkpoint_ns", "") or "").split("|")[:-1]
    return f"{id(graph)}|{thread}|" + "|".join(part.split(":")[0] for part in namespace)


def _run(runtime: Runtime[Any]) -> object | None:
    """What identifies the invocation a node runs in: LangGraph's run-scoped control object
    (one per invocation, shared with its subgraphs), else the run's id when the caller gave
    one."""
    control: object | None = getattr(runtime, "control", None)
    if control is not None:
        return control
    run_id = getattr(getattr(runtime, "execution_info", None), "run_id", None)
    return str(run_id) if run_id else None


def run_ledger(
    runtime: Runtime[Any], ctx: Any, graph: object, *, first: bool = False
) -> spend.Ledger:
    """The ledger of the run a node of ``graph`` (its built objects) belongs to (see
    :func:`gaprag.llm.spend.ledger_for`), with the run's limits for a new one
    (:func:`run_limits`)."""
    return spend.ledger_for(
        _run(runtime),
        _thread(runtime, graph),
        starting=first,
        make=lambda: spend.Ledger(**run_limits(ctx)),
    )


def run_limits(ctx: Any) -> dict[str, Any]:
    """Every limit a run's ledger keeps, read in one place when the run starts: the
    operator's ``deadline_s`` and ``token_budget`` (:class:`gaprag.operator.OperatorPolicy`)
    and the graph's own ``call_budget`` setting where it has one (escalating_rag); a
    subgraph's nodes run under the ledger, and so the limits, of the run that started it."""
    policy = policy_of(type(ctx))
    budget = getattr(ctx, "call_budget", None)
    return {
        "token_budget": policy.token_budget,
        "deadline_s": policy.deadline_s,
        "call_budget": budget if isinstance(budget, int) else None,
    }


def _end_at_limit(update: Any, limit: str) -> Any:
    """A step that ends the question after the run reached ``limit`` reports it."""
    if limit and isinstance(update, dict) and update.get("stop_reason"):
        update["stop_reason"] = limit
    return update


class _Node(RunnableLambda[Any, Any]):
    """A node: its sync and async implementation, each run once per task. Streamed
    (``astream_events``, ``stream_mode="messages"``) it answers once, as when invoked, so the
    trace holds the same runs and events in every mode."""

    async def astream(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any | None
    ) -> AsyncIterator[Any]:
        yield await self.ainvoke(input, config, **kwargs)


def as_node(
    fn: NodeFn,
    deps: Deps,
    context: type[BaseContext],
    *,
    first: bool = False,
    inputs: frozenset[str] = frozenset(),
) -> Any:
    """``fn`` as a LangGraph node that runs natively in sync and async mode: a
    ``RunnableLambda`` with both implementations, each given the run's runtime by
    :func:`langgraph.runtime.get_runtime`."""
    name = fn.__name__
    takes_deps = "deps" in inspect.signature(fn).parameters
    is_async = inspect.iscoroutinefunction(fn)

    async def afunc(state: Any, runtime: Runtime[Any]) -> Any:
        try:
            return await run_node(state, runtime)
        except GraphBubbleUp:  # a pause or a command: LangGraph's, as it is
            raise
        except Exception as err:  # a served caller reads gaprag's one line, no server path
            hidden = policy_of(context).hidden(err)
            if hidden is None:
                raise
            raise hidden from err

    async def run_node(state: Any, runtime: Runtime[Any]) -> Any:
        check_question(getattr(state, "question", None))
        starting = first and new_question(state)
        stale: dict[str, tuple[Any, bool]] = {}
        if starting:  # the node sees the clean state of a new question
            stale = _stale(state, inputs)
            state = dataclasses.replace(
                state, **{k: copy.deepcopy(d) for k, (d, _) in stale.items()}
            )
        run = runtime.override(context=await aresolve_context(context, runtime.context))
        ledger = run_ledger(runtime, run.context, deps, first=first)
        if starting and (no_match := await deps.afilter_stop(run.context)):
            ledger.stop(no_match)  # a filter that keeps no passage: no model is called
        reached = ledger.limit()
        start = time.perf_counter()
        with (
            run_scope(ledger.key),
            spend.spending(ledger),
            ledger.step(f"{name}@{id(context):x}"),  # a subgraph's steps are its own
            metered() as meter,
        ):
            try:
                result = fn(state, run, deps) if takes_deps else fn(state, run)
                update = await result if is_async else result
            except spend.SpendLimit as stop:  # a call the run could not afford: not sent
                record_decision(event="spend_limit", limit=stop.reason)
                update = {"stop_reason": stop.reason, "answer": getattr(state, "answer", "")}
                reached = stop.reason
        update = meter.apply(update, name, time.perf_counter() - start)
        update = _end_at_limit(update, reached)
        return _start_update(update, stale, state.question) if starting else update

    async def anode(state: Any) -> Any:
        return await afunc(state, get_runtime())

    def node(state: Any) -> Any:
        return run_sync(afunc(state, get_runtime()))

    return _Node(node, afunc=anode, name=name)


def add_nodes(
    builder: StateGraph[Any, Any, Any, Any],
    deps: Deps,
    *fns: NodeFn,
    first: NodeFn | None = None,
    gate: bool = False,
) -> None:
    """Add module-level node functions under their own names. ``first`` (default: the first
    given) starts each question: START leads to it, and it resets the per-question state.

    ``gate``: put the shared gate (:mod:`gaprag.nodes.gate`) before ``first``: it starts each
    question instead, and leads to ``first`` or, when plain RAG's answer is confident, to
    ``short_answer`` (so the graph must end with :func:`add_short_answer`)."""
    context = builder.context_schema
    if context is None or not issubclass(context, BaseContext):
        raise TypeError("the graph needs a gaprag context_schema (a BaseContext subclass)")
    entry = first or fns[0]
    schema = builder.input_schema
    inputs = (
        frozenset(f.name for f in dataclasses.fields(schema))
        if is_dataclass(schema)
        else frozenset()
    )
    start = entry
    if gate:
        from gaprag.nodes.gate import after_gate
        from gaprag.nodes.gate import gate as gate_node

        start = gate_node
        builder.add_node("gate", as_node(gate_node, deps, context, first=True, inputs=inputs))
        loop = entry.__name__

        def route_after_gate(state: Any) -> str:
            return after_gate(state, loop)

        builder.add_conditional_edges("gate", route_after_gate, [loop, "short_answer"])
    for fn in fns:
        builder.add_node(fn.__name__, as_node(fn, deps, context, first=fn is start, inputs=inputs))
    builder.add_edge(START, start.__name__)


def add_router(
    builder: StateGraph[Any, Any, Any, Any],
    source: str,
    fn: NodeFn,
    *,
    on_limit: dict[str, str] | None = None,
) -> None:
    """A conditional edge from ``source`` decided by ``fn``; its ``Literal`` return type lists
    the targets (Studio draws them). ``on_limit``: ``{next round's target: answering target}``
    for a run that has reached the operator's deadline or token budget."""
    context = builder.context_schema
    assert context is not None and issubclass(context, BaseContext)
    returns = typing.get_type_hints(fn).get("return")
    if get_origin(returns) is not typing.Literal:
        raise TypeError(f"router {fn.__name__} must return a Literal[...] of node names")
    targets = list(get_args(returns))
    cuts = on_limit or {}
    targets += [t for t in cuts.values() if t not in targets]
    takes_runtime = "runtime" in inspect.signature(fn).parameters

    async def aroute(state: Any, runtime: Runtime[Any]) -> Any:
        if not takes_runtime:
            chosen = fn(state)
        else:
            ctx = await aresolve_context(context, runtime.context)
            chosen = fn(state, runtime.override(context=ctx))
        if chosen not in cuts:
            return chosen
        ledger = spend.find(_run(runtime))
        if ledger is None:
            return chosen
        cap = runs_cap(builder, await aresolve_context(context, runtime.context))
        return cuts[chosen] if ledger.limit() or ledger.most_runs() > cap else chosen

    async def apath(state: Any) -> Any:
        return await aroute(state, get_runtime())

    def path(state: Any) -> Any:
        return run_sync(aroute(state, get_runtime()))

    builder.add_conditional_edges(
        source, RunnableLambda(path, afunc=apath, name=fn.__name__), targets
    )


_LOOPS: weakref.WeakKeyDictionary[Any, Mapping[str, int]] = weakref.WeakKeyDictionary()


def runs_cap(builder: StateGraph[Any, Any, Any, Any], ctx: Any) -> int:
    """The most times one node of a run with settings ``ctx`` may run: once, and once more
    for each round its loop bounds allow (a bound of 0, "the task's", at the bound's
    maximum). When a node has run more often, the routers' ``on_limit`` send the run to its
    answer, whatever counters its state holds."""
    fields = {f.name: f for f in dataclasses.fields(ctx)}
    total = 1
    for name in _LOOPS.get(builder, {}):
        value = getattr(ctx, name, 0)
        bound = value if isinstance(value, int) and value > 0 else field_range(fields[name])[1]
        total += int(bound or 0)
    return total


def recursion_limit(
    builder: StateGraph[Any, Any, Any, Any], loops: Mapping[str, int] | None = None
) -> int:
    """The most supersteps a valid run can take: every node once, ``steps`` more for each
    round that each loop bound (``{field: steps}``) allows at its maximum, and
    :data:`STEP_MARGIN`."""
    context = builder.context_schema
    assert context is not None and issubclass(context, BaseContext)
    fields = {f.name: f for f in dataclasses.fields(context)}
    total = len(builder.nodes) + STEP_MARGIN
    for name, steps in (loops or {}).items():
        maximum = field_range(fields[name])[1] if name in fields else None
        if maximum is None:
            raise TypeError(f"loop bound {name!r} must be a context field with a maximum")
        total += steps * int(maximum)
    return total


def compile_graph(
    builder: StateGraph[Any, Any, Any, Any],
    checkpointer: BaseCheckpointSaver[Any] | None,
    *,
    name: str,
    loops: Mapping[str, int] | None = None,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """Compile a method's graph. ``loops``: each loop bound (a context field with a
    ``maximum``) and the steps one round of its loop takes, e.g. ``{"max_steps": 2}``.

    The recursion limit is :func:`recursion_limit`, fixed on the compiled graph, so every run
    whose settings validate fits, whatever it sets at run time. A caller's own
    ``recursion_limit`` in the run config (or a parent graph's, for a subgraph) takes its
    place, but not past the run's own bounds: the routers end every loop at
    :func:`runs_cap`."""
    _LOOPS[builder] = dict(loops or {})
    graph = builder.compile(checkpointer=checkpointer, name=name)
    return graph.with_config(recursion_limit=recursion_limit(builder, loops))
