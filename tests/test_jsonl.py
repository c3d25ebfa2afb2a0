"""JSON Lines as batchrun writes and reads them: line-safe escaping, and the fast line parser."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from batchrun.base import jsonl

LINE_BREAKERS = "\u2028\u2029\u0085"


@pytest.mark.parametrize("text", [
    "plain ascii \"quoted\" \\ back\tslash\n",
    "中文\u2028第二行\u2029第三段\u0085 end",
    "\u2028" * 3 + "x" + "\u0085",
    "mixed é and \x00 control \x1f",
    "",
])
def test_escape_str_is_json_and_never_carries_a_line_breaker(text: str) -> None:
    body = jsonl.escape_str(text)
    assert json.loads('"' + body + '"') == text
    assert not any(ch in body for ch in LINE_BREAKERS + "\n\r")
    # Compositional: escaping pieces separately gives the escaping of the whole.
    half = len(text) // 2
    assert jsonl.escape_str(text[:half]) + jsonl.escape_str(text[half:]) == body


def test_dumps_keeps_unicode_and_escapes_only_the_line_breakers() -> None:
    line = jsonl.dumps({"q": "港口\u2028x", "n": 1})
    assert line == '{"q":"港口\\u2028x","n":1}'
    assert len(line.splitlines()) == 1


@pytest.mark.parametrize("text", [
    '{"a": [1, 2.5, "x"], "b": null}', "[]", '"s"', "3", ' {"lead": 1}', '{"trail": 1} ', "\t[1]\n",
])
def test_loads_matches_json_loads(text: str) -> None:
    assert jsonl.loads(text) == json.loads(text)


@pytest.mark.parametrize("text", ['{"a": 1} x', '{"a": 1}{"b": 2}', '{"a": ', "", " ", "nul"])
def test_loads_refuses_what_json_loads_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        json.loads(text)
    with pytest.raises(ValueError):
        jsonl.loads(text)


def test_iter_lines_splits_on_newline_only_and_flags_a_truncated_last_line(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    path.write_bytes(b'{"a":"x\xe2\x80\xa8y"}\r\n\n  \n{"b":2}\n{"c":')
    got = list(jsonl.iter_lines(path))
    assert got == [(1, b'{"a":"x\xe2\x80\xa8y"}', True), (4, b'{"b":2}', True), (5, b'{"c":', False)]


def test_escape_utf8_is_escape_str_encoded_byte_for_byte() -> None:
    """plan escapes documents with escape_utf8 (bytes.replace on the UTF-8); the bytes must be exactly
    escape_str's, whatever the text: every character below U+0100, the line breakers, CJK, a BOM,
    astral characters, and random mixes of them (seeded)."""
    import random

    alphabet = [chr(c) for c in range(0x100)] + list("\u2028\u2029\ufeff中文港口\u3000") + ["\U0001f600", "é", "\u07ff", "\u0800"]
    cases = ["", "plain", "a\nb\tc\"d\\e", "中文\u2028第二行\u2029第三段\u0085 end", "\x00\x1f\x7f\r\b\f", "\ufeffBOM",
             *alphabet]
    rng = random.Random(30)
    for n in range(400):
        weights = "\n\t\"\\" if n % 2 else ""
        cases.append("".join(rng.choice(alphabet + list(weights) * 20 + list("abc xyz") * 40) for _ in range(rng.randrange(1, 300))))
    for text in cases:
        assert jsonl.escape_utf8(text) == jsonl.escape_str(text).encode(), repr(text)
