"""Model profiles (precedence, matching, sources) and the calibration replay."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gaprag import build_graph
from gaprag.context import effective_settings
from gaprag.errors import InputError
from gaprag.eval.calibrate import calibrate, choose, curves, replay, write_profile
from gaprag.graphs import calibrated, context_class, list_methods
from gaprag.profiles import (
    Profile,
    load_profile,
    model_in_use,
    normalize,
    parse_profile,
    profile_for,
    shipped_profiles,
)
from gaprag.stores import HashingEmbedder, Store
from gaprag.testing import scripted

PROFILE = Profile(model="tiny-model", methods={"standard_rag": {"top_k": 2}}, source="test")


@pytest.mark.parametrize(
    "name",
    [
        "qwen2.5-coder-1.5b",
        "Qwen/Qwen2.5-Coder-1.5B-Instruct",
        "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        "Qwen2.5-Coder-1.5B-Instruct-GGUF",
    ],
)
def test_model_names_match_without_org_instruct_and_quantisation(name: str) -> None:
    assert normalize(name) == "qwen2.5-coder-1.5b"


def test_the_embedded_default_model_has_a_shipped_profile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("GAPRAG_BASE_URL", raising=False)
    monkeypatch.delenv("GAPRAG_LOCAL_MODEL", raising=False)
    found = profile_for(model_in_use(None))
    assert found is not None and found.model == "qwen2.5-coder-1.5b"
    assert profile_for("some-other-model-7b") is None
    assert model_in_use(SimpleNamespace(model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct")) == (
        "Qwen/Qwen2.5-Coder-1.5B-Instruct"
    )
    monkeypatch.setenv("GAPRAG_BASE_URL", "http://localhost:1/v1")
    monkeypatch.delenv("GAPRAG_MODEL", raising=False)
    assert model_in_use(None) is None  # an endpoint with no model name: no profile


def test_every_shipped_profile_setting_exists() -> None:
    for profile in shipped_profiles().values():
        for method, settings in profile.methods.items():
            assert method in list_methods(), f"{profile.source}: unknown method {method}"
            fields = {f.name for f in dataclasses.fields(context_class(method))}
            assert set(settings) <= fields, f"{profile.source}: {set(settings) - fields}"


def test_every_calibrated_threshold_and_switch_is_a_setting() -> None:
    declared = calibrated()
    assert {"iterkey", "missing_knowledge", "migres", "rfm_rag"} <= set(declared)
    for method, cal in declared.items():
        fields = {f.name for f in dataclasses.fields(context_class(method))}
        assert cal.setting in fields, method
        assert not cal.switch or cal.switch in fields, method


def test_precedence_default_profile_explicit_run(store: Store) -> None:
    fake = scripted(default="Shakespeare")
    q = {"question": "capital city tower"}
    graph = build_graph("standard_rag", llm=fake, retriever=store, profile=PROFILE)
    assert len(graph.invoke(q)["evidence"]) == 2  # the profile over the default (5)
    settings = effective_settings(graph.builder.context_schema)
    assert settings["top_k"] == {"value": 2, "source": "profile tiny-model"}
    assert settings["max_passage_words"]["source"] == "default"
    assert "[from profile tiny-model]" in next(
        f.metadata["description"]
        for f in dataclasses.fields(graph.builder.context_schema)
        if f.name == "top_k"
    )
    graph = build_graph("standard_rag", llm=fake, retriever=store, profile=PROFILE, top_k=3)
    assert len(graph.invoke(q)["evidence"]) == 3  # explicit wins
    assert effective_settings(graph.builder.context_schema)["top_k"]["source"] == "explicit"
    assert len(graph.invoke(q, context={"top_k": 1})["evidence"]) == 1  # run time wins
    graph = build_graph("standard_rag", llm=fake, retriever=store, profile=None)
    assert len(graph.invoke(q)["evidence"]) == 5  # no profile: the defaults


def test_profile_files_and_errors(tmp_path: Path) -> None:
    path = tmp_path / "m.toml"
    path.write_text('model = "m-1b"\n[standard_rag]\ntop_k = 4\n', encoding="utf-8")
    assert load_profile(path).settings("standard_rag") == {"top_k": 4}
    with pytest.raises(InputError, match="no model profile"):
        load_profile("no-such-model-3b")
    with pytest.raises(InputError, match="no `model`"):
        parse_profile("[iterkey]\nx = 1\n")


def test_a_profile_setting_the_method_does_not_have_is_refused_not_dropped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gaprag.cli import main

    path = tmp_path / "m.toml"
    path.write_text('model = "m-1b"\n[iterkey]\nvalidation_treshold = 0.9\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"\[iterkey\] has no setting 'validation_treshold'"):
        build_graph("iterkey", llm=scripted(default="x"), profile=str(path))
    assert main(["settings", "iterkey", "--profile", str(path)]) == 2
    err = capsys.readouterr().err
    assert "has no setting 'validation_treshold'" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) <= 2


def _row(f1: float, calls: int, decisions: list[tuple[float | None, str]]) -> dict[str, Any]:
    return {
        "method": "iterkey",
        "question": "Who wrote Hamlet?",
        "answers": ["William Shakespeare"],
        "f1": f1,
        "llm_calls": calls,
        "decisions": [
            {"node": "validate_answer", "round": i + 1, "decision": "x", "p": p, "answer": a}
            for i, (p, a) in enumerate(decisions)
        ],
    }


def test_replay_stops_at_the_first_confident_decision() -> None:
    rows = [
        # round 1 wrong but confident-ish (0.8), round 2 right and sure (0.97); final right
        _row(1.0, 6, [(0.8, "Marlowe"), (0.97, "William Shakespeare")]),
        # round 1 right and sure: stopping early saves calls
        _row(1.0, 6, [(0.99, "William Shakespeare"), (0.6, "Shakespeare")]),
    ]
    low = replay(rows, ["validate_answer"], 0.5, cost_per_call=0.0)
    assert low.f1 == pytest.approx(0.5) and low.stop_rate == pytest.approx(1.0)
    high = replay(rows, ["validate_answer"], 0.95, cost_per_call=0.0, after_last=0)
    assert high.f1 == pytest.approx(1.0)
    assert high.llm_calls == pytest.approx((6 + 3) / 2)  # the last decision ends the run
    tail = replay(rows, ["validate_answer"], 0.95, cost_per_call=0.0, after_last=1)
    assert tail.llm_calls == pytest.approx((6 * 2 / 3 + 6 * 1 / 3) / 2)  # an answer step follows
    assert tail.stop_rate == pytest.approx(1.0)  # stopping at the last decision skips it
    never = replay(rows, ["validate_answer"], 1.01, cost_per_call=0.0)
    assert never.f1 == pytest.approx(1.0) and never.llm_calls == pytest.approx(6)
    assert choose([low, high, never]).threshold == 1.01  # free calls: a tie, retrieve more
    costly = [replay(rows, ["validate_answer"], t, cost_per_call=0.1) for t in (0.5, 0.95, 1.01)]
    assert choose(costly).threshold == 0.95
    # ties go to the higher threshold (fail toward retrieving more)
    assert choose([never, dataclasses.replace(never, threshold=0.4)]).threshold == 1.01


def test_decisions_without_p_or_answer_never_stop() -> None:
    rows = [_row(0.0, 4, [(None, "William Shakespeare"), (0.99, None)])]
    point = replay(rows, ["validate_answer"], 0.5)
    assert point.f1 == 0.0 and point.stop_rate == 0.0


def test_replay_of_iterkey_round_choice_among_rounds(tmp_path: Path) -> None:
    """Runs no validation stopped: each fallback_policy is replayed from the rounds' answers
    and probabilities, and the best pair of threshold and policy goes into the profile."""
    rows = [
        # ran with "last": the last round's answer (scored 0.0 by the run) was wrong; the
        # round the validator trusted most was right
        _row(0.0, 9, [(0.1, "Marlowe"), (0.2, "William Shakespeare"), (0.05, "Marlowe")]),
        # every round the same answer: the row's own F1 whatever the policy
        _row(0.5, 9, [(0.1, "Shakespeare"), (0.2, "shakespeare"), (0.05, "Shakespeare.")]),
    ]
    last = replay(rows, ["validate_answer"], 1.01, cost_per_call=0.0, choice="last")
    confident = replay(rows, ["validate_answer"], 1.01, cost_per_call=0.0, choice="confident")
    first = replay(rows, ["validate_answer"], 1.01, cost_per_call=0.0, choice="first")
    assert last.f1 == pytest.approx(0.25) and first.f1 == pytest.approx(0.25)
    assert confident.f1 == pytest.approx(0.75) and confident.choice == "confident"
    # (the probabilities lie below every threshold of the grid: no replay stops a run)
    # the row says which policy it ran with: then "last" is the one scored afresh
    ran_confident = [{**rows[0], "round_choice": "confident", "f1": 1.0}]
    assert replay(ran_confident, ["validate_answer"], 1.01, choice="last").f1 == 0.0
    result = curves(rows, ["iterkey"], cost_per_call=0.0)["iterkey"]
    assert result["switch"] == "fallback_policy"
    assert result["chosen"]["choice"] == "confident" and result["chosen"]["threshold"] == 1.01
    assert set(result["choices"]) == {"last", "first", "majority", "confident"}
    assert all(pt["choice"] == "confident" for pt in result["grid"])
    path = tmp_path / "p.toml"
    write_profile(path, "m", {"iterkey": result}, {"date": "2026-11-24"})
    assert load_profile(path).settings("iterkey") == {
        "validation_threshold": 1.0, "fallback_policy": "confident",
    }  # fmt: skip
    # a tie keeps the default policy: the paper-silent "last"
    same = [_row(1.0, 6, [(0.4, "William Shakespeare"), (0.6, "William Shakespeare")])]
    assert curves(same, ["iterkey"], cost_per_call=0.0)["iterkey"]["chosen"]["choice"] == "last"


def test_curves_and_profile_writing_keep_switches(tmp_path: Path) -> None:
    rows = [_row(1.0, 6, [(0.99, "William Shakespeare"), (0.6, "x")])]
    result = curves(rows, ["iterkey"], cost_per_call=0.01)
    assert result["iterkey"]["setting"] == "validation_threshold"
    assert result["iterkey"]["chosen"]["threshold"] <= 0.99
    path = tmp_path / "p.toml"
    path.write_text('model = "m"\n[migres]\nseed_facts = true\n', encoding="utf-8")
    write_profile(path, "m", result, {"date": "2026-11-23"})
    prof = load_profile(path)
    assert prof.settings("migres") == {"seed_facts": True}
    assert 0 < prof.settings("iterkey")["validation_threshold"] <= 1.0
    assert prof.notes["iterkey"]["date"] == "2026-11-23"
    assert prof.notes["iterkey"]["rows"] == 1


def test_a_later_calibration_keeps_the_record_of_earlier_ones(tmp_path: Path) -> None:
    rows = [_row(1.0, 6, [(0.99, "William Shakespeare"), (0.6, "x")])]
    path = tmp_path / "p.toml"
    # a profile written before the record was kept per method: one flat table
    path.write_text(
        'model = "m"\n[missing_knowledge]\njudge_threshold = 1.0\n'
        '[calibration]\ndate = "2026-11-01"\ncommand = "a"\n'
        "[calibration.rows]\nmissing_knowledge = 16\n",
        encoding="utf-8",
    )
    write_profile(path, "m", curves(rows, ["iterkey"]), {"date": "2026-11-24", "command": "b"})
    notes = load_profile(path).notes
    assert notes["missing_knowledge"] == {"date": "2026-11-01", "command": "a", "rows": 16}
    assert notes["iterkey"] == {"date": "2026-11-24", "command": "b", "rows": 1}
    assert set(notes) == {"missing_knowledge", "iterkey"}
    assert load_profile(path).settings("missing_knowledge") == {"judge_threshold": 1.0}


def test_calibration_refuses_the_evaluation_questions(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="reserved"):
        calibrate(model="qwen2.5-coder-1.5b", start=10, out=tmp_path, progress=False)
    with pytest.raises(InputError, match="no calibrated decision"):
        calibrate(model="qwen2.5-coder-1.5b", methods=["standard_rag"], out=tmp_path)


def test_calibrate_end_to_end_with_a_scripted_model(tmp_path: Path) -> None:
    """Real IterKey graphs on questions 60+ of a dataset file, a scripted model with logprobs:
    every round is run and recorded, and the profile gets a threshold."""
    import json

    from gaprag.llm.client import LLM
    from gaprag.testing import ScriptedChatModel

    records = [
        {
            "id": f"q{i}",
            "question": "Who wrote Hamlet?",
            "answers": ["William Shakespeare"],
            "supporting": ["hamlet"],
            "paragraphs": [
                {"id": "hamlet", "title": "Hamlet", "text": "Hamlet was written by Shakespeare."},
                {"id": "paris", "title": "Paris", "text": "Paris is the capital of France."},
            ],
        }
        for i in range(64)
    ]
    data = tmp_path / "mini.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in records) + "\n", encoding="utf-8")
    fake = ScriptedChatModel(default="William Shakespeare", logprobs={"True": -0.05, "False": -3.0})
    profile = tmp_path / "mini.toml"
    result = calibrate(
        model="mini-model", methods=["iterkey"], datasets=[str(data)], limit=2, start=60,
        out=tmp_path / "runs", profile_path=profile, llm=LLM(fake, supports_logprobs=True), embedder=HashingEmbedder(),
        progress=False,
    )  # fmt: skip
    rows = [
        json.loads(line)
        for line in (tmp_path / "runs" / "mini" / "results.jsonl").read_text().splitlines()
    ]
    assert sorted(r["id"] for r in rows) == ["q60", "q61"]  # only calibration questions
    for row in rows:
        assert row["options"] == {"calibration": True}
        decisions = [d for d in row["decisions"] if d["node"] == "validate_answer"]
        assert len(decisions) == 5  # never stopped early: the paper's bound of 5 rounds
        assert all(d["p"] > 0.9 and d["answer"] for d in decisions)
    curve = result["curves"]["iterkey"]
    assert curve["questions"] == 2 and curve["decisions_with_p"] == 10
    # right and sure (p = 0.95) in round 1: stop there; ties go to the highest such threshold
    assert curve["chosen"]["threshold"] == 0.95 and curve["chosen"]["stop_rate"] == 1.0
    assert load_profile(profile).settings("iterkey")["validation_threshold"] == 0.95
    assert (tmp_path / "runs" / "curves.json").is_file()


def test_resume_refuses_a_changed_profile_setting() -> None:
    from gaprag.eval.record import _profiles_differ

    a = {"model": "m", "source": "x", "settings": {"iterkey": {"top_k": 5}}}
    assert not _profiles_differ(False, a)  # a run from before profiles were recorded
    assert not _profiles_differ(a, dict(a))
    other = {"model": "m", "source": "x", "settings": {"iterkey": {"top_k": 3}}}
    assert _profiles_differ(a, other)
    more = {"model": "m", "source": "x", "settings": {"iterkey": {"top_k": 5}, "migres": {}}}
    assert not _profiles_differ(a, more)  # another method joins the run
    assert _profiles_differ(a, None) and _profiles_differ(a, {**a, "model": "n"})


def test_replay_only_uses_the_rows_already_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import json
    import os

    monkeypatch.setenv("GAPRAG_LOCAL_MODEL", "smollm2-135m")

    runs = tmp_path / "runs" / "hotpotqa"
    runs.mkdir(parents=True)
    from gaprag.datasets import load_dataset

    ids = [ex.id for ex in load_dataset("hotpotqa").examples[60:62]]
    rows = [
        {**_row(1.0, 6, [(0.99, "William Shakespeare"), (0.5, "x")]), "id": i,
         "options": {"calibration": True}, "error": None}
        for i in ids
    ]  # fmt: skip
    rows.append({**rows[0], "id": "not-a-calibration-question"})
    (runs / "results.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    profile = tmp_path / "p.toml"
    result = calibrate(
        model="m", methods=["iterkey"], datasets=["hotpotqa"], limit=5, out=tmp_path / "runs",
        profile_path=profile, run=False,
    )  # fmt: skip
    assert result["curves"]["iterkey"]["questions"] == 2
    assert load_profile(profile).notes["iterkey"]["rows"] == 2
    # which round's answer the rows gave is read from their run's settings (probabilities
    # below the grid: no threshold stops these runs)
    for row in rows:
        row["decisions"] = _row(1.0, 6, [(0.1, "William Shakespeare"), (0.1, "x")])["decisions"]
    (runs / "results.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (runs / "run.json").write_text(
        json.dumps({"settings": {"iterkey": {"fallback_policy": "first"}}})
    )
    result = calibrate(
        model="m", methods=["iterkey"], datasets=["hotpotqa"], limit=5, out=tmp_path / "runs",
        profile_path=profile, run=False,
    )  # fmt: skip
    # ran with "first" (answer right, F1 1.0); "last" would have answered "x"
    assert result["curves"]["iterkey"]["choices"]["last"]["f1"] == 0.0
    assert result["curves"]["iterkey"]["chosen"]["choice"] == "first"
    from gaprag.cli import main

    args = ["calibrate", "--model", "m", "--methods", "iterkey", "--datasets", "hotpotqa"]
    args += ["--limit", "5", "--out", str(tmp_path / "runs"), "--profile", str(profile)]
    assert main([*args, "--replay-only"]) == 0
    assert "iterkey: validation_threshold = 1, fallback_policy = first" in capsys.readouterr().out
    with pytest.raises(InputError, match="no calibration rows"):
        calibrate(model="m", methods=["iterkey"], datasets=["musique"], out=tmp_path / "runs",
                  profile_path=profile, run=False)  # fmt: skip
    assert os.environ["GAPRAG_LOCAL_MODEL"] == "smollm2-135m"  # the caller's model, after both
    monkeypatch.delenv("GAPRAG_LOCAL_MODEL")
    calibrate(
        model="m", methods=["iterkey"], datasets=["hotpotqa"], limit=5, out=tmp_path / "runs",
        profile_path=profile, run=False,
    )  # fmt: skip
    assert "GAPRAG_LOCAL_MODEL" not in os.environ


def test_studio_form_shows_profile_values_and_their_source(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The served graphs are built with the default model: its profile fills Studio's form."""
    monkeypatch.delenv("GAPRAG_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setenv("GAPRAG_LOCAL_MODEL", "qwen2.5-coder-1.5b")
    form = build_graph("iterkey").get_context_jsonschema()["properties"]
    assert form["top_k"]["default"] == 5
    assert form["top_k"]["description"].endswith("[from profile qwen2.5-coder-1.5b]")
    assert "[from profile" not in form["cot"]["description"]  # not in the profile
    monkeypatch.setenv("GAPRAG_LOCAL_MODEL", "smollm2-135m")  # no profile: the paper's values
    assert build_graph("iterkey").get_context_jsonschema()["properties"]["top_k"]["default"] == 3
