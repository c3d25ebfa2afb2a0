"""results/ files are rendered by results_files.dumps_indent2, which must give exactly the text of
`json.dumps(data, ensure_ascii=False, indent=2)` (results_files.RENDERING names that rendering:
every file batchrun wrote before must read the same, and a file is skipped when its recorded
sha256 still matches). Compared here on random nested data with every awkward value JSON has, on
the edge cases one by one, and on the route files of a real state.db."""

from __future__ import annotations

import enum
import json
import math
import pickle
import random
import shutil
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest

from batchrun.publish.results_files import dumps_indent2, render

FIXTURE = Path(__file__).parent / "fixtures" / "report-project"

STRINGS = ["", "ok", "task-0001", 'quote " and \\ backslash', "tab\tnew\nline\r", "\x00\x01\x1f\x7f", "中文答案，含标点。",
           "emoji 😀 and \U0010ffff", "\u2028\u2029\u0085", "\ud800 lone surrogate", "\udfff", "é" * 50, "x" * 5000,
           "</script>", "ü\u0301"]
NUMBERS = [0, 1, -1, 2**63, -(2**70), 0.0, -0.0, 1.5, 1e-300, 1e300, 0.1 + 0.2, 1 / 3, float("nan"), float("inf"),
           float("-inf"), 123456789.0, 5e-324]
KEYS = ["task_id", "", "ключ", "a\"b", 1, -7, 2.5, float("nan"), True, False, None]


class Color(enum.IntEnum):
    RED = 1


class Name(str):
    pass


class Ratio(float):
    def __repr__(self) -> str:  # json writes float.__repr__, never a subclass's own
        return "not this"


def _scalar(rng: random.Random) -> Any:
    return rng.choice([rng.choice(STRINGS), rng.choice(NUMBERS), True, False, None, Color.RED, Name("sub"), Ratio(0.25)])


def _value(rng: random.Random, depth: int) -> Any:
    roll = rng.random()
    if depth >= 5 or roll < 0.45:
        return _scalar(rng)
    n = rng.choice([0, 1, 2, 3, 5])
    if roll < 0.7:
        items = [_value(rng, depth + 1) for _ in range(n)]
        return tuple(items) if rng.random() < 0.2 else items
    d: dict[Any, Any] = OrderedDict() if rng.random() < 0.1 else {}
    for _ in range(n):
        d[rng.choice(KEYS) if rng.random() < 0.3 else rng.choice(STRINGS[:6]) + str(rng.randrange(3))] = _value(rng, depth + 1)
    return d


def _same(data: Any) -> None:
    expected = json.dumps(data, ensure_ascii=False, indent=2)
    assert dumps_indent2(data) == expected
    assert dumps_indent2(data, end="\n") == expected + "\n"  # render's final newline, joined with the rest


def test_random_nested_data_renders_as_json_dumps() -> None:
    rng = random.Random(15)
    for _ in range(3000):
        _same(_value(rng, 0))


def test_containers_shared_many_times_render_as_json_dumps() -> None:
    """judge_details shares one verdict dict among every judgment alike; dumps_indent2 renders a
    container it meets again from its first rendering: at any level, nested in another shared
    one, empty, and met at another level than before."""
    rng = random.Random(16)
    for _ in range(100):
        pool = [_value(rng, 3) for _ in range(4)] + [{"total": 50.0, "score": 0.5, "points_awarded": [0, 50]}, [], {}]
        inner = pool[4]
        pool.append({"a": inner, "b": [inner, inner]})
        holders = [pool] * 3  # every pooled object held from elsewhere too, as judge_details' memo holds them

        def tree(depth: int) -> Any:
            roll = rng.random()
            if depth >= 4 or roll < 0.4:
                return rng.choice(pool)
            if roll < 0.7:
                return [tree(depth + 1) for _ in range(rng.choice([1, 2, 5]))]
            return {f"k{i}": tree(depth + 1) for i in range(rng.choice([1, 3, 6]))}

        _same([tree(0) for _ in range(rng.choice([1, 3, 12]))])
        assert holders


def test_a_container_met_again_renders_as_json_dumps_wherever_it_is_met() -> None:
    """dumps_indent2 writes a container it meets again at the same level as its first text: met
    first deeper then shallower, inside itself shared, empty, as a tuple and a list, and held by
    nothing else (a walk of fresh objects that may take a freed one's id)."""
    verdict = {"total": 1e-06, "score": 1e16, "points_awarded": [0, 2**70, -0.0, "中\ud800", [], {}]}
    nested = {"v": verdict, "again": [verdict, {"v": verdict}]}
    for data in ([[verdict], verdict, verdict], [verdict, [verdict], [[verdict]], verdict],
                 {"a": nested, "b": [nested, nested], "c": verdict}, [(), (), [], [], {}, {}],
                 [verdict["points_awarded"], tuple(verdict["points_awarded"]), verdict["points_awarded"]],
                 [{"fresh": [i, float(i)]} for i in range(50)]):
        _same(data)


def test_subclasses_that_build_containers_as_they_are_read_render_as_json_dumps() -> None:
    """A dict or list subclass whose items() or __iter__ makes new containers, let go of at once:
    their ids come back for the next ones, and the memo of containers met again must not take
    one for another (it wrote [{"v": 1}, {"v": 2}, {"v": 1}] for the list below)."""

    class FreshPairs(dict):
        def items(self) -> Any:
            for k, v in super().items():
                yield k, [v]

    class FreshDicts(list):
        def __iter__(self) -> Any:
            for v in list.__iter__(self):
                yield {"v": v}

    for data in ([FreshPairs(a=1, b=2), FreshPairs(c=3)], [FreshDicts([1, 2, 3])], {"x": FreshDicts([1, 2]), "y": FreshDicts([3])}):
        _same(data)


class Doubled(list):
    """A list subclass that reads differently from its storage: json.dumps writes what its
    __iter__ gives (so does json's C encoder: PySequence_Fast iterates what is not exactly a
    list or tuple), never the storage."""

    def __iter__(self) -> Any:
        return (v * 2 if isinstance(v, (int, float, str)) else v for v in list.__iter__(self))


class Upper(dict):
    def items(self) -> Any:  # json.dumps writes what items() gives, not the storage
        return [(k.upper() if isinstance(k, str) else k, v) for k, v in dict.items(self)]


class Count(int):
    def __repr__(self) -> str:  # json writes int.__repr__, never a subclass's own
        return "not this"


LEAF_SCALARS = [1e-06, 1e16, 1e-300, 5e-324, 2**70, -(2**70), -0.0, 0.0, math.nan, math.inf, -math.inf, 0, -1, True, False, None,
                "", "\ud800", "\udfff", "x\ud800y", "中文\n\t\"\\", "\x00\x1f\x7f", "😀", Count(3), Ratio(1e16), Name("n"), Color.RED]
LEAF_KEYS = ["k", "", "中", "\ud800", 0, -5, 2**70, 1.5, -0.0, 1e16, math.nan, math.inf, True, False, None, Name("key")]


def _leafy(rng: random.Random, depth: int, pool: list[Any]) -> Any:
    """Data whose containers are mostly containers of scalars only (the kind a leaf fast path
    would write in one piece), at every level, empty ones too, some shared, some subclasses."""
    roll = rng.random()
    if pool and roll < 0.15:
        return rng.choice(pool)  # a container met again, at this level or another
    if depth >= 6 or roll < 0.25:
        return rng.choice(LEAF_SCALARS)
    n = rng.choice([0, 1, 2, 4])
    nested = roll < 0.55
    values = [_leafy(rng, depth + 1, pool) if nested else rng.choice(LEAF_SCALARS) for _ in range(n)]
    kind = rng.random()
    if kind < 0.35:
        made: Any = {rng.choice(LEAF_KEYS) if rng.random() < 0.5 else f"k{i}": v for i, v in enumerate(values)}
    elif kind < 0.45:
        made = Upper((f"k{i}", v) for i, v in enumerate(values))
    elif kind < 0.8:
        made = values
    elif kind < 0.9:
        made = tuple(values)
    else:
        made = Doubled(v for v in values if not isinstance(v, (dict, list, tuple)))
    if rng.random() < 0.3:
        pool.append(made)
    return made


def test_containers_of_scalars_at_every_level_render_as_json_dumps() -> None:
    """Containers holding scalars only, at every level (0 to 6) and empty at every level, with
    every awkward scalar and key json has (1e-06, 1e+16, 2**70, -0.0, NaN and infinities,
    lone surrogates, non-str keys, int/float/str subclasses with a repr of their own), dict and
    list subclasses that read differently from their storage, and containers met again: a
    rendering that writes such containers in one piece (json's C encoder with the indent in
    its separator) must give json.dumps' text here."""
    rng = random.Random(31)
    for _ in range(600):
        pool: list[Any] = []
        _same([_leafy(rng, 0, pool) for _ in range(rng.choice([1, 2, 4]))])
    for scalar in LEAF_SCALARS:
        _same([scalar, [scalar], {"k": scalar}, Doubled([scalar, 1])])
    for key in LEAF_KEYS:
        _same({key: 1, "nested": {key: [key]}})
    empty: Any = {}
    for depth in range(7):  # an empty container as the only and as the last item at every level
        _same(empty)
        empty = [empty, {}, []] if depth % 2 else {"a": empty, "b": [], "c": {}}


@pytest.mark.parametrize("data", [
    {}, [], (), {"a": {}}, {"a": []}, [[], {}, [[]]], {"a": {"b": {"c": {"d": [1, {"e": None}]}}}},
    {2: "int key", 1.5: "float key", True: "bool key", None: "none key"}, [math.nan, math.inf, -math.inf],
    {"x": Color.RED, Name("k"): Name("v"), "r": Ratio(0.5)}, "a bare string", 3, None, 2.5,
    {"response": "x" * 100_000, "usage": {"input_tokens": 1, "output_tokens": None}},
], ids=repr)
def test_edge_cases_render_as_json_dumps(data: Any) -> None:
    _same(data)


def test_what_json_refuses_it_refuses_alike() -> None:
    for bad in ({"a": object()}, [1, {2, 3}], {("tuple", "key"): 1}):
        with pytest.raises(TypeError):
            json.dumps(bad, ensure_ascii=False, indent=2)
        with pytest.raises(TypeError):
            dumps_indent2(bad)
    cycle: list[Any] = []
    cycle.append(cycle)
    with pytest.raises(ValueError, match="Circular reference"):
        dumps_indent2(cycle)


def test_deep_nesting_renders_as_json_dumps() -> None:
    deep: Any = "leaf"
    for _ in range(400):
        deep = {"k": [deep]}
    _same(deep)


def test_the_route_files_of_a_real_state_db_render_as_json_dumps(tmp_path: Path) -> None:
    from batchrun.protocol.config_file import load_config
    from batchrun.publish.outputs import judge_details, judge_scores, leaderboard, provenance_sources, route_responses, route_scores
    from batchrun.ledger.inputs import resolve_inputs
    from batchrun.ledger.store import Store

    for name in ("batchrun.json", "state.db"):
        shutil.copyfile(FIXTURE / name, tmp_path / name)
    config = load_config(tmp_path / "batchrun.json")
    inputs = resolve_inputs(None, config, corpus=False)
    with Store(tmp_path / "state.db") as store:
        board = leaderboard(store)
        details, sources = judge_details(judge_scores(store)), provenance_sources(store)
        files = [f(row) for row in board if row["route"] in config.routes
                 for f in (lambda r: route_responses(store, config, r["route"]), lambda r: route_scores(store, inputs, r, details, sources))]
    assert len(files) >= 4
    for data in files:
        assert render(data) == (json.dumps(data, ensure_ascii=False, indent=2) + "\n").encode("utf-8")
        pickle.dumps(data, protocol=5)  # fingerprinted the fast way, not by the JSON fallback


def test_the_fingerprint_follows_the_values_not_the_objects_and_tells_any_change() -> None:
    """A file is skipped when its data's fingerprint matches its record: equal data must give
    the same fingerprint however its objects are shared (judge_details shares point lists; a
    fresh collect builds every value anew), and any difference json would write must change it."""
    import copy

    from batchrun.publish.results_files import fingerprint

    rng = random.Random(30)
    for _ in range(300):
        data = _value(rng, 0)
        if isinstance(data, float) and math.isnan(data):
            continue
        try:
            rebuilt = json.loads(json.dumps(data))
        except (TypeError, ValueError):
            continue
        again = json.loads(json.dumps(data))  # equal, every object new
        assert fingerprint(rebuilt) == fingerprint(again)
    points = [50, 50]
    shared = {"a": {"points": points}, "b": {"points": points}}
    assert fingerprint(shared) == fingerprint(copy.deepcopy({"a": {"points": [50, 50]}, "b": {"points": [50, 50]}}))
    variants = [{"score": 1}, {"score": 1.0}, {"score": True}, {"score": "1"}, {"score": None}, {"score": 0.0},
                {"score": -0.0}, {"score": [1]}, {"score": {"1": 1}}, {"Score": 1}, {"score": 1, "x": 2}, {"x": 2, "score": 1},
                {"score": "\ud800"}, {"score": "\udfff"}, {"score": "中"}, {"score": 2**70}, {"score": 2**70 + 1}]
    assert len({fingerprint(v) for v in variants}) == len(variants)
    for v in variants:
        assert fingerprint(v) == fingerprint(copy.deepcopy(v))


def test_what_pickle_cannot_write_is_still_fingerprinted() -> None:
    from batchrun.publish.results_files import fingerprint

    class Local(str):  # a local class: pickle refuses it, json writes it as a string
        pass

    assert fingerprint({"a": Local("x")}) == fingerprint({"a": Local("x")}) != fingerprint({"a": Local("y")})
    cycle: list[Any] = []
    cycle.append(cycle)
    with pytest.raises(ValueError, match="Circular reference"):
        fingerprint(cycle)


def test_judge_details_shares_only_verdicts_json_writes_alike() -> None:
    from batchrun.publish.outputs import judge_details

    rows = [{"route": "r", "task_id": f"t{i}", "judge": "j", "total": total, "score": score, "points_awarded_json": text}
            for i, (total, score, text) in enumerate([(1, 0.5, "[1]"), (1.0, 0.5, "[1]"), (1, 0.5, "[1]"), (0.0, 0.0, "[0]"),
                                                      (0.0, -0.0, "[0]"), (None, None, None), (None, None, ""), (1, 0.5, "[1.0]")])]
    details = judge_details(rows)["r"]
    for r in rows:
        v = details[r["task_id"]]["j"]
        assert json.dumps(v) == json.dumps({"total": r["total"], "score": r["score"],
                                            "points_awarded": json.loads(r["points_awarded_json"]) if r["points_awarded_json"] else None})
    assert details["t0"]["j"] is details["t2"]["j"]
    assert len({id(details[f"t{i}"]["j"]) for i in range(8)}) == 7
