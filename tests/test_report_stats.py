"""The report's statistics on the hand-computed board of test_judging, through the CLI.

The board: three contestants (big, small, flaky), four tasks on two documents (t1-t3 on
short.txt, t4 on long.txt), two judges. Per task (0-1), All-tasks zero-filled:
  big   [0.9, 0.4, 0.75, 0.85]
  small [1.0, 0.9, 0.5,  0   ]  (t4 out of context)
  flaky [0.65, 0,  0,    0   ]  (t2 empty, t3 accepted, t4 refusal)
Two documents are fewer than an interval needs (stats.MIN_DOCUMENTS = 3): every interval is
"—" (not estimable), with the reason printed, and every paired test counts documents: by hand
below. (The intervals' arithmetic is checked in test_stats.py, and on the 8-document fixture in
test_report_fixture.py.)

flaky's accepted t3 makes its All-tasks not a protocol number (issue 26, spec 001 §5): a report
leaves it out of the pairs and groups unless --provisional, which the statistics below use (with
flaky's t3 counted 0, as its accepted_overall).
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import statistics as pystats
from typing import Any

import pytest
from test_judging import HAND, JUDGE_A, JUDGE_G, ORDER, board, results, run  # noqa: F401  (board is a fixture)

ALL = {"big": [0.9, 0.4, 0.75, 0.85], "small": [1.0, 0.9, 0.5, 0.0], "flaky": [0.65, 0.0, 0.0, 0.0]}
SCORED = {"big": [0.9, 0.4, 0.75, 0.85], "small": [1.0, 0.9, 0.5, None], "flaky": [0.65, None, None, None]}
SHORT, LONG = [0, 1, 2], [3]


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def doc_sums(diffs: list[float | None]) -> list[float]:
    """Each document's summed difference (short: t1-t3, long: t4), documents with none left out."""
    return [sum(diffs[i] for i in d if diffs[i] is not None) for d in (SHORT, LONG) if any(diffs[i] is not None for i in d)]


def brute_force_permutation_p(diffs: list[float]) -> float:
    obs = abs(sum(diffs))
    hits = sum(1 for signs in itertools.product((1, -1), repeat=len(diffs)) if abs(sum(s * d for s, d in zip(signs, diffs))) >= obs - 1e-12)
    return hits / 2 ** len(diffs)


@pytest.fixture(scope="module")
def report(board: Any) -> dict[str, Any]:  # noqa: F811
    project, s = board
    r = run(project, s, "report", "--format", "json", "--provisional")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_hand_values_agree_with_test_judging() -> None:
    for name in ORDER:
        assert [x for x in SCORED[name] if x is not None] == pytest.approx(list(HAND[name].values()))


def test_route_intervals_and_coverage(report: dict[str, Any]) -> None:
    st = report["statistics"]
    assert st["scale"].startswith("fractions 0-1")
    assert st["intervals"] | {} == {"unit": "document", "n_documents": 2, "n_tasks": 4, "confidence": 0.95, "min_documents": 3,
                                    "method": st["intervals"]["method"]}
    assert "CR2" in st["intervals"]["method"] and "Bell-McCaffrey" in st["intervals"]["method"]
    assert st["permutations"] == {"resamples": 10000, "seed": 20261130, "exact_up_to": 20, "unit": "document"}
    for name in ORDER:
        r = st["routes"][name]
        assert r["complete"] is True
        assert r["all_tasks"]["estimate"] == pytest.approx(mean(ALL[name]))
        assert (r["all_tasks"]["n"], r["all_tasks"]["n_documents"]) == (4, 2)
        scored = [x for x in SCORED[name] if x is not None]
        assert r["scored"]["estimate"] == pytest.approx(mean(scored)) and r["scored"]["n"] == len(scored)
        # Two documents (one for flaky's single scored task): not estimable, the estimate kept.
        for v in (r["all_tasks"], r["scored"]):
            assert v["low"] is None and v["high"] is None and v["se"] is None and v["df"] is None
    assert st["routes"]["flaky"]["scored"]["n_documents"] == 1
    assert st["routes"]["small"]["coverage"] == {"n_tasks": 4, "scored": 3, "out_of_context": 1, "failed": 0, "pending": 0,
                                                 "waiting": 0, "blocked": 0, "accepted": 0}
    assert st["provisional"] is True
    assert st["routes"]["flaky"]["coverage"] | {} == {"n_tasks": 4, "scored": 1, "out_of_context": 0, "failed": 2, "pending": 0,
                                                      "waiting": 0, "blocked": 0, "accepted": 1}


def test_pairwise_table_holm_and_groups(report: dict[str, Any]) -> None:
    pw = report["statistics"]["pairwise"]
    assert pw["routes"] == ORDER
    pairs = {(p["a"], p["b"]): p for p in pw["pairs"]}
    assert list(pairs) == [("big", "small"), ("big", "flaky"), ("small", "flaky")]
    # Documents by the sign of their summed difference (short: t1-t3, long: t4):
    # big - small: short -0.1 - 0.5 + 0.25 = -0.35 (lost), long +0.85 (won): 1/1/0, p = 1.
    # big - flaky: short +1.4, long +0.85: 2/0/0, p = 2/4. small - flaky: short +1.75, long 0 (a tie): 1/0/1, p = 1.
    expected_docs = {("big", "small"): (1, 1, 0, 1.0), ("big", "flaky"): (2, 0, 0, 0.5), ("small", "flaky"): (1, 0, 1, 1.0)}
    # Over tasks, as if independent (the secondary figure): the task wins, losses and ties and their sign test.
    expected_tasks = {("big", "small"): (2, 2, 0, 1.0), ("big", "flaky"): (4, 0, 0, 2 / 16), ("small", "flaky"): (3, 0, 1, 2 / 8)}
    for (a, b), p in pairs.items():
        v = p["all_tasks"]
        diffs = [x - y for x, y in zip(ALL[a], ALL[b])]
        assert (v["n"], v["n_documents"]) == (4, 2) and v["mean_diff"] == pytest.approx(mean(diffs), abs=1e-6)
        assert (v["wins"], v["losses"], v["ties"], v["sign_p"]) == pytest.approx(expected_docs[(a, b)])
        t = v["tasks"]
        assert (t["wins"], t["losses"], t["ties"], t["sign_p"]) == pytest.approx(expected_tasks[(a, b)], abs=5e-4)
        assert v["low"] is None and v["high"] is None  # two documents: not estimable
        assert v["permutation"]["method"] == "exact"
        assert v["permutation"]["n_nonzero"] == v["wins"] + v["losses"]
        assert v["permutation"]["p"] == pytest.approx(brute_force_permutation_p([d for d in doc_sums(diffs) if abs(d) > 1e-12]))
    assert pairs[("big", "flaky")]["all_tasks"]["permutation"]["p"] == 0.5  # flips of (+1.4, +0.85): 2 of 4 reach 2.25
    # Holm over the three sign p-values 1, 1/2, 1: 3 x 1/2 > 1.
    assert [pairs[k]["all_tasks"]["sign_p_holm"] for k in pairs] == [1.0, 1.0, 1.0]
    # Both scored: big and small share t1-t3 (one document); big and flaky only t1.
    bs = pairs[("big", "small")]["both_scored"]
    assert (bs["n"], bs["n_documents"], bs["wins"], bs["losses"], bs["ties"]) == (3, 1, 0, 1, 0)
    assert (bs["tasks"]["wins"], bs["tasks"]["losses"], bs["tasks"]["ties"]) == (1, 2, 0)
    assert bs["mean_diff"] == pytest.approx((-0.1 - 0.5 + 0.25) / 3, abs=1e-6) and bs["low"] is None
    bf = pairs[("big", "flaky")]["both_scored"]
    assert (bf["n"], bf["n_documents"], bf["mean_diff"], bf["sign_p"]) == pytest.approx((1, 1, 0.25, 1.0))
    # Nothing is told apart on two documents: one group, and the rule says why it cannot be otherwise.
    assert pw["groups"]["groups"] == [{"label": "A", "routes": ORDER}]
    assert "Holm-adjusted across all 3 pairs" in pw["groups"]["rule"] and "lies above 0" in pw["groups"]["rule"]
    assert "differ on fewer than 7 documents can never be told apart" in pw["groups"]["rule"]
    assert pw["few_documents"] | {} == {"interval_min_documents": 3, "reject_min_documents": 6, "reject_min_documents_holm": 7,
                                        "note": pw["few_documents"]["note"]}
    assert pw["tests"]["unit"] == "document" and "independent" in pw["tests"]["tasks"]


def test_breakdowns_judges_and_changes(report: dict[str, Any]) -> None:
    st = report["statistics"]
    dims = {d["dimension"]: d for d in st["breakdowns"]}
    assert set(dims) == {"language", "doc_length"}  # the board's records carry no categorical field
    (lang,) = dims["language"]["values"]
    assert (lang["value"], lang["n_tasks"], lang["n_documents"]) == ("non-CJK", 4, 2)
    assert lang["routes"]["small"]["all_tasks"]["estimate"] == pytest.approx(0.6)
    assert lang["routes"]["small"]["all_tasks"]["n_documents"] == 2 and lang["routes"]["small"]["all_tasks"]["low"] is None
    (length,) = dims["doc_length"]["values"]
    assert length["value"] == "<4k" and "<4k, 4k-16k" in dims["doc_length"]["rule"]

    j = st["judges"]
    # Per (route, task) scores of judge-a and judge-g, from test_judging's verdicts.
    a = [1.0, 1.0, 1.0, 1.0, 0.2, 0.7, 1.0, 0.6]
    g = [1.0, 0.8, 0.0, 0.8, 0.6, 0.8, 0.7, 0.7]
    judges = {x["judge"]: x for x in j["judges"]}
    assert judges["judge-a"]["model"] == JUDGE_A and judges["judge-g"]["model"] == JUDGE_G
    assert judges["judge-a"]["mean_score"] == pytest.approx(mean(a)) and judges["judge-g"]["mean_score"] == pytest.approx(mean(g))
    assert judges["judge-a"]["n_scored"] == 8 and judges["judge-a"]["attempts"] == 8 and judges["judge-a"]["retry_rate"] == 0
    (pair,) = j["agreement"]
    assert pair["n"] == 8
    assert pair["pearson"] == pytest.approx(pystats.correlation(a, g), abs=1e-6)
    assert pair["mean_abs_diff"] == pytest.approx(2.3 / 8)
    # Krippendorff's alpha (interval), two coders, no missing values: 1 - D_o / D_e by its definition.
    values = a + g
    n = len(values)
    d_o = sum(2 * (x - y) ** 2 for x, y in zip(a, g)) / n
    d_e = sum((x - y) ** 2 for x in values for y in values) / (n * (n - 1))
    assert j["krippendorff_alpha_interval"] == pytest.approx(1 - d_o / d_e, abs=1e-6) and j["alpha_units"] == 8
    spread = {s["route"]: s for s in j["spread_by_route"]}
    assert spread["small"]["judge_means"] == pytest.approx({"judge-a": 1.0, "judge-g": 0.6})
    assert spread["small"]["spread"] == pytest.approx(0.4) and spread["big"]["spread"] == pytest.approx(0.0)
    assert spread["flaky"]["n"] == 1 and spread["flaky"]["spread"] == pytest.approx(0.1)

    # The board ran refresh (flaky's t3 blocked), accept-failures, refresh: the last refresh changed one cell.
    c = st["changes"]
    assert c["previous"]["command"] == "refresh" and c["current"]["command"] == "refresh"
    assert c["reasons"] == {"accepted failure": 1}
    assert c["cells"] == [{"route": "flaky", "task_id": "t3", "reason": "accepted failure",
                           "before": {"status": "blocked", "score": None}, "after": {"status": "accepted", "score": None}}]
    moves = {r["route"]: r for r in c["routes"]}
    # Accepted failures leave All-tasks null (spec 001 §5): before (blocked) and after (accepted).
    assert moves["flaky"]["before"]["all_tasks_overall"] is None and moves["flaky"]["after"]["all_tasks_overall"] is None
    assert moves["big"]["delta_all_tasks"] == 0 and moves["big"]["cells_changed"] == 0


def test_report_md_and_csv_carry_intervals_coverage_and_groups(board: Any, report: dict[str, Any]) -> None:  # noqa: F811
    project, s = board
    md = run(project, s, "report").stdout
    rows = [ln for ln in md.splitlines() if ln.startswith("| ") and (ln[2].isdigit() or ln[2] == "—")]
    assert [ln.split("|")[2].strip() for ln in rows] == ORDER
    # Ranks only for the ranked routes: flaky's All-tasks is withheld (accepted failures), so its
    # place in the list is no rank (as on the site).
    assert [ln.split("|")[1].strip() for ln in rows] == ["1", "2", "—"]
    assert "| All-tasks 95% CI (0–100) | Scored 95% CI (0–100) | Group |" in md
    assert "| 72.5 | 72.5 (4) | 0 | 0 | 0 | — | — | A |" in rows[0]  # two documents: no interval
    assert "95% intervals: t intervals with the document as the unit" in md and "2 documents; \"—\": fewer than 3 documents" in md
    assert "| a | b | Δ All-tasks (95% CI) | docs | W/L/T | sign p | Holm p | perm. p |" in md
    assert "| big | small | +12.5 (—) | 2† | 1/1/0 | 1.00 | 1.00 | 1.00 (exact) | -11.7 (—) | 3 | 1† | 1.00 |" in md
    assert "† differs on fewer than 6 documents: no Holm-adjusted test can reach p < 0.05 on so few." in md
    # Breakdowns show documents beside tasks, and say why a cell has no interval.
    assert "| Route | non-CJK (4 tasks, 2 docs) |" in md and "| small | 60.0 (—) |" in md
    assert "—: not estimable: an interval needs at least 3 documents (non-CJK: 2)." in md
    assert "Statistically indistinguishable groups: A: big, small." in md
    assert "Since the refresh of" in md and "- flaky (kept): All-tasks — → — (—); 1 cell(s): accepted failure 1" in md
    assert "| — | — | — | no: 1 accepted failure(s) (All-tasks 16.2 with them as 0)" in rows[2]  # not ranked, no interval
    assert "Not protocol numbers: flaky (accepted infrastructure failures" in md and "report --provisional" in md
    provisional = run(project, s, "report", "--provisional").stdout
    assert "Statistically indistinguishable groups: A: big, small, flaky." in provisional and "This report is PROVISIONAL" in provisional
    assert "Judge panel: Krippendorff's alpha (interval)" in md

    rows = list(csv.DictReader(io.StringIO(run(project, s, "report", "--format", "csv", "--provisional").stdout)))
    big = rows[0]
    assert big["route"] == "big" and big["group"] == "A" and (big["all_tasks_documents"], big["scored_documents"]) == ("2", "2")
    assert big["all_tasks_low"] == big["all_tasks_high"] == ""  # not estimable on two documents
    assert rows[2]["scored_documents"] == "1"
    assert rows[2]["accepted_n"] == "1" and rows[1]["out_of_context_n"] == "1"
    assert list(rows[0])[-1] == "rehearsal"


def test_one_score_scale_per_medium_labelled_in_each(board: Any, report: dict[str, Any], tmp_path: Any) -> None:  # noqa: F811
    """Markdown and HTML: 0-100, said in the column headers; JSON, CSV (and state.db): 0-1, said
    in a `score_scale` field / column; the same score in each, only scaled."""
    project, s = board
    assert report["score_scale"] == "0-1"
    big = next(r for r in report["routes"] if r["route"] == "big")
    assert big["all_tasks_overall"] == pytest.approx(0.725) and big["score_scale"] == "0-1"
    assert results(project, "big", "scores")["score_scale"] == "0-1"
    md = run(project, s, "report").stdout
    assert "| # | Route | Model | All-tasks (0–100) | Scored (0–100) (n) |" in md
    assert next(ln for ln in md.splitlines() if ln.startswith("| 1 | big |")).split("|")[4].strip() == "72.5"
    rows = list(csv.DictReader(io.StringIO(run(project, s, "report", "--format", "csv").stdout)))
    assert {r["score_scale"] for r in rows} == {"0-1"} and float(rows[0]["all_tasks_overall"]) == pytest.approx(0.725)
    site = tmp_path / "site"
    assert run(project, s, "report", "--format", "html", "--out", str(site)).exit_code == 0
    index = (site / "index.html").read_text(encoding="utf-8")
    assert "All-tasks (0–100)" in index and "Scored (0–100) (n)" in index
    assert json.loads(run(project, s, "compare", "big", "small", "--json").stdout)["score_scale"] == "0-1"
    assert "in points, 0-100" in run(project, s, "compare", "big", "small").stdout
    # state.db: fractions, as documented in docs/schema.md.
    (row,) = project.sql("SELECT all_tasks_overall FROM leaderboard WHERE route = 'big'")
    assert row["all_tasks_overall"] == pytest.approx(0.725)

    # Seeded: the same settings give the same statistics; the settings asked for are recorded.
    again = json.loads(run(project, s, "report", "--format", "json", "--provisional").stdout)
    assert again["statistics"] == report["statistics"]
    other = json.loads(run(project, s, "report", "--format", "json", "--resamples", "500", "--seed", "7").stdout)
    assert (other["statistics"]["permutations"]["resamples"], other["statistics"]["permutations"]["seed"]) == (500, 7)


def test_compare_text_json_and_errors(board: Any) -> None:  # noqa: F811
    project, s = board
    r = run(project, s, "compare", "big", "small")
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert "big vs small (differences a − b in points, 0-100; the document is the unit of every interval and test)" in out
    assert "n = 4 tasks on 2 document(s)" in out and "mean difference +12.5 (95% CI —: fewer than 3 documents)" in out
    assert "documents won/lost/tied 1/1/0" in out and "sign test on documents (exact, two-sided) p = 1.00" in out
    assert "permutation test (sign flips of whole documents, exact over 2 documents that differ) p = 1.00" in out
    assert "secondary, treating tasks as independent: tasks won/lost/tied 2/2/0, sign test over tasks p = 1.00" in out
    assert "Tasks both scored (the tasks both routes scored): n = 3 tasks on 1 document(s)" in out
    assert "mean difference -11.7 (95% CI —: fewer than 3 documents)" in out
    assert "Note: every task: the routes differ on 2 document(s), fewer than 6: neither test can reach p < 0.05 on so few" in out

    # flaky has an accepted failure: compared only provisionally (issue 26).
    refused = run(project, s, "compare", "small", "flaky", "--json")
    assert refused.exit_code == 1 and "flaky has 1 accepted infrastructure failure(s)" in refused.stderr
    assert "--provisional" in refused.stderr and refused.stdout == ""
    j = json.loads(run(project, s, "compare", "small", "flaky", "--json", "--provisional").stdout)
    assert (j["a"], j["b"]) == ("small", "flaky")
    assert j["all_tasks"]["mean_diff"] == pytest.approx(mean([0.35, 0.9, 0.5, 0.0]))
    assert (j["all_tasks"]["wins"], j["all_tasks"]["losses"], j["all_tasks"]["ties"], j["all_tasks"]["sign_p"]) == (1, 0, 1, 1.0)
    assert j["all_tasks"]["tasks"] == {"wins": 3, "losses": 0, "ties": 1, "sign_p": 0.25}
    assert j["all_tasks"]["permutation"] == {"p": 1.0, "method": "exact", "n_nonzero": 1, "resamples": None, "seed": None}
    assert j["headline"]["flaky"] == {"all_tasks_overall": None, "accepted_overall": pytest.approx(0.1625),
                                      "scored_overall": pytest.approx(0.65), "complete": True}
    assert j["intervals"]["min_documents"] == 3 and j["permutations"]["unit"] == "document" and j["tests"]["unit"] == "document"
    assert j["provisional"] is True and j["rehearsal"] == s.emu.url
    assert j["notes"][0].startswith("PROVISIONAL: flaky has 1 accepted infrastructure failure(s)")
    assert all("document" in n for n in j["notes"][1:]) and len(j["notes"]) == 5

    bad = run(project, s, "compare", "big", "nobody")
    assert bad.exit_code == 1 and "'nobody' is not a contestant route" in bad.stderr and "small, big, flaky" in bad.stderr  # config order
    same = run(project, s, "compare", "big", "big")
    assert same.exit_code == 1 and "two different routes" in same.stderr
    judge = run(project, s, "compare", "big", "judge-a")
    assert judge.exit_code == 1 and "not a contestant route" in judge.stderr


def test_grouping_rule_needs_the_sign_test_and_the_interval_to_agree() -> None:
    """On document counts and the document interval (the JSON's figures)."""
    from batchrun.publish.analysis import distinct

    base = {"sign_p_holm": 0.001, "wins": 30, "losses": 10, "low": 0.01, "high": 0.05}
    assert distinct(base, 0.05)
    assert distinct(base | {"wins": 10, "losses": 30, "low": -0.05, "high": -0.01}, 0.05)  # the other way round
    assert not distinct(base | {"sign_p_holm": 0.06}, 0.05)  # sign test not significant after Holm
    assert not distinct(base | {"low": -0.01}, 0.05)  # interval includes 0
    # A higher mean (interval above 0) but most differing tasks lost: contradictory, not told apart.
    assert not distinct(base | {"wins": 10, "losses": 30}, 0.05)
    assert not distinct(base | {"sign_p_holm": None}, 0.05) and not distinct(base | {"low": None, "high": None}, 0.05)
