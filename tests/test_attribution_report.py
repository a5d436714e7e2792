"""The HTML attribution report: escaping, per-step label classes, summary figures, the CLI."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from langgraph_evolver.attribution.report import write_attribution_report
from langgraph_evolver.types import Action, Step, Task, ToolCall, ToolObservation, Trajectory, write_jsonl

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = "<script>alert('pwned')</script>"


def _call_step(index: int, name: str, args: dict, result: str, *, is_error: bool = False) -> Step:
    call = ToolCall(name=name, arguments=args, id=f"c{index}")
    obs = ToolObservation(call_id=f"c{index}", name=name, content=result, is_error=is_error)
    return Step(index=index, action=Action(tool_calls=(call,)), observations=(obs,))


def _answer_step(index: int, text: str) -> Step:
    return Step(index=index, action=Action(content=text))


def _labels(*pairs: tuple[str, str]) -> tuple[dict, ...]:
    return tuple({"step": i, "label": label, "reason": reason} for i, (label, reason) in enumerate(pairs))


def _trajectories() -> list[Trajectory]:
    success = Trajectory(
        id="t-ok",
        task=Task(id="task-ok", query="What is Lea's phone number?", metadata={"answer": "555-734"}),
        steps=(
            _call_step(0, "search_contacts", {"query": "Lea"}, '[{"phone": "555-734"}]'),
            _answer_step(1, "555-734"),
        ),
        reward=1.0,
        group_id="g-ok",
        labels=_labels(("GOOD", "found the contact"), ("GOOD", "answered with the number")),
    )
    failed = Trajectory(
        id="t-fail",
        task=Task(id="task-fail", query="Email Bob & <Ann> the agenda"),
        steps=(
            _call_step(0, "search_contacts", {"query": "Bob"}, '[{"email": "bob@x.org"}]'),
            _call_step(1, "send_mail", {"to": "ann"}, f"Error: no such contact {SCRIPT}", is_error=True),
            _call_step(2, "search_contacts", {"query": "Ann"}, "[]"),
            _answer_step(3, "done"),
        ),
        reward=0.25,
        group_id="g-fail",
        labels=_labels(
            ("GOOD", "looked Bob up first"),
            ("BAD", "guessed an address instead of <searching>"),
            ("GOOD", "recovered by searching"),
            ("BAD", "claimed success without sending"),
        ),
        errors=("tool send_mail failed",),
    )
    fallback = Trajectory(
        id="t-nolabels",
        task=Task(id="task-nolabels", query="List my meetings"),
        steps=(_answer_step(0, "none"),),
        reward=0.0,
        group_id="g-nl",
        labels=None,
    )
    return [success, failed, fallback]


def _block(page: str, task_id: str) -> str:
    """The ``<details>`` block of one trajectory."""
    match = re.search(rf"<details[^>]*>(?:(?!</details>).)*{re.escape(task_id)}.*?</details>", page, re.S)
    assert match, f"no block for {task_id}"
    return match.group(0)


def _figure(page: str, element_id: str) -> str:
    match = re.search(rf'id="{element_id}">([^<]*)<', page)
    assert match, element_id
    return match.group(1)


def test_report_escapes_text_and_marks_labels(tmp_path: Path) -> None:
    out = write_attribution_report(_trajectories(), tmp_path / "sub" / "report.html", title="Run <7>")
    assert out == tmp_path / "sub" / "report.html" and out.exists()
    page = out.read_text(encoding="utf-8")

    assert SCRIPT not in page and "<script" not in page
    assert "&lt;script&gt;alert(&#x27;pwned&#x27;)&lt;/script&gt;" in page
    assert "Email Bob &amp; &lt;Ann&gt; the agenda" in page
    assert "instead of &lt;searching&gt;" in page
    assert "<title>Run &lt;7&gt;</title>" in page

    ok, failed, nolabels = _block(page, "task-ok"), _block(page, "task-fail"), _block(page, "task-nolabels")
    assert re.findall(r'<tr class="step (\w+)"', ok) == ["good", "good"]
    assert re.findall(r'<tr class="step (\w+)"', failed) == ["good", "bad", "good", "bad"]
    assert re.findall(r'<tr class="step (\w+)"', nolabels) == ["none"]
    # The error observation is highlighted; tool calls read like calls.
    assert '<div class="obs error"><pre>send_mail → Error: no such contact &lt;script' in failed
    assert "search_contacts(query=&quot;Lea&quot;)" in ok
    assert '<pre class="answer">answer: done</pre>' in failed
    # Failed trajectories come first and open; the successful one is collapsed.
    assert page.index("task-fail") < page.index("task-ok") and page.index("task-nolabels") < page.index("task-ok")
    assert failed.startswith('<details class="trajectory fail" open>')
    assert ok.startswith('<details class="trajectory success">')


def test_report_summary_figures(tmp_path: Path) -> None:
    page = write_attribution_report(
        _trajectories(), tmp_path / "r.html", metrics={"judge": "fake", "eval": {"success": 0.5}}
    ).read_text(encoding="utf-8")
    # Successful: 2 GOOD of 2 labelled. Failed: 2 GOOD of 4 labelled (the unlabelled one adds none).
    assert _figure(page, "good-share-success") == "100.0% (2/2)"
    assert _figure(page, "good-share-failed") == "50.0% (2/4)"
    assert _figure(page, "fallbacks") == "1"
    assert "<tr><td>trajectories</td><td>3</td></tr>" in page
    assert "<tr><td>steps</td><td>7</td></tr>" in page
    assert "<tr><td>eval.success</td><td>0.5</td></tr>" in page
    assert "<tr><td>judge</td><td>fake</td></tr>" in page


def test_report_trims_and_caps(tmp_path: Path) -> None:
    long = Trajectory(
        id="t-long",
        task=Task(id="task-long", query="q"),
        steps=(_call_step(0, "read", {}, "x" * 5000),),
        reward=0.0,
    )
    many = [Trajectory(id=f"t{i}", task=Task(id=f"task-{i}", query="q"), reward=1.0) for i in range(10)]
    page = write_attribution_report([long, *many], tmp_path / "r.html", max_trajectories=3, max_observation_chars=50)
    html_text = page.read_text(encoding="utf-8")
    assert "x" * 51 not in html_text and "(+4950 chars)" in html_text
    assert html_text.count("<details") == 3 and "Showing 3 of 11 trajectories" in html_text
    assert "<tr><td>trajectories</td><td>11</td></tr>" in html_text


def test_cli_renders_jsonl(tmp_path: Path) -> None:
    src = tmp_path / "trajectories.jsonl"
    write_jsonl(src, _trajectories())
    out = tmp_path / "report.html"
    proc = subprocess.run(
        [sys.executable, "-m", "langgraph_evolver.attribution.report", str(src), "-o", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    page = out.read_text(encoding="utf-8")
    assert _figure(page, "good-share-failed") == "50.0% (2/4)"
    assert page.count("<details") == 3 and "&lt;script&gt;" in page
