"""The built-in rules find a model however it is spelled, and never mistake one version for another.

One normalisation (caps.normalise_model) serves the caps table (spec §3), the list of models that
reject temperature (§2) and the judge/contestant model comparison (§4). Matching is exact on the
normalised form: a near miss must fall back to the default row (a warning), never to a neighbour's.
"""

from __future__ import annotations

import re

import pytest

from batchrun.protocol import caps as capslib

# The paper's caps table (spec §3), written out here independently of batchrun.protocol.caps.
PAPER = {
    **{m: (2_850_000, 850_000) for m in (
        "gpt-4.1", "gpt-5.4", "gpt-5.5", "qwen3.5-plus", "qwen3.6-plus", "qwen3.7-max", "qwen3.7-plus",
        "gemini-2.5-pro", "gemini-3.1", "deepseek-v4", "glm-5.2", "claude-opus-4.6", "claude-opus-4.8")},
    "deepseek-v3.2": (1_200_000, 400_000),
    "gpt-5.1": (1_050_000, 320_000),
    "kimi-k2.6": (1_000_000, 320_000),
    "doubao-seed-2.1": (1_000_000, 320_000),
    "qwen3-max": (690_000, 210_000),
    "minimax-m2.7": (570_000, 220_000),
}
# Spec §2: temperature is omitted for these.
REJECTS = ("claude-opus-4.6", "claude-opus-4.8", "gpt-5.4")


def spellings(model: str) -> list[str]:
    """How providers, routers and clouds write the same model."""
    hyphenated = re.sub(r"(?<=\d)\.(?=\d)", "-", model)
    out = []
    for base in dict.fromkeys((model, hyphenated)):
        out += [
            base, base.upper(), f"  {base} ",
            f"models/{base}", f"openai/{base}", f"anthropic/{base}", f"google/{base}", f"qwen/{base}",
            f"accounts/fireworks/models/{base}", f"mr.{base}", f"us.anthropic.{base}",
            # Gateway colon prefixes (issue 26), alone and with the other prefix forms.
            f"openai:{base}", f"anthropic:{base}", f"azure-openai:{base}", f"vertex_ai:{base}@20260217",
            f"bedrock:us.anthropic.{base}-v1:0", f"openrouter/openai:{base}", f"litellm:models/{base}-2026-03-05",
            f"{base}-20260217", f"{base}-2026-03-05", f"{base}@20260217", f"{base}@latest", f"{base}-latest",
            f"{base}-260217", f"{base}-20260217-v1:0", f"mr.{base}-20260217",
        ]
    return out


CASES = [(model, spelling) for model in PAPER for spelling in spellings(model)]


@pytest.mark.parametrize("model,spelling", CASES, ids=[s.strip() for _, s in CASES])
def test_every_paper_model_is_found_in_every_spelling(model: str, spelling: str) -> None:
    assert capslib.normalise_model(spelling) == model
    caps = capslib.builtin_caps(spelling)
    assert caps is not None and (caps.en, caps.cjk, caps.source) == (*PAPER[model], "paper table")
    assert capslib.rejects_temperature(spelling) is (model in REJECTS)
    assert capslib.known_model(spelling)
    assert capslib.same_model(spelling, model)


# The ids of the issue, as the providers list them.
REAL_IDS = [
    ("claude-opus-4-6", "claude-opus-4.6", True),
    ("claude-opus-4-6-20260217", "claude-opus-4.6", True),
    ("mr.claude-opus-4.6", "claude-opus-4.6", True),
    ("anthropic/claude-opus-4.6", "claude-opus-4.6", True),
    ("claude-opus-4-8@20260301", "claude-opus-4.8", True),
    ("anthropic.claude-opus-4-8-20260301-v1:0", "claude-opus-4.8", True),
    ("gpt-5.4-2026-03-05", "gpt-5.4", True),
    ("openai/gpt-5.4", "gpt-5.4", True),
    ("openai:gpt-5.4", "gpt-5.4", True),  # issue 26: a gateway's colon prefix
    ("anthropic:claude-opus-4-8", "claude-opus-4.8", True),
    ("gpt-4.1-2025-04-14", "gpt-4.1", False),
    ("qwen3-max-2025-09-23", "qwen3-max", False),
    ("doubao-seed-2-1-260115", "doubao-seed-2.1", False),
    ("models/gemini-2.5-pro", "gemini-2.5-pro", False),
    ("moonshotai/kimi-k2.6", "kimi-k2.6", False),
    ("deepseek-ai/DeepSeek-V3.2", "deepseek-v3.2", False),
]


@pytest.mark.parametrize("spelling,model,rejects", REAL_IDS, ids=[s for s, _, _ in REAL_IDS])
def test_real_provider_ids(spelling: str, model: str, rejects: bool) -> None:
    assert capslib.normalise_model(spelling) == model
    assert capslib.builtin_caps(spelling) == capslib.builtin_caps(model) is not None
    assert capslib.rejects_temperature(spelling) is rejects


# (spelling, the paper model it must NOT be taken for). Each is another model or another
# version: it gets no row of its own neighbour's (None, or its own different row).
NEAR_MISSES = [
    ("qwen3-max", "qwen3.7-max"),
    ("qwen3.7-max", "qwen3-max"),
    ("qwen3.5-max", "qwen3.7-max"),
    ("gpt-5", "gpt-5.1"),
    ("gpt-5-2025-08-07", "gpt-5.1"),
    ("gpt-5.1", "gpt-5.4"),
    ("gpt-5.4-mini", "gpt-5.4"),
    ("gpt-5.4-mini-2026-03-05", "gpt-5.4"),
    ("gpt-5.4-pro", "gpt-5.4"),
    ("gpt-5.45", "gpt-5.4"),
    ("gpt-4.1-mini", "gpt-4.1"),
    ("gemini-2.5-flash", "gemini-2.5-pro"),
    ("gemini-2.5-pro-preview-06-05", "gemini-2.5-pro"),
    ("gemini-3", "gemini-3.1"),
    ("claude-opus-4", "claude-opus-4.6"),
    ("claude-opus-4-20250514", "claude-opus-4.6"),
    ("claude-opus-4-1-20250805", "claude-opus-4.6"),
    ("claude-opus-4.6-thinking", "claude-opus-4.6"),
    ("claude-sonnet-4-6", "claude-opus-4.6"),
    ("claude-opus-4.60", "claude-opus-4.6"),
    ("deepseek-v3", "deepseek-v3.2"),
    ("deepseek-v3-0324", "deepseek-v3.2"),
    ("deepseek-v3.2", "deepseek-v4"),
    ("kimi-k2", "kimi-k2.6"),
    ("minimax-m2", "minimax-m2.7"),
    ("glm-5", "glm-5.2"),
    ("doubao-seed-2.1-pro", "doubao-seed-2.1"),
]


@pytest.mark.parametrize("spelling,other", NEAR_MISSES, ids=[f"{s}!={o}" for s, o in NEAR_MISSES])
def test_a_near_miss_is_never_mapped_onto_another_version(spelling: str, other: str) -> None:
    assert capslib.normalise_model(spelling) != capslib.normalise_model(other)
    assert not capslib.same_model(spelling, other)
    own = PAPER.get(capslib.normalise_model(spelling))
    caps = capslib.builtin_caps(spelling)
    assert (None if caps is None else (caps.en, caps.cjk)) == own, "its own row or none: never the neighbour's"
    if other in REJECTS and capslib.normalise_model(spelling) not in REJECTS:
        assert not capslib.rejects_temperature(spelling)


def test_the_near_misses_that_differ_in_caps_get_a_different_row() -> None:
    # The mistake the spec warns about: Qwen3.7 given Qwen3-Max's smaller cap.
    assert capslib.builtin_caps("qwen3.7-max").en == 2_850_000 and capslib.builtin_caps("qwen3-max").en == 690_000
    assert capslib.builtin_caps("gpt-5.1").en == 1_050_000 and capslib.builtin_caps("gpt-5.4").en == 2_850_000
    assert capslib.builtin_caps("deepseek-v3.2").en == 1_200_000 and capslib.builtin_caps("deepseek-v4").en == 2_850_000


def test_only_snapshot_suffixes_are_stripped() -> None:
    # Hyphens become dots only between digits; words and sizes stay.
    assert capslib.normalise_model("qwen3-max") == "qwen3-max"
    assert capslib.normalise_model("claude-3-5-sonnet-20241022") == "claude-3.5-sonnet"
    assert capslib.normalise_model("qwen3:32b") == "qwen3:32b"  # a size tag after a colon is no prefix
    assert capslib.normalise_model("gpt-5.4:latest") == "gpt-5.4:latest"
    assert capslib.normalise_model("gemini-2.5-flash-preview-09-2025") == "gemini-2.5-flash-preview"
    assert capslib.normalise_model("o1-preview") == "o1-preview"
    # A number that is not a valid date is not a date.
    assert capslib.normalise_model("model-20261399") == "model-20261399"
    assert capslib.normalise_model("model-128000") == "model-128000"


def test_the_tables_are_written_in_their_normal_form() -> None:
    for model in [*capslib.PAPER_CAPS, *capslib.REJECTS_TEMPERATURE]:
        assert capslib.normalise_model(model) == model
    assert dict(capslib.PAPER_CAPS) == PAPER
    assert set(capslib.REJECTS_TEMPERATURE) == set(REJECTS)
