"""The benchmarks' yardsticks on tiny inputs (bench/ is run by hand; these keep its new pieces
honest): the protocol floor of bench/ingest.py writes the rows the protocol asks for, and
bench/startup.py's import figures add up. Nothing here is timed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from batchrun.protocol.grading import parse_verdict

from conftest import Project, small_project

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCH))


def test_protocol_floor_writes_a_row_per_line_verdict_and_answer_x_judge(bench: None, project: Project, tmp_path: Path) -> None:
    from _lines import Lines, write_result_files
    from _protocol_floor import plain_verdict, protocol_floor, read_inputs
    from ingest import judge_prompt_chars

    small_project(project)
    assert project.run("plan").exit_code == 0
    state = project.state_path
    inputs = read_inputs(state, judge_prompt_chars(state))
    assert len(inputs.judges) >= 2 and inputs.ddl
    gen = sorted((cid, task) for cid, (stage, task) in inputs.stage_task.items() if stage == "gen")
    lines = Lines(seed=1, answer_pool=5)
    kinds = ["ok", "refusal", "empty", "transient", "invalid"]
    out, valid = [], []
    for i, (cid, _) in enumerate(gen):
        kind = kinds[i] if i < len(kinds) else "ok"
        out.append(lines.line("openai", "gpt-5.5", cid, kind, lines.answer() if kind == "ok" else None, 1000))
        if kind == "ok":
            valid.append(cid)
    # Verdicts of the answers' judges: bare, fenced, with prose, unparseable, and a transient error.
    task_of = dict(gen)
    for k in range(5):
        jid = f"j-test-{k}"
        inputs.stage_task[jid] = ("judge", task_of[valid[0]])
        if k == 4:
            out.append(lines.line("openai", "gpt-5.1", jid, "transient", None, 1000))
        else:
            out.append(lines.line("openai", "gpt-5.1", jid, "ok", lines.verdict([60, 40], parseable=k != 3), 1000))
    files = write_result_files(tmp_path / "batch", "openai", out)
    inputs.files = [[("r.responses.json", {"answers": ["中文", 1.5, None]})], [("r.scores.json", {"overall": 0.5})]]

    run = protocol_floor({"b1": files}, inputs, tmp_path / "floor.db", tmp_path / "results")
    assert run.rows == {"results": len(out), "judgments": 4, "requests": len(valid) * len(inputs.judges)}
    assert run.files == 2
    assert run.bytes == sum(len((json.dumps(d, ensure_ascii=False) + "\n").encode()) for night in inputs.files for _, d in night)
    assert set(run.parts) == {"start-ups", "rows", "files"} and run.seconds >= sum(run.parts.values()) * 0.99
    assert not (tmp_path / "floor.db").exists() and not (tmp_path / "results").exists()  # cleaned up

    # The plain parse reads the same total as batchrun's on every shape the benchmark writes.
    for k in range(40):
        text = lines.verdict([50, 30, 20], parseable=k % 10 != 0)
        assert plain_verdict(text)[0] == parse_verdict(text).total


def test_import_cpu_records_the_sdks_a_command_loaded(bench: None, tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    done = subprocess.run([sys.executable, str(BENCH / "_import_cpu.py"), str(out), "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["sdks"] == []  # --help loads no provider SDK
    assert 0 < report["imports"] <= report["cpu"] and "batchrun" in report["packages"]


def _report(cpu: float, packages: dict[str, float], sdks: list[str]) -> dict[str, Any]:
    return {"cpu": cpu, "imports": sum(packages.values()), "packages": packages, "sdks": sdks, "wall": cpu + 0.1, "rc": 0}


def test_startup_figures_count_the_sdks_apart(bench: None, capsys: pytest.CaptureFixture[str]) -> None:
    import startup

    rounds = [{"refresh": _report(1.0, {"openai": 0.3, "batchrun": 0.1}, ["openai"]), "status": _report(0.1, {"batchrun": 0.05}, [])}]
    startup.print_single_provider(rounds)
    text = capsys.readouterr().out
    assert "loads only the SDK of the provider its routes use (openai) or none: met" in text
    assert [line.split()[-3:] for line in text.splitlines() if line.startswith(("refresh", "status"))] == [
        ["0.10", "openai", "0"], ["0.05", "none", "0"]]
    startup.print_single_provider([{"status": _report(0.1, {"batchrun": 0.05}, ["anthropic"])}])
    assert "MISSED (status: anthropic)" in capsys.readouterr().out

    share = startup.print_demos([_report(4.0, {"anthropic": 1.0, "openai": 0.4, "google": 0.2, "batchrun": 0.2, "numpy": 0.2}, [])])
    text = capsys.readouterr().out
    assert share == pytest.approx(0.5)
    assert "the three SDKs 1.60 s (40% of its CPU); everything else 0.40 s (10% of its CPU; 17% of its CPU less the SDKs' imports)" in text
    assert "batchrun's own 0.20 s (5%); the SDKs' imports alone are above the 35% target" in text
    assert "its CPU in imports would be 44%" in text  # 1.6 / (4.0 - 2.0 + 1.6)
