"""The static site (`report --format html`, and results/site/ after refresh and demo).

Its content is checked in the HTML, and the pages are opened in a real headless Chromium
(Debian's `chromium`, installed by .ci/run where it can be) through file://, checking that the
DOM holds the leaderboard rows and the SVG plots. Without chromium those tests are skipped with
a message saying so.
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from test_judging import JUDGE_A, JUDGE_G, ORDER, Script, board, refresh, run, script, verdict  # noqa: F401

from batchrun.cli import cli
from batchrun.publish.html import task_slugs
from conftest import Project, route, task

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
needs_chromium = pytest.mark.skipif(
    not Path(CHROMIUM).exists(),
    reason="Debian's chromium is not installed (apt-get install -y chromium; .ci/run installs it where it can): "
           "the site was not opened in a browser",
)


def dump_dom(path: Path) -> str:
    """The DOM after Chromium has loaded the page from the file system."""
    with tempfile.TemporaryDirectory(prefix="batchrun-chromium-") as profile:
        out = subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--no-first-run", "--disable-sync", f"--user-data-dir={profile}",
             "--dump-dom", path.resolve().as_uri()],
            capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


@pytest.fixture(scope="module")
def board_site(board: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    project, s = board
    out = tmp_path_factory.mktemp("site") / "site"
    r = run(project, s, "report", "--format", "html", "--out", str(out))
    assert r.exit_code == 0, r.output
    assert r.stdout == "" and f"wrote {out / 'index.html'}" in r.stderr
    return out


def test_index_holds_every_section_and_links_every_task(board_site: Path) -> None:
    html = (board_site / "index.html").read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>") and "Content-Security-Policy" in html and "default-src 'none'" in html
    assert "<script" not in html and not re.search(r'(src|href)="(https?:)?//', html)  # nothing to run, nothing remote
    assert re.findall(r'<tr class="route-row" data-route="([^"]+)"', html) == ORDER
    for section in ("leaderboard", "pairwise", "breakdowns", "judges", "changes", "provenance", "tasks"):
        assert f'<section id="{section}">' in html
    assert html.count('<svg class="ivbar"') == 3 and html.count('<svg class="covbar"') == 3
    assert html.count('<svg class="heatmap"') == 4  # pairwise matrix, language, length, judge spread
    assert "Scores are 0–100" in html
    # Two documents: no interval anywhere ("—", and the leaderboard's note says why); the tables show the
    # documents compared and mark a pair that differs on too few documents for any test to reject.
    assert '<b>72.5</b><span class="ci">—</span>' in html and "fewer than 3 documents leave an interval not estimable" in html
    assert '<td class="num">2†</td><td class="num">1/1/0</td>' in html  # big vs small: 2 documents, one won, one lost
    assert "† the two routes differ on fewer than 6 documents: no Holm-adjusted test can reach p &lt; 0.05" in html
    assert "non-CJK (4 tasks, 2 docs)" in html and '<th scope="col" class="num">tasks</th><th scope="col" class="num">docs</th>' in html
    assert "secondary, tasks as if independent: W/L/T 2/2/0" in html  # the task-level figure, labelled
    assert "Statistically indistinguishable groups</h3>" in html and "Krippendorff" in html
    assert "accepted failure 1" in html  # since the last refresh
    for t in ("t1", "t2", "t3", "t4"):
        assert f'<a href="tasks/{t}.html">{t}</a>' in html
        assert (board_site / "tasks" / f"{t}.html").exists()
    assert (board_site / ".batchrun-site").exists()


def test_task_pages_show_answers_verdicts_and_why_there_is_none(board_site: Path) -> None:
    t4 = (board_site / "tasks" / "t4.html").read_text(encoding="utf-8")
    assert "What does the long document say?" in t4
    assert "big says: answer to t4." in t4
    # big's judges on t4: judge-a 100/100, judge-g 70/100.
    rows = re.findall(r'<tr class="verdict-row"><th scope="row">([^<]+)</th><td class="num">([^<]+)</td><td class="num"><b>([^<]+)</b>', t4)
    assert rows == [("judge-a", "100.00 / 100.00", "100.0"), ("judge-g", "70.00 / 100.00", "70.0")]
    assert "Not sent: the document (" in t4 and "longer than the route&#x27;s en cap (1,000 characters)" in t4
    assert "The model refused (finish reason SAFETY)" in t4
    t3 = (board_site / "tasks" / "t3.html").read_text(encoding="utf-8")
    assert "accepted by the maintainer&#x27;s decision (t3 rejected by the provider): not the model&#x27;s failure" in t3
    assert "invalid request for t3" in t3
    t2 = (board_site / "tasks" / "t2.html").read_text(encoding="utf-8")
    assert "The model returned an empty answer" in t2
    t1 = (board_site / "tasks" / "t1.html").read_text(encoding="utf-8")
    assert "Alpha fact" in t1 and "GOLD ANSWER" not in t1  # the rubric is shown, the gold answer is not
    assert '<a href="../index.html">' in t1


def test_the_site_folder_is_rewritten_and_a_foreign_folder_refused(board: Any, board_site: Path, tmp_path: Path) -> None:  # noqa: F811
    project, s = board
    stale = board_site / "tasks" / "gone.html"
    stale.write_text("old", encoding="utf-8")
    assert run(project, s, "report", "--format", "html", "--out", str(board_site)).exit_code == 0
    assert not stale.exists() and (board_site / "tasks" / "t1.html").exists()
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me", encoding="utf-8")
    r = run(project, s, "report", "--format", "html", "--out", str(foreign))
    assert r.exit_code == 1 and "not written by batchrun report --format html" in r.stderr
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]
    r = run(project, s, "report", "--format", "html")
    assert r.exit_code == 1 and "Pass --out DIR" in r.stderr


def test_refresh_writes_the_site_to_results_and_prints_its_path(board: Any) -> None:  # noqa: F811
    project, _ = board
    index = project.results_dir / "site" / "index.html"
    assert index.exists()
    html = index.read_text(encoding="utf-8")
    assert re.findall(r'data-route="([^"]+)"><td', html) == ORDER


def test_task_slugs_are_safe_and_unique() -> None:
    slugs = task_slugs(["t1", "a/b", "a_b", "A_B", "../x", "wt-0001.v2"])
    assert slugs["t1"] == "t1" and slugs["wt-0001.v2"] == "wt-0001.v2"
    assert re.fullmatch(r"a_b-[0-9a-f]{10}", slugs["a/b"]) and re.fullmatch(r"a_b-[0-9a-f]{10}", slugs["a_b"])
    assert slugs["a/b"] != slugs["a_b"] != slugs["A_B"]
    assert "/" not in slugs["../x"] and not slugs["../x"].startswith(".")
    assert len({s.lower() for s in slugs.values()}) == len(slugs)


# --- untrusted text is escaped ---------------------------------------------------------------------

EVIL = '<script>alert("x")</script><img src=x onerror=alert(1)> & \'quoted\''
EVIL_Q = "Which <b>valve</b> & why?"


def test_answers_questions_and_verdicts_are_escaped(project: Project, script: Script) -> None:  # noqa: F811
    project.doc("plant.txt", "Valve V-17 was closed at 05:40.\n")
    project.tasks([task("x<1>", EVIL_Q, "plant.txt", [(60, "Names <V-17>"), (40, "Gives 05:40")])])
    project.config(routes={"gpt": route("openai", "gpt-5.5"), "judge-a": route("anthropic", JUDGE_A),
                           "judge-g": route("gemini", JUDGE_G)})
    script.answers[("gpt-5.5", EVIL_Q)] = EVIL
    script.verdicts[(JUDGE_A, EVIL)] = "<i>judge</i> </script>\n" + verdict(60, [60, 0])
    script.verdicts[(JUDGE_G, EVIL)] = verdict(100, [60, 40])
    r = refresh(project, script)
    assert r.exit_code == 0, r.output
    assert f"site: {project.results_dir / 'site' / 'index.html'}" in r.stderr
    site = project.results_dir / "site"
    pages = sorted(site.rglob("*.html"))
    assert len(pages) == 3  # the index, the route's page, the task's
    for page in pages:
        text = page.read_text(encoding="utf-8")
        assert "<script" not in text and "</script" not in text and "<img" not in text and "<b>valve" not in text
        assert "<i>judge" not in text
    (task_page,) = (site / "tasks").glob("*.html")
    assert re.fullmatch(r"x_1_-[0-9a-f]{10}\.html", task_page.name)
    text = task_page.read_text(encoding="utf-8")
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt; &amp; &#x27;quoted&#x27;" in text
    assert "Which &lt;b&gt;valve&lt;/b&gt; &amp; why?" in text and "Names &lt;V-17&gt;" in text
    assert "&lt;i&gt;judge&lt;/i&gt; &lt;/script&gt;" in text
    index = (site / "index.html").read_text(encoding="utf-8")
    assert f'href="tasks/{task_page.name}"' in index and "x&lt;1&gt;" in index


# --- in a real browser -----------------------------------------------------------------------------


@needs_chromium
def test_chromium_renders_the_leaderboard_rows_plots_and_a_task_page(board_site: Path) -> None:
    dom = dump_dom(board_site / "index.html")
    assert re.findall(r'<tr class="route-row" data-route="([^"]+)"', dom) == ORDER
    for plot in ("ivbar", "covbar", "heatmap"):
        assert f'<svg class="{plot}"' in dom, plot
    # One All-tasks dot per ranked route: flaky's accepted failure leaves it unranked, marked (issue 26).
    assert len(re.findall(r"<circle [^>]*class=\"est\"", dom)) == 2
    flaky = re.search(r'<tr class="route-row" data-route="flaky">.*?</tr>', dom, re.S)
    assert flaky and 'class="nonprotocol"' in flaky.group(0) and "not a protocol number" in flaky.group(0)
    assert dom.count('<tr class="task-row">') == 4
    task = dump_dom(board_site / "tasks" / "t4.html")
    assert "What does the long document say?" in task and "big says: answer to t4." in task
    assert task.count('class="verdict-row"') == 2
    assert re.findall(r'<div class="route" id="[^"]+" data-route="([^"]+)"', task) == ORDER


# --- the demo's site, and the Datasette metadata on its state.db -------------------------------------


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    folder = tmp_path_factory.mktemp("demo") / "demo"
    r = CliRunner().invoke(cli, ["demo", "--dir", str(folder)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return folder, r


def test_demo_writes_its_site_with_every_dataset_field_as_a_breakdown(demo: tuple[Path, Any]) -> None:
    folder, r = demo
    index = folder / "results" / "site" / "index.html"
    assert f"site:     {index}" in r.stderr
    html = index.read_text(encoding="utf-8")
    assert len(re.findall(r'<tr class="route-row"', html)) == 5
    dims = re.findall(r'data-dimension="([^"]+)"', html)
    assert dims == ["language", "doc_length", "field:language", "field:category", "field:paradigm", "field:difficulty"]
    assert len(list((folder / "results" / "site" / "tasks").glob("*.html"))) == 30
    assert "Breakdowns by dataset field (language, category, paradigm, difficulty)" in r.stdout


@needs_chromium
def test_demo_site_in_chromium(demo: tuple[Path, Any]) -> None:
    folder, _ = demo
    dom = dump_dom(folder / "results" / "site" / "index.html")
    assert len(re.findall(r'<tr class="route-row"', dom)) == 5 and dom.count('<svg class="heatmap"') == 8


METADATA = Path(__file__).resolve().parent.parent / "batchrun" / "datasette-metadata.json"


def test_datasette_metadata_names_only_what_a_fresh_state_db_has(tmp_path: Path) -> None:
    from batchrun.ledger.store import Store

    Store(tmp_path / "state.db").close()
    conn = sqlite3.connect(tmp_path / "state.db")
    names = {r[0]: r[1] for r in conn.execute("SELECT name, type FROM sqlite_master WHERE type IN ('table', 'view')")}
    meta = json.loads(METADATA.read_text(encoding="utf-8"))
    (db,) = meta["databases"].values()
    assert list(meta["databases"]) == ["state"]  # Datasette names a database after its file: state.db
    for view in ("leaderboard", "cell_status", "request_status", "batch_summary", "cost"):
        assert names.get(view) == "view" and db["tables"][view]["description"], view
    for name, table in db["tables"].items():
        assert name in names, name
        columns = {r[1] for r in conn.execute(f"PRAGMA table_info({name})")}
        assert set(table.get("columns", {})) <= columns, (name, set(table["columns"]) - columns)
        assert table["title"] and table["description"]
    assert set(db["queries"]) == {"leaderboard_as_reported", "scores_after_expired_retry", "cost_last_night",
                                  "attempts_of_a_cell", "failed_batches"}
    conn.close()


def test_datasette_canned_queries_are_the_readme_audit_queries_and_run_on_the_demo(demo: tuple[Path, Any]) -> None:
    folder, _ = demo
    meta = json.loads(METADATA.read_text(encoding="utf-8"))
    queries = meta["databases"]["state"]["queries"]
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    audit = readme.split("Audit queries:", 1)[1].split("```", 2)[1]
    for q in queries.values():
        sql = " ".join(q["sql"].split())
        assert sql.replace(":id", "") in " ".join(audit.split()).replace('"', " ").replace(":id", ""), q["title"]
    conn = sqlite3.connect(folder / "state.db")
    custom_id = conn.execute("SELECT custom_id FROM results LIMIT 1").fetchone()[0]
    got = {name: conn.execute(q["sql"], {"id": custom_id}).fetchall() for name, q in queries.items()}
    assert len(got["leaderboard_as_reported"]) == 5 and got["attempts_of_a_cell"]
    conn.close()


def test_help_does_not_import_numpy() -> None:
    code = ("import sys\nfrom batchrun.cli import cli\nfrom click.testing import CliRunner\n"
            "for args in (['--help'], ['report', '--help'], ['compare', '--help']):\n"
            "    assert CliRunner().invoke(cli, args).exit_code == 0\n"
            "print('numpy' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
