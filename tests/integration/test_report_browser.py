"""report.html in a real headless browser (Debian's chromium + chromedriver, Selenium).

Opens a generated report, checks the summary and the question table, opens a question and
checks the drill-down's text (gold answer, predictions, passages shown, decisions, an LLM
prompt and reply), exercises the filters, and times a 1,000-question x 6-method report.
``GAPRAG_REPORT_SCREENSHOT=PATH`` also saves a screenshot of an opened question there.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--window-size=1400,1800",
)  # fmt: skip


def _chromium() -> tuple[Any, str]:
    """A headless Chromium driven by Selenium, and its fresh profile directory."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    assert CHROMIUM and DRIVER
    profile = tempfile.mkdtemp(prefix="gaprag-chromium-")
    options = webdriver.ChromeOptions()
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.binary_location = CHROMIUM
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    driver.set_page_load_timeout(120)
    return driver, profile


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not (CHROMIUM and DRIVER):
        pytest.skip("chromium and chromium-driver are not installed (scripts/setup.sh --dev)")
    pytest.importorskip("selenium.webdriver")
    driver, profile = _chromium()
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def save_screenshot(
    report: str | Path, png: str | Path, question: int = 0, methods: int = 2
) -> None:
    """Open ``report``, open its ``question``-th question and the first ``methods`` method
    blocks and their first LLM call, and save a PNG of it (used for docs/results/report.png,
    from a report rebuilt with ``gaprag report
    docs/results/n50/after/{hotpotqa,2wikimultihopqa,musique} --out /tmp/after``)::

        python -c "from tests.integration.test_report_browser import save_screenshot as s; \\
                   s('/tmp/after/report.html', 'docs/results/report.png')"
    """
    from selenium.webdriver.common.by import By

    driver, profile = _chromium()
    try:
        _open(driver, Path(report))
        _rows(driver)[question].click()
        drill = _drill(driver)
        for block in drill.find_elements(By.CSS_SELECTOR, "details.method")[:methods]:
            block.find_element(By.TAG_NAME, "summary").click()
            calls = block.find_elements(By.CSS_SELECTOR, "details.call")
            if calls:
                calls[0].find_element(By.TAG_NAME, "summary").click()
        driver.execute_script("document.getElementById('questions-title').scrollIntoView()")
        driver.save_screenshot(str(png))
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _open(driver: Any, path: Path) -> float:
    start = time.perf_counter()
    driver.get(path.resolve().as_uri())
    for _ in range(600):  # bounded: 60 s
        if driver.execute_script("return document.body.dataset.ready === '1'"):
            return time.perf_counter() - start
        time.sleep(0.1)
    raise AssertionError("the report's script did not finish")


def _rows(driver: Any) -> list[Any]:
    from selenium.webdriver.common.by import By

    return list(driver.find_elements(By.CSS_SELECTOR, "#questions tbody tr.q"))


def _select(driver: Any, element_id: str, value: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    Select(driver.find_element(By.ID, element_id)).select_by_value(value)


def _drill(driver: Any) -> Any:
    from selenium.webdriver.common.by import By

    for _ in range(100):  # bounded: 10 s for the lazy decode
        drills = driver.find_elements(By.CSS_SELECTOR, "tr.drill")
        if drills and "loading" not in drills[0].text:
            return drills[0]
        time.sleep(0.1)
    raise AssertionError("the question did not open")


def test_open_a_question_and_filter(browser: Any, tmp_path: Path, monkeypatch: Any) -> None:
    from selenium.webdriver.common.by import By

    from gaprag.graphs import METHODS
    from tests.capitals import sample_run
    from tests.methods import contract as contract_method

    monkeypatch.setitem(METHODS, "contract", contract_method.__name__)
    out = sample_run(tmp_path)
    _open(browser, out / "report.html")
    assert browser.get_log("browser") == []  # no script errors
    page = browser.find_element(By.TAG_NAME, "body").text
    assert "Support recall" in page and "Retrieval recall" in page and "Loop decisions" in page
    rows = _rows(browser)
    assert len(rows) == 5
    assert "(5 of 5 shown by the filters)" in browser.find_element(By.ID, "count").text

    hamlet = next(r for r in rows if r.get_attribute("data-id") == "q5")
    hamlet.click()
    drill = _drill(browser)
    text = drill.text
    assert "Gold answer: William Shakespeare | Shakespeare" in text
    assert "supporting paragraphs: hamlet, pt" in text
    side = drill.find_elements(By.CSS_SELECTOR, "table.side-by-side tr.side")
    assert [r.find_elements(By.TAG_NAME, "td")[0].text for r in side] == [
        "standard_rag", "contract", "shown3",
    ]  # fmt: skip
    assert "Shakespeare" in side[1].text and "validated" in side[1].text
    # per method, collapsed until opened
    block = drill.find_element(By.CSS_SELECTOR, 'details.method[data-method="contract"]')
    assert block.get_attribute("open") is None
    assert "validate_answer: reject" not in block.text
    block.find_element(By.TAG_NAME, "summary").click()
    assert "validate_answer: reject (p 0.200, logprobs, threshold 0.5)" in block.text
    assert "judge: sufficient (p –, default)" in block.text
    shown = block.find_elements(By.CSS_SELECTOR, "ul.shown-list li")
    assert [li.text for li in shown] == ["hamlet — Hamlet"]
    assert "gold" in shown[0].get_attribute("class")
    call = block.find_element(By.CSS_SELECTOR, "details.call")
    prompt = call.find_element(By.CSS_SELECTOR, "pre.prompt")
    assert not prompt.is_displayed()  # every prompt collapsed by default
    call.find_element(By.TAG_NAME, "summary").click()
    assert prompt.is_displayed()
    assert prompt.text.endswith("Question: Who wrote Hamlet?\nAnswer:")
    assert call.find_element(By.CSS_SELECTOR, "pre.reply").text == "Shakespeare"
    shot = os.environ.get("GAPRAG_REPORT_SCREENSHOT")
    if shot:
        browser.execute_script("document.getElementById('questions-title').scrollIntoView()")
        browser.save_screenshot(shot)
    hamlet.click()  # closes again
    assert not browser.find_elements(By.CSS_SELECTOR, "tr.drill")

    # filters: outcome against standard_rag, method, dataset, stop reason, text
    _select(browser, "f-outcome", "lost")
    assert [r.get_attribute("data-id") for r in _rows(browser)] == ["q2"]  # Munich vs Berlin
    _select(browser, "f-outcome", "won")
    assert [r.get_attribute("data-id") for r in _rows(browser)] == ["q3"]  # Rome vs Milan
    _select(browser, "f-method", "shown3")
    assert [r.get_attribute("data-id") for r in _rows(browser)] == ["q3"]
    heads = [th.text for th in browser.find_elements(By.CSS_SELECTOR, "#questions thead th")]
    assert heads[-2:] == ["standard_rag", "shown3"]
    _select(browser, "f-outcome", "")
    _select(browser, "f-method", "standard_rag")
    _select(browser, "f-stop", "s:validated")
    assert _rows(browser) == []  # standard_rag stops with "answered"
    _select(browser, "f-stop", "s:answered")
    assert len(_rows(browser)) == 5
    _select(browser, "f-dataset", "capitals")
    text_box = browser.find_element(By.ID, "f-text")
    text_box.send_keys("hamlet")
    assert [r.get_attribute("data-id") for r in _rows(browser)] == ["q5"]
    assert browser.get_log("browser") == []


def _big_run(root: Path, questions: int, methods: list[str]) -> Path:
    """Synthetic rows and traces: 5 LLM calls of about 2 KB per question and method."""
    from gaprag.traces import TraceWriter

    root.mkdir(parents=True)
    traces = TraceWriter(root)
    passage = "Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 6
    with (root / "results.jsonl").open("w") as fh:
        for i in range(questions):
            qid = f"q{i:04d}"
            for j, m in enumerate(methods):
                f1 = float((i + j) % 3 == 0)
                fh.write(json.dumps({
                    "dataset": "big", "id": qid, "method": m, "question": f"Question {i}?",
                    "answers": [f"answer {i}"], "prediction": f"answer {i}" if f1 else "other",
                    "em": f1, "f1": f1, "acc": f1, "support_recall": 0.5, "retrieval_recall": 1.0,
                    "llm_calls": 5, "prompt_tokens": 2500, "completion_tokens": 50,
                    "retrieval_calls": 2, "iterations": 2, "stop_reason": "validated",
                    "wall_s": 3.0, "error": None, "decisions": [
                        {"node": "judge", "round": 1, "decision": "yes", "p": 0.7,
                         "path": "logprobs", "threshold": 0.5}],
                    "shown_ids": [f"p{i}", f"p{i + 1}"], "retrieved_ids": [f"p{i}", f"p{i + 1}"],
                }) + "\n")  # fmt: skip
                calls = [
                    {"messages": [{"role": "system", "content": "Instructions. " * 20},
                                  {"role": "human", "content": f"{passage} {k}\nQuestion {i}?"}],
                     "reply": f"reply {k}", "prompt_tokens": 500, "completion_tokens": 10}
                    for k in range(5)
                ]  # fmt: skip
                trace = {
                    "id": qid, "supporting": [f"p{i}"], "input": f"Question {i}?", "queries": [f"q {i}"],
                    "retrievals": [{"query": f"q {i}", "mode": "bm25", "ids": [f"p{i}"]}],
                    "shown_ids": [f"p{i}"], "retrieved_ids": [f"p{i}"], "evidence": [],
                    "decisions": [{"node": "judge", "round": 1, "decision": "yes", "p": 0.7,
                                   "path": "logprobs", "threshold": 0.5}],
                    "llm_calls": calls,
                }  # fmt: skip
                traces.write(m, trace)
    traces.compact()
    return root


def test_a_thousand_questions_by_six_methods_stay_fast(browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    from gaprag.eval import write_report

    methods = ["standard_rag", "missing_knowledge", "iterkey", "rag_ef", "migres", "rfm_rag"]
    run = _big_run(tmp_path / "big", 1000, methods)
    start = time.perf_counter()
    write_report([run], run, n_boot=200)
    built = time.perf_counter() - start
    size = (run / "report.html").stat().st_size
    loaded = _open(browser, run / "report.html")
    rows = _rows(browser)
    assert len(rows) == 200  # one page; the rest behind "show more"
    start = time.perf_counter()
    rows[0].click()
    drill = _drill(browser)
    opened = time.perf_counter() - start
    assert "reply 4" not in drill.text  # prompts are collapsed
    assert len(drill.find_elements(By.CSS_SELECTOR, "details.call")) == 5 * len(methods)
    start = time.perf_counter()
    _select(browser, "f-outcome", "lost")
    filtered = time.perf_counter() - start
    print(
        f"\n1000 questions x 6 methods: report.html {size / 1e6:.1f} MB written in {built:.1f} s; "
        f"page ready in {loaded:.2f} s; a question opened in {opened:.2f} s; "
        f"a filter applied in {filtered:.2f} s"
    )
    assert loaded < 15 and opened < 3 and filtered < 3
    assert browser.get_log("browser") == []
