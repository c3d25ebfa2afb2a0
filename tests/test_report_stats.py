"""The report's statistics on the hand-computed board of test_judging, through the CLI.

The board: three contestants (big, small, flaky), four tasks on two documents (t1-t3 on
short.txt, t4 on long.txt), two judges. Per task (0-1), All-tasks zero-filled:
  big   [0.9, 0.4, 0.75, 0.85]
  small [1.0, 0.9, 0.5,  0   ]  (t4 out of context)
  flaky [0.65, 0,  0,    0   ]  (t2 empty, t3 accepted, t4 refusal)
With two documents a bootstrap resample holds short twice, short and long, or long twice
(probabilities 1/4, 1/2, 1/4), so each 95% interval runs from the smaller to the larger of the
two one-document means: computed by hand below.

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


def doc_interval(values: list[float | None]) -> tuple[float, float]:
    """[min, max] of the mean over short twice, short+long, long twice (undefined ones dropped)."""
    means = []
    for docs in (SHORT + SHORT, SHORT + LONG, LONG + LONG):
        xs = [values[i] for i in docs if values[i] is not None]
        if xs:
            means.append(mean(xs))
    return min(means), max(means)


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
    assert st["bootstrap"] | {} == {"resamples": 2000, "seed": 20261130, "unit": "document", "n_documents": 2, "n_tasks": 4,
                                    "confidence": 0.95, "method": "percentile", "rng": st["bootstrap"]["rng"]}
    for name in ORDER:
        r = st["routes"][name]
        assert r["complete"] is True
        lo, hi = doc_interval(ALL[name])
        assert r["all_tasks"]["estimate"] == pytest.approx(mean(ALL[name]))
        assert (r["all_tasks"]["low"], r["all_tasks"]["high"]) == pytest.approx((lo, hi), abs=1e-6)
        scored = [x for x in SCORED[name] if x is not None]
        lo, hi = doc_interval(SCORED[name])
        assert r["scored"]["estimate"] == pytest.approx(mean(scored)) and r["scored"]["n"] == len(scored)
        assert (r["scored"]["low"], r["scored"]["high"]) == pytest.approx((lo, hi), abs=1e-6)
    assert st["routes"]["big"]["all_tasks"]["low"] == pytest.approx((0.9 + 0.4 + 0.75) / 3, abs=1e-6)
    assert (st["routes"]["small"]["all_tasks"]["low"], st["routes"]["small"]["all_tasks"]["high"]) == pytest.approx((0.0, 0.8), abs=1e-6)
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
    expected_sign = {("big", "small"): (2, 2, 0, 1.0), ("big", "flaky"): (4, 0, 0, 2 / 16), ("small", "flaky"): (3, 0, 1, 2 / 8)}
    for (a, b), p in pairs.items():
        v = p["all_tasks"]
        diffs = [x - y for x, y in zip(ALL[a], ALL[b])]
        assert v["n"] == 4 and v["mean_diff"] == pytest.approx(mean(diffs), abs=1e-6)
        assert (v["wins"], v["losses"], v["ties"], v["sign_p"]) == pytest.approx(expected_sign[(a, b)])
        assert (v["low"], v["high"]) == pytest.approx(doc_interval(diffs), abs=1e-6)
        assert v["permutation"]["method"] == "exact"
        assert v["permutation"]["p"] == pytest.approx(brute_force_permutation_p([d for d in diffs if d]))
    # Holm over the three all-tasks sign p-values 1, 1/8, 1/4: 3 x 1/8 = 0.375, 2 x 1/4 = 0.5, 1.
    assert [pairs[k]["all_tasks"]["sign_p_holm"] for k in pairs] == pytest.approx([1.0, 0.375, 0.5])
    # Both scored: big and small share t1-t3; big and flaky only t1.
    bs = pairs[("big", "small")]["both_scored"]
    assert (bs["n"], bs["wins"], bs["losses"], bs["ties"]) == (3, 1, 2, 0)
    assert bs["mean_diff"] == pytest.approx((-0.1 - 0.5 + 0.25) / 3, abs=1e-6)
    assert (bs["low"], bs["high"]) == pytest.approx(((-0.1 - 0.5 + 0.25) / 3,) * 2, abs=1e-6)  # long has no pair
    bf = pairs[("big", "flaky")]["both_scored"]
    assert (bf["n"], bf["mean_diff"], bf["sign_p"]) == pytest.approx((1, 0.25, 1.0))
    # Nothing is told apart with four tasks: one group, and the rule is stated.
    assert pw["groups"]["groups"] == [{"label": "A", "routes": ORDER}]
    assert "Holm-adjusted across all 3 pairs" in pw["groups"]["rule"] and "lies above 0" in pw["groups"]["rule"]


def test_breakdowns_judges_and_changes(report: dict[str, Any]) -> None:
    st = report["statistics"]
    dims = {d["dimension"]: d for d in st["breakdowns"]}
    assert set(dims) == {"language", "doc_length"}  # the board's records carry no categorical field
    (lang,) = dims["language"]["values"]
    assert (lang["value"], lang["n_tasks"], lang["n_documents"]) == ("non-CJK", 4, 2)
    assert lang["routes"]["small"]["all_tasks"]["estimate"] == pytest.approx(0.6)
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
    rows = [ln for ln in md.splitlines() if ln.startswith("| ") and ln[2].isdigit()]
    assert [ln.split("|")[2].strip() for ln in rows] == ORDER
    assert "| All-tasks 95% CI (0–100) | Scored 95% CI (0–100) | Group |" in md
    assert "| 68.3–85.0 | 68.3–85.0 | A |" in rows[0]
    assert "| 0.0–80.0 | 80.0–80.0 | A |" in rows[1]
    assert "| — | — | — | no: 1 accepted failure(s) (All-tasks 16.2 with them as 0)" in rows[2]  # not ranked, no interval
    assert "Scores are 0-100. 95% intervals: percentile bootstrap over documents" in md and "2000 resamples, seed 20261130" in md
    assert "| big | small | +12.5 (-11.7 to +85.0) | 2/2/0 | 1.000 | 1.000 |" in md
    assert "Statistically indistinguishable groups: A: big, small." in md
    assert "Not protocol numbers: flaky (accepted infrastructure failures" in md and "report --provisional" in md
    assert "Since the refresh of" in md and "- flaky (kept): All-tasks — → — (—); 1 cell(s): accepted failure 1" in md
    provisional = run(project, s, "report", "--provisional").stdout
    assert "Statistically indistinguishable groups: A: big, small, flaky." in provisional and "This report is PROVISIONAL" in provisional
    assert "Judge panel: Krippendorff's alpha (interval)" in md

    rows = list(csv.DictReader(io.StringIO(run(project, s, "report", "--format", "csv", "--provisional").stdout)))
    big = rows[0]
    assert big["route"] == "big" and big["group"] == "A" and (big["bootstrap_resamples"], big["bootstrap_seed"]) == ("2000", "20261130")
    assert float(big["all_tasks_low"]) == pytest.approx(0.683333, abs=1e-6) and float(big["all_tasks_high"]) == pytest.approx(0.85)
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
    assert (other["statistics"]["bootstrap"]["resamples"], other["statistics"]["bootstrap"]["seed"]) == (500, 7)


def test_compare_text_json_and_errors(board: Any) -> None:  # noqa: F811
    project, s = board
    r = run(project, s, "compare", "big", "small")
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert "big vs small (differences a − b in points, 0-100)" in out
    assert "mean difference +12.5 (95% CI -11.7 to +85.0)" in out
    assert "wins/losses/ties 2/2/0" in out and "sign test (exact, two-sided) p = 1.000" in out
    assert "Tasks both scored (the tasks both routes scored): n = 3" in out and "mean difference -11.7 (95% CI -11.7 to -11.7)" in out
    assert "paired percentile bootstrap over 2 documents, 2000 resamples, seed 20261130" in out

    # flaky has an accepted failure: compared only provisionally (issue 26).
    refused = run(project, s, "compare", "small", "flaky", "--json")
    assert refused.exit_code == 1 and "flaky has 1 accepted infrastructure failure(s)" in refused.stderr
    assert "--provisional" in refused.stderr and refused.stdout == ""
    j = json.loads(run(project, s, "compare", "small", "flaky", "--json", "--provisional").stdout)
    assert (j["a"], j["b"]) == ("small", "flaky")
    assert j["all_tasks"]["mean_diff"] == pytest.approx(mean([0.35, 0.9, 0.5, 0.0]))
    assert (j["all_tasks"]["wins"], j["all_tasks"]["losses"], j["all_tasks"]["ties"], j["all_tasks"]["sign_p"]) == (3, 0, 1, 0.25)
    assert j["all_tasks"]["permutation"] == {"p": 0.25, "method": "exact", "n_nonzero": 3, "resamples": None, "seed": None}
    assert j["headline"]["flaky"] == {"all_tasks_overall": None, "accepted_overall": pytest.approx(0.1625),
                                      "scored_overall": pytest.approx(0.65), "complete": True}
    assert j["provisional"] is True and j["rehearsal"] == s.emu.url
    assert len(j["notes"]) == 1 and j["notes"][0].startswith("PROVISIONAL: flaky has 1 accepted infrastructure failure(s)")

    bad = run(project, s, "compare", "big", "nobody")
    assert bad.exit_code == 1 and "'nobody' is not a contestant route" in bad.stderr and "big, small, flaky" in bad.stderr
    same = run(project, s, "compare", "big", "big")
    assert same.exit_code == 1 and "two different routes" in same.stderr
    judge = run(project, s, "compare", "big", "judge-a")
    assert judge.exit_code == 1 and "not a contestant route" in judge.stderr


def test_grouping_rule_needs_the_sign_test_and_the_interval_to_agree() -> None:
    from batchrun.analysis import distinct

    base = {"sign_p_holm": 0.001, "wins": 30, "losses": 10, "low": 0.01, "high": 0.05}
    assert distinct(base, 0.05)
    assert distinct(base | {"wins": 10, "losses": 30, "low": -0.05, "high": -0.01}, 0.05)  # the other way round
    assert not distinct(base | {"sign_p_holm": 0.06}, 0.05)  # sign test not significant after Holm
    assert not distinct(base | {"low": -0.01}, 0.05)  # interval includes 0
    # A higher mean (interval above 0) but most differing tasks lost: contradictory, not told apart.
    assert not distinct(base | {"wins": 10, "losses": 30}, 0.05)
    assert not distinct(base | {"sign_p_holm": None}, 0.05) and not distinct(base | {"low": None, "high": None}, 0.05)
