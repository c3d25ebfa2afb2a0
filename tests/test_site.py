"""The static site (`report --format html`, and results/site/ after refresh and demo).

Its content is checked in the HTML, and the pages are opened in a real headless Chromium
(Debian's `chromium`, installed by .ci/run where it can be) through file://, one browser per
width (1280 and 390 px), driven over the DevTools pipe (tests/browser.py): what a person sees at
that width, the links they click, the keyboard's focus; screenshots are left under the test's
temporary folder. Without chromium those tests are skipped with a message saying so.
"""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from test_judging import JUDGE_A, JUDGE_G, ORDER, Script, board, refresh, run, script, verdict  # noqa: F401

from batchrun.cli import cli
from batchrun.publish.html import task_slugs
from browser import CHROMIUM, Browser
from conftest import Project, route, task

needs_chromium = pytest.mark.skipif(
    not Path(CHROMIUM).exists(),
    reason="Debian's chromium is not installed (apt-get install -y chromium; .ci/run installs it where it can): "
           "the site was not opened in a browser",
)


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



def _route_page(site: Path, route: str) -> str:
    return (site / "routes" / f"{route}.html").read_text(encoding="utf-8")


def test_each_route_has_a_page_with_its_headline_breakdowns_failures_cost_provenance_and_tasks_by_score(board_site: Path) -> None:
    """Issue 29 item 13: the leaderboard's route links open the route's page."""
    index = (board_site / "index.html").read_text(encoding="utf-8")
    for name in ORDER:
        assert f'<th scope="row" class="name"><a href="routes/{name}.html">{name}</a>' in index
    assert sorted(p.name for p in (board_site / "routes").iterdir()) == ["big.html", "flaky.html", "small.html"]

    big = _route_page(board_site, "big")
    # The headline: the leaderboard's row, its interval ("—": 2 documents), coverage as text.
    assert '<tr class="route-row" data-route="big"><td class="num rank" data-label="#, group">1 ' in big
    assert '<b>72.5</b><span class="ci">—</span>' in big and "4 scored" in big
    # Breakdowns: tasks and documents beside each value, "—" where not estimable.
    language = re.search(r'<div class="breakdown" data-dimension="language">.*?</table>', big, re.S)
    assert language and '<th scope="row">non-CJK</th><td class="num">4</td><td class="num">2</td><td class="num"><b>72.5</b><span class="ci">—</span>' in language.group(0)
    assert "None: every task has a score." in big
    # Its cost by stage, and its provenance (the same block as on the index).
    cost = re.search(r'<section id="cost">.*?</section>', big, re.S)
    assert cost and [s for s in re.findall(r'<tr><th scope="row">([^<]+)</th>', cost.group(0))] == \
        ["generation", "judging its answers", "preflights"]
    assert "unknown" in cost.group(0) and "$0.00" not in cost.group(0)  # no price in this config: unknown, never $0
    block = re.search(r'<div class="route" id="route-big">.*?</div>', index, re.S)
    assert block and block.group(0) in big
    # Tasks by score, best first (by hand: t1 90, t4 85, t3 75, t2 40), each linked to its page.
    assert re.findall(r'<tr class="route-task" data-task="([^"]+)"><th scope="row"><a href="../tasks/\1.html">', big) == ["t1", "t4", "t3", "t2"]
    assert re.findall(r'data-task="t1">.*?<span class="sq"[^>]*>([^<]+)</span></td><td class="q">[^<]+</td><td class="num">([^<]+)</td>'
                      r'<td class="num">([^<]+)</td>', big) == [("90.0", "100.0", "80.0")]  # the task's score, its question, each judge's

    flaky = _route_page(board_site, "flaky")
    failures = re.findall(r'<tr class="unscored-row"><th scope="row"><a href="../tasks/(t\d).html">\1</a></th><td><span class="status [a-z]+">([a-z ]+)</span></td><td>([^<]+)</td>', flaky)
    assert [(t, st) for t, st, _ in failures] == [("t2", "empty"), ("t3", "accepted"), ("t4", "refusal")]
    assert "The model refused (finish reason SAFETY)" in failures[2][2] and "t3 rejected by the provider" in failures[1][2]
    assert "Not yet: breakdowns are of complete routes" in flaky  # unranked: its accepted failure
    # The "not protocol" mark's hover title, as text on the page, where the index's mark links.
    assert '<p class="nonprotocol-why" id="why"><span class="nonprotocol">not protocol</span> custom protocol' in flaky
    assert '<a class="nonprotocol" href="routes/flaky.html#why" title="custom protocol' in index
    assert re.findall(r'data-task="(t\d)"', flaky) == ["t1", "t2", "t4", "t3"]  # scored, failed, then accepted
    small = _route_page(board_site, "small")
    assert re.findall(r'data-task="(t\d)"', small) == ["t1", "t2", "t3", "t4"]  # 100, 90, 50, then out of context
    assert "Not sent: the document (1,811 characters) is longer than the route&#x27;s en cap (1,000 characters)" in small


def test_task_pages_show_the_question_the_document_and_what_each_route_saw(board_site: Path) -> None:
    """Issue 29 item 14: the document, collapsed, with its length and the part each model saw."""
    t4 = (board_site / "tasks" / "t4.html").read_text(encoding="utf-8")
    assert '<section id="question"><h2>Question</h2><div class="question">What does the long document say?</div>' in t4
    assert "<dt>length</dt><dd>1,811 characters · non-CJK</dd>" in t4
    seen = dict(re.findall(r'<tr><th scope="row"><a href="../routes/\w+.html">(\w+)</a></th><td class="num">[\d,]+</td><td>([^<]+)</td>', t4))
    assert seen == {"big": "the whole document, in its prompt", "small": "nothing: longer than its cap, not sent",
                    "flaky": "the whole document, in its prompt"}
    text = re.search(r'<details class="document"><summary>The document: 1,811 characters</summary>.*?<div class="doctext" tabindex="0">(.*?)</div></details>', t4, re.S)
    assert text and text.group(1).startswith("Long fact. Filler sentence") and len(text.group(1)) == 1811  # whole: short enough
    assert "The whole document, as sent to the routes that saw it (sha256 " in t4


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



def test_a_long_document_shows_its_beginning_and_a_changed_or_missing_one_says_why(project: Project, script: Script) -> None:  # noqa: F811
    """A page shows at most 20,000 characters of a document (they run to 2.85 M), with the length;
    a document edited or deleted since it was sent is not shown as if it were the one sent."""
    text = "".join(f"Line {i:05d}: the valve log reads nominal.\n" for i in range(1200))
    assert len(text) == 49_200
    project.doc("log.txt", text)
    project.tasks([task("t1", "What does the valve log read?", "log.txt")])
    project.config(routes={"gpt": route("openai", "gpt-5.5"), "judge-a": route("anthropic", JUDGE_A),
                           "judge-g": route("gemini", JUDGE_G)})
    script.answers[("gpt-5.5", "What does the valve log read?")] = "Nominal."
    script.verdicts[(JUDGE_A, "Nominal.")] = script.verdicts[(JUDGE_G, "Nominal.")] = verdict(100, [60, 40])
    r = refresh(project, script)
    assert r.exit_code == 0, r.output
    page = project.results_dir / "site" / "tasks" / "t1.html"
    html = page.read_text(encoding="utf-8")
    assert "<summary>The document: 49,200 characters, the first 20,000 shown</summary>" in html
    shown = re.search(r'<div class="doctext" tabindex="0">(.*?)</div>', html, re.S)
    assert shown and shown.group(1) == text[:20_000] + "…"
    assert "The first 20,000 of 49,200 characters" in html and "<code>log.txt</code> in the corpus folder" in html
    assert len(html.encode()) < 40_000  # the page stays small: not the whole document

    out = project.root / "site"
    (project.root / "corpus" / "log.txt").write_text(text + "An edit after the run.\n", encoding="utf-8")
    assert run(project, script, "report", "--format", "html", "--out", str(out)).exit_code == 0
    html = (out / "tasks" / "t1.html").read_text(encoding="utf-8")
    assert "has changed since it was sent" in html and "its text is not the document the models saw" in html
    assert 'class="doctext"' not in html and "Line 00000" not in html
    (project.root / "corpus" / "log.txt").unlink()
    assert run(project, script, "report", "--format", "html", "--out", str(out)).exit_code == 0
    html = (out / "tasks" / "t1.html").read_text(encoding="utf-8")
    assert "log.txt is not in the corpus folder" in html and "<dt>length</dt><dd>49,200 characters · non-CJK</dd>" in html



class _Tables(HTMLParser):
    """Each table's first child element and caption text, and every <th>'s scope."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[dict[str, Any]] = []
        self.scopes: list[str | None] = []
        self._open: list[dict[str, Any]] = []
        self._in_caption = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._open and self._open[-1]["first"] is None:
            self._open[-1]["first"] = tag
        if tag == "table":
            self._open.append({"first": None, "caption": "", "id": dict(attrs).get("id")})
            self.tables.append(self._open[-1])
        elif tag == "caption":
            self._in_caption = True
        elif tag == "th":
            self.scopes.append(dict(attrs).get("scope"))

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self._open.pop()
        elif tag == "caption":
            self._in_caption = False

    def handle_data(self, data: str) -> None:
        if self._in_caption:
            self._open[-1]["caption"] += data


def test_every_table_has_a_caption_and_scoped_headers_and_every_heatmap_cell_a_keyboard_and_table_equivalent(board_site: Path) -> None:
    """Issue 29 item 16, on every page of the site (the browser checks the same below)."""
    pages = sorted(board_site.rglob("*.html"))
    assert len(pages) == 1 + 3 + 4  # the index, a page per route and per task
    for page in pages:
        html = page.read_text(encoding="utf-8")
        parsed = _Tables()
        parsed.feed(html)
        assert parsed.tables, page
        for table in parsed.tables:
            assert table["first"] == "caption" and table["caption"].strip(), (page.name, table)
        assert parsed.scopes and set(parsed.scopes) <= {"col", "row"}, (page.name, set(parsed.scopes))
        # A heatmap's hover titles: each cell with a value is focusable and named by its title,
        # and the plot names the table holding its figures.
        for svg in re.findall(r'<svg class="heatmap".*?</svg>', html, re.S):
            table_id = re.search(r'aria-details="([^"]+)"', svg.split(">", 1)[0])
            assert table_id, svg[:200]
            table = re.search(rf'<table id="{table_id.group(1)}">.*?</table>', html, re.S)
            assert table, table_id.group(1)
            cells = re.findall(r'<g class="hcell" tabindex="0" role="img" aria-label="([^"]+)"><title>([^<]+)</title>.*?'
                               r'class="cell"[^>]*>([^<]*)</text></g>', svg, re.S)
            assert cells and all(label == title for label, title, _ in cells)
            for _, _, value in cells:
                assert value.strip("*-") in table.group(0), (table_id.group(1), value)
    index = (board_site / "index.html").read_text(encoding="utf-8")
    assert index.count('<svg class="heatmap"') == 4 and 'aria-details="pairs-table"' in index
    assert 'aria-details="judge-spread-table"' in index and 'aria-details="breakdown-0-table"' in index


# --- in a real browser -----------------------------------------------------------------------------


# The browser tests are after the demo's fixture: they open its site and the board's.


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
    # The rules' Markdown code spans are <code> on the site, not backticks shown as text.
    route_page = (folder / "results" / "site" / "routes" / "gpt-5.5.html").read_text(encoding="utf-8")
    for field in ("language", "category", "paradigm", "difficulty"):
        assert f'<p class="note">dataset field <code>{field}</code> (every dataset field' in html
        assert f"Dataset field: {field}: dataset field <code>{field}</code> (every dataset field" in route_page
    assert "`" not in html and "`" not in route_page


def test_code_spans_are_escaped_first_then_made_code() -> None:
    """A rule quotes a dataset field's name, which is the user's text: it is escaped before its
    backticks become <code>, so markup in it stays text."""
    from batchrun.publish.html import code_spans

    assert (code_spans('dataset field `<img src=x onerror=alert(1)>` & `a"b` (rule)')
            == 'dataset field <code>&lt;img src=x onerror=alert(1)&gt;</code> &amp; <code>a&quot;b</code> (rule)')
    assert code_spans("no code, a lone ` tick") == "no code, a lone ` tick"



def test_a_route_page_shows_what_the_route_cost_as_batchrun_cost_counts_it(demo: tuple[Path, Any]) -> None:
    """The demo's routes have prices: the page's actual spend per stage is state.db's, in dollars."""
    from batchrun.ledger.cost import fmt_money

    folder, _ = demo
    conn = sqlite3.connect(folder / "state.db")
    try:
        gen = conn.execute("SELECT sum(actual_cost) FROM cost WHERE route = 'gpt-5.5' AND stage = 'gen'").fetchone()[0]
        judging = conn.execute(
            """SELECT sum(res.cost) FROM results res JOIN requests j ON j.custom_id = res.custom_id AND j.stage = 'judge'
               JOIN requests g ON g.custom_id = j.parent_custom_id WHERE g.route = 'gpt-5.5'""").fetchone()[0]
    finally:
        conn.close()
    assert gen > 0 and judging > 0
    html = (folder / "results" / "site" / "routes" / "gpt-5.5.html").read_text(encoding="utf-8")
    actual = dict(re.findall(r'<tr><th scope="row">([a-z ]+)</th>(?:<td class="num">[^<]*</td>){6}<td class="num"><b>([^<]+)</b></td></tr>', html))
    assert actual["generation"] == fmt_money(gen) and actual["judging its answers"] == fmt_money(judging)

# Every table, on every page the test opens: a non-empty caption, and scope on every header.
TABLES_OK = ("[...document.querySelectorAll('table')].every(t => t.caption && t.caption.textContent.trim() !== '') && "
             "[...document.querySelectorAll('th')].every(th => th.scope === 'col' || th.scope === 'row')")
# A task table's question reads in lines of a few words, not one word a line (at 390 px the
# route and judge columns squeezed it to a word's width; the table scrolls sideways instead).
QUESTION_WIDTHS = "[...document.querySelectorAll('td.q')].map(td => td.getBoundingClientRect().width)"
QUESTIONS_READ = f"(() => {{ const w = {QUESTION_WIDTHS}; return w.length === 30 && Math.min(...w) >= 180; }})()"
# No horizontal scroll of the page. (On a phone the layout viewport widens to what overflows:
# innerWidth is not the screen's width then, the screen is.)
FITS = "document.documentElement.scrollWidth <= {width} && innerWidth === {width}"


@needs_chromium
@pytest.mark.parametrize("width", [1280, 390])
def test_site_in_chromium(width: int, board_site: Path, demo: tuple[Path, Any], tmp_path: Path) -> None:
    """The demo's site and the board's, in one headless Chromium at a desktop's and a phone's
    width (issue 29 items 13-16): the leaderboard fits the screen (at 390 px, one card per route:
    plot and coverage in view, nav links all visible), tables have captions and scoped headers,
    heatmap cells take the keyboard's focus, a route's page opens by clicking its name and a
    task's page by clicking the task there, and the task's document opens from its <details>.

    Screenshots for a reviewer: <tmp_path>/shots/*.png, that is (pytest's default base folder)
    /tmp/pytest-of-$USER/pytest-current/test_site_in_chromium_1280_0/shots/ and .../test_site_in_chromium_390_0/shots/:
    index.png (what the screen shows first), index-full.png (the page's top 4,000 px), focus.png
    (a focused heatmap cell), route.png (a route's page) and task.png (a task's document, opened)."""
    shots = tmp_path / "shots"
    shots.mkdir()
    fits = FITS.format(width=width)
    site = demo[0] / "results" / "site"
    with Browser(width=width) as b:
        # --- the leaderboard (items 15, 16) ---
        b.open(site / "index.html")
        assert b.eval(fits), b.eval("[innerWidth, document.documentElement.scrollWidth]")
        assert b.eval("document.querySelectorAll('tr.route-row').length") == 5
        assert b.eval("document.querySelectorAll('svg.heatmap').length") == 8
        # Each route's interval plot and coverage bar lie on the screen, drawn wide enough to read,
        # and the leaderboard needs no scroll of its own.
        boxes = b.eval("[...document.querySelectorAll('tr.route-row svg.ivbar:not(.axis), tr.route-row svg.covbar')].map(s => "
                       "{ const r = s.getBoundingClientRect(); return [r.left, r.right, r.width]; })")
        assert len(boxes) == 10 and all(left >= 0 and right <= width and w >= 100 for left, right, w in boxes), boxes
        assert b.eval("(() => { const s = document.querySelector('table.leaderboard').parentElement; "
                      "return s.scrollWidth <= s.clientWidth; })()")
        # The numbers the plots' hover titles carry are text beside them, visible.
        assert b.eval("[...document.querySelectorAll('tr.route-row td.all, tr.route-row td.scored, tr.route-row td.cov .ci')]"
                      ".every(el => el.getBoundingClientRect().width > 0 && el.textContent.trim() !== '')")
        nav = b.eval("[...document.querySelectorAll('nav a')].map(a => { const r = a.getBoundingClientRect(); "
                     "return [a.textContent, r.left, r.right]; })")
        assert len(nav) == 7 and all(left >= 0 and right <= width for _, left, right in nav), nav
        if width < 700:  # stacked: a card per route, the plot below the name across the card
            assert b.eval("getComputedStyle(document.querySelector('tr.route-row')).display") == "grid"
        # Each row (each card, at 390 px) says "provider · model" under the route's name, on the screen.
        models = b.eval("[...document.querySelectorAll('tr.route-row th.name .model')].map(m => { const r = m.getBoundingClientRect(); "
                        "return [m.textContent, m.checkVisibility(), r.left >= 0 && r.right <= innerWidth && r.height > 0]; })")
        assert len(models) == 5 and all(" · " in text and seen and inside for text, seen, inside in models), models
        assert b.eval(QUESTIONS_READ), b.eval(QUESTION_WIDTHS)
        b.screenshot(shots / "index.png")
        b.screenshot(shots / "index-full.png", full_page=True)
        assert b.eval(TABLES_OK)
        # A heatmap cell takes the focus (and shows it), the Tab key moves on to the next, and
        # the plot names the table with the same figures.
        b.eval("document.querySelector('#pairwise g.hcell').focus()")
        assert b.eval("document.activeElement === document.querySelector('#pairwise g.hcell')")
        assert b.eval("getComputedStyle(document.activeElement.querySelector('rect')).strokeWidth") == "3px"
        assert "every task zero-filled" in b.eval("document.activeElement.getAttribute('aria-label')")
        b.screenshot(shots / "focus.png")
        b.press_tab()
        assert b.eval("document.activeElement.matches('#pairwise g.hcell') && "
                      "document.activeElement !== document.querySelector('#pairwise g.hcell')")
        assert b.eval("[...document.querySelectorAll('svg.heatmap')].every(s => "
                      "document.getElementById(s.getAttribute('aria-details'))?.tagName === 'TABLE')")

        # --- a route's page, opened by clicking its name (item 13) ---
        b.click("tr.route-row:nth-child(2) th.name a")
        assert b.url().endswith("/routes/qwen3.7-plus.html") and b.eval("document.querySelector('h1').textContent") == "Route qwen3.7-plus"
        assert b.eval("['headline', 'breakdowns', 'failures', 'cost', 'provenance', 'tasks'].every(id => document.getElementById(id))")
        scores = b.eval("[...document.querySelectorAll('tr.route-task .sq')].map(x => parseFloat(x.textContent))")
        assert len(scores) == 30 and scores == sorted(scores, reverse=True)
        assert b.eval(fits) and b.eval(TABLES_OK)
        assert b.eval("document.querySelectorAll('#breakdowns .breakdown').length") == 6
        assert b.eval(QUESTIONS_READ), b.eval(QUESTION_WIDTHS)
        # ... and on the screen beside the task and its score, the judges' columns after it.
        assert b.eval("document.querySelector('tr.route-task td.q').getBoundingClientRect().right") <= width
        b.screenshot(shots / "route.png")

        # --- the best task's page, opened from there, and its document (item 14) ---
        task = b.eval("document.querySelector('tr.route-task').dataset.task")
        b.click("tr.route-task th a")
        assert b.url().endswith(f"/tasks/{task}.html") and b.eval(fits) and b.eval(TABLES_OK)
        assert b.eval("document.querySelector('#question .question').textContent.length") > 20
        assert b.eval("document.querySelector('details.document').open") is False
        assert b.eval("document.querySelector('.doctext').checkVisibility()") is False  # collapsed
        b.click("details.document summary", navigates=False)
        assert b.eval("document.querySelector('details.document').open") is True
        assert b.eval("document.querySelector('.doctext').checkVisibility()") is True
        box = b.eval("(() => { const r = document.querySelector('.doctext').getBoundingClientRect(); return [r.left, r.right, r.height]; })()")
        assert box[0] >= 0 and box[1] <= width and box[2] > 50 and b.eval(fits)
        b.eval("document.querySelector('details.document').scrollIntoView()")
        b.screenshot(shots / "task.png")

        # --- the board's site: failures, refusals, an unranked route ---
        b.open(board_site / "index.html")
        dom = b.eval("document.documentElement.outerHTML")
        assert re.findall(r'<tr class="route-row" data-route="([^"]+)"', dom) == ORDER
        assert len(re.findall(r"<circle [^>]*class=\"est\"", dom)) == 2  # one dot per ranked route: flaky is unranked
        flaky = re.search(r'<tr class="route-row" data-route="flaky">.*?</tr>', dom, re.S)
        assert flaky and 'class="nonprotocol"' in flaky.group(0) and "not a protocol number" in flaky.group(0)
        assert dom.count('<tr class="task-row">') == 4 and b.eval(fits) and b.eval(TABLES_OK)
        b.click('tr.route-row[data-route="flaky"] th.name a')
        assert b.url().endswith("/routes/flaky.html") and b.eval(fits)
        assert b.eval("[...document.querySelectorAll('tr.unscored-row th')].map(x => x.textContent)") == ["t2", "t3", "t4"]
        b.click('tr.unscored-row:last-child th a')
        assert b.url().endswith("/tasks/t4.html") and b.eval(fits)
        dom = b.eval("document.documentElement.outerHTML")
        assert "What does the long document say?" in dom and "big says: answer to t4." in dom
        assert dom.count('class="verdict-row"') == 2
        assert re.findall(r'<div class="route" id="[^"]+" data-route="([^"]+)"', dom) == ORDER


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
