"""The judge prompt and the verdict parser, as pure functions (spec 001 §4).

`judge_prompt` must be byte-exact, with the three truncations (question[:600], each criterion
[:260], response[:5000]); `parse_verdict` must read `total` from every form real judges produce
and return None (never 0) when there is nothing to read; `score` clamps total / rubric sum to
[0, 1] whatever the rubric sums to.
"""

from __future__ import annotations

import json

import pytest

from batchrun.protocol.dataset import RubricItem
from batchrun.protocol.grading import parse_verdict, points_json, score
from batchrun.protocol.prompts import JUDGE_REPLY_LINE, judge_prompt, judge_prompt_chars

REPLY_LINE = 'Reply JSON: {"points_awarded":[<pts>],"total":<sum>}'


def _marked(prefix: str, keep: int, extra: int) -> tuple[str, str]:
    """A text of keep+extra characters whose first `keep` characters end with a visible marker."""
    body = (prefix + " " + "x" * keep)[: keep - 4] + "<|>|"
    assert len(body) == keep
    return body + "DROPPED" + "y" * (extra - 7), body


# --- judge prompt ----------------------------------------------------------------------------


def test_judge_prompt_is_byte_exact_with_all_three_truncations() -> None:
    question, question_kept = _marked("Who {signed} the treaty, and when?", 600, 150)
    criterion, criterion_kept = _marked("Names {the} signatory", 260, 90)
    response, response_kept = _marked("The treaty was signed by {A. Ruiz}", 5000, 1200)
    assert len(question) == 750 and len(criterion) == 350 and len(response) == 6200
    rubric = [RubricItem(30, criterion), RubricItem(12.5, "Gives the date 4 May 1921"), RubricItem(7.5, "Says where")]

    prompt = judge_prompt(question, rubric, response)

    expected = (
        "STRICT grader. Only award points for SPECIFIC details present.\n"
        f"QUESTION: {question_kept}\n"
        "RUBRIC:\n"
        f"P1 (30pts): {criterion_kept}\n"
        "P2 (12.5pts): Gives the date 4 May 1921\n"
        "P3 (7.5pts): Says where\n"
        "RESPONSE:\n"
        f"{response_kept}\n"
        'Reply JSON: {"points_awarded":[<pts>],"total":<sum>}'
    )
    assert prompt == expected
    assert "DROPPED" not in prompt
    # Points are written as the dataset has them; the rubric sums to 50, not 100, and nothing rescales it.
    assert "(30pts)" in prompt and "(12.5pts)" in prompt and "100" not in prompt


def test_judge_prompt_keeps_short_texts_whole_and_rubric_in_order() -> None:
    rubric = [RubricItem(2, "second-listed? no: first"), RubricItem(1, "then this one"), RubricItem(40, "")]
    prompt = judge_prompt("Q?", rubric, "")
    assert prompt.split("\n") == [
        "STRICT grader. Only award points for SPECIFIC details present.",
        "QUESTION: Q?",
        "RUBRIC:",
        "P1 (2pts): second-listed? no: first",
        "P2 (1pts): then this one",
        "P3 (40pts): ",
        "RESPONSE:",
        "",
        REPLY_LINE,
    ]
    assert JUDGE_REPLY_LINE == REPLY_LINE


@pytest.mark.parametrize("response", ["", "x", "a\nb\r\n", "é" * 4999, "中" * 5000, "z" * 5001, "\U0001f600" + "y" * 7000, "\n" * 6000])
def test_judge_prompt_chars_is_the_length_of_the_prompt(response: str) -> None:
    """queue_judgments measures each judge prompt without building it."""
    question, rubric = "Q?\n" + "q" * 700, [RubricItem(2.5, "c" * 300), RubricItem(10, "短")]
    assert judge_prompt_chars(len(judge_prompt(question, rubric, "")), response) == len(judge_prompt(question, rubric, response))


def test_judge_prompt_truncation_counts_characters_not_bytes() -> None:
    question = "问" * 700
    response = "答" * 5001
    prompt = judge_prompt(question, [RubricItem(100, "准" * 300)], response)
    lines = prompt.split("\n")
    assert lines[1] == "QUESTION: " + "问" * 600
    assert lines[3] == "P1 (100pts): " + "准" * 260
    assert lines[5] == "答" * 5000


# --- parsing -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "total", "points"),
    [
        pytest.param('{"points_awarded":[30,12.5],"total":42.5}', 42.5, [30, 12.5], id="bare-json"),
        pytest.param('```json\n{"points_awarded": [30, 0], "total": 30}\n```', 30.0, [30, 0], id="fenced-json"),
        pytest.param('```\n{"points_awarded": [10], "total": 10}\n```', 10.0, [10], id="fenced-no-language"),
        pytest.param(
            'Let me grade this.\nP1 is present, P2 is missing.\n{"points_awarded": [60, 0], "total": 60}\nThat is my verdict.',
            60.0, [60, 0], id="text-around",
        ),
        pytest.param(
            'Grading:\n```json\n{"points_awarded": ["50", "35"], "total": "85"}\n```\nDone.', 85.0, ["50", "35"],
            id="fenced-with-text-and-strings",
        ),
        pytest.param('{"points_awarded": ["40", "45"], "total": "85"}', 85.0, ["40", "45"], id="numbers-as-strings"),
        pytest.param('{"total": " 7.25 "}', 7.25, None, id="string-with-spaces"),
        pytest.param('{"total": 0, "points_awarded": [0, 0]}', 0.0, [0, 0], id="a-real-zero"),
        pytest.param('{"points_awarded": [150], "total": 150}', 150.0, [150], id="above-sum-kept-raw"),
        pytest.param('{"points_awarded": [-5], "total": -5}', -5.0, [-5], id="negative-kept-raw"),
        pytest.param('{"points_awarded": [30, 20], "max_total": 50, "total": 20}', 20.0, [30, 20], id="total-beside-max_total"),
    ],
)
def test_parse_verdict_reads_total_in_every_form(reply: str, total: float, points: list | None) -> None:
    v = parse_verdict(reply)
    assert v.total == total
    assert isinstance(v.total, float)
    assert v.points_awarded == points
    assert v.error is None


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(None, id="none"),
        pytest.param("", id="empty"),
        pytest.param("   \n ", id="whitespace"),
        pytest.param("I think it is fine.", id="prose"),
        pytest.param('{"points_awarded": [30, 20]}', id="no-total-key"),
        pytest.param('{"points_awarded": [30], "total": null}', id="null-total"),
        pytest.param('{"points_awarded": [30], "total": "thirty"}', id="words-total"),
        pytest.param('{"points_awarded": [30], "total": true}', id="boolean-total"),
        pytest.param('{"points_awarded":[30,20],"total":', id="cut-off"),
        pytest.param('```json\n{"points_awarded": [<pts>], "total": <sum>}\n```', id="template-echo"),
        # Another key that merely contains "total" is not the verdict (library fix: whole-word match).
        pytest.param('{"points_awarded": [30, 20], "max_total": 50}', id="max_total-only"),
        pytest.param('Scores so far {"subtotal": 5', id="subtotal-only"),
    ],
)
def test_parse_verdict_unparseable_is_none_never_zero(reply: str | None) -> None:
    v = parse_verdict(reply)
    assert v.total is None
    assert v.error  # the reason is kept for the audit trail


# --- score -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("total", "rubric_total", "expected"),
    [
        (25, 50, 0.5),  # a rubric summing to 50 (30 + 20)
        (30, 50, 0.6),
        (12.5, 62.5, 0.2),  # float points
        (85, 100, 0.85),
        (50, 50, 1.0),
        (0, 50, 0.0),
        (51, 50, 1.0),  # above the sum: clamped
        (1000, 100, 1.0),
        (-5, 50, 0.0),  # below zero: clamped
        (-0.5, 100, 0.0),
    ],
)
def test_score_normalises_by_rubric_sum_and_clamps(total: float, rubric_total: float, expected: float) -> None:
    assert score(total, rubric_total) == pytest.approx(expected)
    assert 0.0 <= score(total, rubric_total) <= 1.0


def test_parse_then_score_of_string_total_on_odd_rubric() -> None:
    v = parse_verdict('Here you go: {"points_awarded": ["12.5", "0"], "total": "12.5"} -- end')
    assert v.total is not None
    assert score(v.total, 12.5 + 7.5) == pytest.approx(0.625)


@pytest.mark.parametrize("points", [[40, 0, 15], [], [12.5, 3], [1, True], ["7", None], [-3, 10**20]])
def test_points_json_is_json_for_what_it_was_given(points: list) -> None:
    assert json.loads(points_json(points)) == points
    assert points_json(None) is None


@pytest.mark.parametrize("reply", [
    '{"points_awarded":[0,0],"total":NaN}',
    '{"total":Infinity}',
    '{"total":-Infinity}',
    '{"total":"nan"}',
    '{"total":"inf"}',
    '{"total":1' + "0" * 400 + "}",
    'The total: 1' + "0" * 400,
    'total: 9e1 points',
], ids=["nan", "infinity", "minus-infinity", "nan-string", "inf-string", "overflows-json", "overflows-text", "exponent-text"])
def test_a_total_that_is_not_a_finite_plain_number_is_no_verdict(reply: str) -> None:
    # NaN is stored as NULL (the judge drops out of the mean), Infinity clamps to full marks,
    # and "9e1" read as 9 is a wrong score: none of them is a verdict (retried as unparseable).
    assert parse_verdict(reply).total is None


def test_a_reply_cut_at_the_budget_counts_only_a_whole_json_verdict() -> None:
    cut = 'Grading each point... {"points_awarded":[60,40],"total":1'
    assert parse_verdict(cut).total == 1.0  # read from the text when the reply is whole
    assert parse_verdict(cut, complete=False).total is None
    whole_then_cut = '{"points_awarded":[60,40],"total":100} Now, to explain my reasoning in det'
    assert parse_verdict(whole_then_cut, complete=False).total == 100.0
    assert parse_verdict("The total: 7.", complete=True).total == 7.0  # a sentence's full stop ends the number


def test_the_hashed_templates_describe_the_prompts_batchrun_sends() -> None:
    """GENERATION_TEMPLATE and JUDGE_TEMPLATE are what the policy fingerprints hash (a change
    re-plans or re-judges everything), while generation_prompt and judge_prompt build what is
    sent. Found by a review: an edit to a builder alone would have kept every old answer and
    judgment. Rendering each template by hand must give the builder's prompt, slices included,
    so a builder cannot change without its template (and so its hash)."""
    from batchrun.protocol.prompts import GENERATION_TEMPLATE, JUDGE_TEMPLATE, generation_prompt

    question, document = "When did {it} fail?", "Line one.\nLine two {x}."
    assert GENERATION_TEMPLATE.replace("{question}", question).replace("{document}", document) == generation_prompt(question, document)
    by_hand = (JUDGE_TEMPLATE.replace("{question[:600]}", "Q" * 600).replace("{points}", "40")
               .replace("{correct_criterion[:260]}", "C" * 260).replace("...\n", "").replace("{response[:5000]}", "R" * 5000))
    assert by_hand == judge_prompt("Q" * 700, [RubricItem(40, "C" * 300)], "R" * 6000)
