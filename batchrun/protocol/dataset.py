"""The WildTrace dataset, in both released representations.

- the nested `.json` file: a list of records (or an object holding one under "tasks"/"data"/
  "records"/"items"), `ground_truth` an object;
- the Hugging Face `.jsonl` file: one record a line, `ground_truth` serialized JSON.

JSONL is split on `\\n` only (U+2028 inside a question is text, not a line break). Every problem
is reported with the file, the line (JSONL) or index (JSON), the task id and the field.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from ..base.errors import BatchrunError, DataError, all_at_once, closest
from ..base.userfiles import NotRegularFile, NumberTooLong, TooDeep, non_json_value, parse_json, printable_line, read_regular


@dataclass(frozen=True)
class RubricItem:
    points: int | float
    criterion: str
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Task:
    task_id: str
    question: str
    corpus_file: str
    rubric: tuple[RubricItem, ...]
    fields: dict[str, Any]  # everything else (language, category, paradigm, ground_truth...)
    position: int
    # Where the record is, as its problems are named: "PATH, record N" (.json) or "PATH, line N"
    # (.jsonl); the corpus's problems name it the same way. Not part of the task's value: the same
    # record read from another path is the same task (equality, repr).
    where: str = field(default="", compare=False, repr=False)

    @property
    def rubric_total(self) -> float:
        return float(sum(item.points for item in self.rubric))

    @cached_property  # read per cell (routes x tasks) by every sync: computed once per task
    def sha256(self) -> str:
        blob = json.dumps(
            [self.question, self.corpus_file, [[i.points, i.criterion] for i in self.rubric]],
            ensure_ascii=False, separators=(",", ":"),
        )
        return hashlib.sha256(blob.encode()).hexdigest()


@dataclass(frozen=True)
class Dataset:
    path: Path
    sha256: str
    tasks: tuple[Task, ...]


def load_dataset(path: Path) -> Dataset:
    if not path.exists():
        # The release comes as .json or .jsonl (module docstring): one lying beside the configured
        # name is most likely the release under its other name, so the fix names it.
        # (Not batchrun's own JSON files, and the release's name first; the path quoted as TOML
        # quotes a string, which a JSON string is.)
        beside = sorted((p for p in path.parent.glob("*.json*") if p.suffix.lower() in (".json", ".jsonl")
                         and p.name not in ("batchrun.json", "manifest.json", "datasette-metadata.json")),
                        key=lambda p: ("wildtrace" not in p.name.lower(), p.name)) if path.parent.is_dir() else []
        if beside:
            raise DataError(f"Dataset file {path} does not exist; {path.parent} has {', '.join(p.name for p in beside[:3])}.",
                            f"If that is the WildTrace release, set it in the config: [paths] dataset = {json.dumps(str(beside[0]))}.")
        raise DataError(f"Dataset file {path} does not exist.", "Set [paths] dataset in the config, or put the WildTrace release in data/.")
    try:
        data = read_regular(path)
    except NotRegularFile as e:
        raise DataError(f"Dataset file {e}.", "Set [paths] dataset to the WildTrace release file itself.")
    except OSError as e:
        raise DataError(f"Cannot read dataset file {path}: {e.strerror}.", "Check the file's permissions.")
    sha = hashlib.sha256(data).hexdigest()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 (invalid byte at offset {e.start}).", "Save the dataset as UTF-8.")
    del data  # the bytes, the text and the parsed records would otherwise all be alive at the peak
    records: list[tuple[str, Any]] = []
    # Every problem of every record is collected and reported at once (errors.all_at_once), as a
    # config's are: a night is not lost to fix-rerun-fix, one record at a time. A line that is not
    # JSON stands in the records as its error, so the problems are listed in the file's order.
    problems: list[BatchrunError] = []
    if path.suffix.lower() == ".jsonl":
        for number, line in enumerate(text.split("\n"), start=1):
            if not line.strip():
                continue
            try:
                records.append((f"{path}, line {number}", parse_json(line)))
            except TooDeep as e:
                records.append((f"{path}, line {number}", DataError(f"{path}, line {number}: {e}.", _NOT_A_RECORD)))
            except NumberTooLong as e:
                records.append((f"{path}, line {number}", DataError(f"{path}, line {number}, column {e.colno}: {e.msg}.", _NUMBER_FIX)))
            except json.JSONDecodeError as e:
                records.append((f"{path}, line {number}", DataError(
                    f"{path}, line {number}: invalid JSON at column {e.colno}: {e.msg}.",
                    "Each line of a .jsonl dataset must be one complete JSON record; fix or remove that line.",
                )))
    else:
        try:
            raw = parse_json(text)
        except TooDeep as e:
            raise DataError(f"{path}: {e}.", _NOT_A_RECORD)
        except NumberTooLong as e:
            raise DataError(f"{path}: line {e.lineno}, column {e.colno}: {e.msg}.", _NUMBER_FIX)
        except json.JSONDecodeError as e:
            raise DataError(f"{path}: invalid JSON at line {e.lineno}, column {e.colno}: {e.msg}.", "Fix the JSON syntax at that position (or use the .jsonl release).")
        del text
        if isinstance(raw, dict):
            for key in ("tasks", "data", "records", "items"):
                if isinstance(raw.get(key), list):
                    raw = raw[key]
                    break
        if not isinstance(raw, list):
            raise DataError(f"{path}: expected a JSON list of task records.", "Use the released nested .json file or the .jsonl file.")
        records = [(f"{path}, record {i}", r) for i, r in enumerate(raw, start=1)]  # counted as people count: the first is record 1

    tasks: list[Task] = []
    seen: dict[str, str] = {}
    for position, (where, record) in enumerate(records):
        if isinstance(record, DataError):
            problems.append(record)
            continue
        try:
            task = parse_record(record, where, position)
        except RecordProblems as e:
            problems.extend(e.problems)
            seen.setdefault(e.task_id, where)
            continue
        except DataError as e:
            problems.append(e)
            continue
        if task.task_id in seen:
            problems.append(DataError(
                f"{where}: duplicate task id {task.task_id!r} (first seen at {seen[task.task_id]}).",
                "Task ids must be unique; remove the duplicate record or give it its own id.",
            ))
            continue
        seen[task.task_id] = where
        tasks.append(task)
    if problems:
        more = f" ({len(problems)} in all; the first {MAX_SHOWN} are listed)" if len(problems) > MAX_SHOWN else ""
        raise all_at_once(problems[:MAX_SHOWN], str(path), "the dataset" + more)
    if not tasks:
        raise DataError(f"{path}: the dataset holds no task.", "Point [paths] dataset at the WildTrace release file.")
    return Dataset(path=path, sha256=sha, tasks=tuple(tasks))


# A dataset that is not WildTrace's at all would list a problem per field of each of its 481
# records: the first ones say what is wrong.
MAX_SHOWN = 50


class RecordProblems(DataError):
    """Every problem of one record (parse_record), each a DataError naming its field."""

    def __init__(self, problems: list[BatchrunError], task_id: str):
        super().__init__("\n".join(p.message for p in problems), problems[0].hint)
        self.problems = problems
        self.task_id = task_id  # a later record with the same id is still a duplicate


# The fields a WildTrace record, its ground_truth and a rubric item have (the release's, and the
# other id spellings _task_id takes): a key beside them close to a missing one is its misspelling.
_RECORD_KEYS = {"task_id", "question_id", "id", "question_text", "corpus_file", "ground_truth", "language", "category",
                "paradigm", "difficulty"}
_GROUND_TRUTH_KEYS = {"answer", "clues", "scoring_rubric"}
_ITEM_KEYS = {"points", "correct_criterion"}


def _state(container: dict[str, Any], key: str, kind: str, known: set[str]) -> str:
    """What is wrong with `container[key]`: "missing", with "(found `criterion`)" when the object
    has a key close to it that is none of its known fields (the likely misspelling), "empty", or
    "not a string (got int)"."""
    value = container.get(key)
    if value is None:
        guess = closest(key, [k for k in container if k not in known])
        return f"missing (found `{guess}`)" if guess else "missing"
    if isinstance(value, str) and not value.strip() and kind == "a string":
        return "empty"
    return f"not {kind} (got {type(value).__name__})"


_NUMBER_FIX = ("Write that number with the digits it needs (rubric points are small numbers); an id that long "
               "is no WildTrace id: write ids as strings, e.g. \"task_id\": \"wt-001\".")
_NOT_A_RECORD = ("A WildTrace record is a flat object whose ground_truth holds a list of rubric items; "
                 "this is not one. Use the released dataset file.")


def _task_id(record: dict[str, Any], where: str) -> str:
    """The record's id: a string, or an integer as some exports write ids (42 becomes "42").

    Anything else is refused rather than stringified: an object or a boolean would become an id
    like "{'a': 1}" or "True" that matches nothing in the release."""
    key, value = next(((k, record[k]) for k in ("task_id", "question_id", "id") if record.get(k) not in (None, "")), (None, None))
    if key is None:
        guess = closest("task_id", [k for k in record if k not in _RECORD_KEYS])
        raise DataError(f"{where}: missing field `task_id` (nor `question_id` or `id`)" + (f" (found `{guess}`)" if guess else "") + ".",
                        "Give every record a unique task_id.")
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise DataError(
            f"{where}: field `{key}` must be a string (or an integer) but is {type(value).__name__} {value!r}.",
            'Write the task\'s id as a JSON string, e.g. "task_id": "wt-001".',
        )
    if isinstance(value, int) and (bad := non_json_value(value)) is not None:
        raise DataError(f"{where}: field `{key}` {bad.problem}.", _NUMBER_FIX)
    task_id = str(value)
    if not printable_line(task_id):
        raise DataError(f"{where}: field `{key}` {task_id!r} contains a control character or line break.",
                        "Task ids are shown in reports and tables: use printable, single-line ids.")
    return task_id


def _decode(value: Any, here: str, field: str, hint: str) -> Any:
    """The .jsonl release serialises ground_truth (and some exports the rubric) as JSON text."""
    if not isinstance(value, str):
        return value
    try:
        return parse_json(value)
    except TooDeep as e:
        raise DataError(f"{here}: field `{field}` is a string {e}.", _NOT_A_RECORD)
    except NumberTooLong as e:
        raise DataError(f"{here}: field `{field}` is a string holding {e.msg}.", _NUMBER_FIX)
    except json.JSONDecodeError as e:
        raise DataError(f"{here}: field `{field}` is a string but not valid JSON ({e.msg} at column {e.colno}).", hint)


def parse_record(record: Any, where: str, position: int) -> Task:
    if not isinstance(record, dict):
        raise DataError(f"{where}: a task record must be an object.", "Each record is {\"task_id\", \"question_text\", \"corpus_file\", \"ground_truth\", ...}.")
    task_id = _task_id(record, where)
    here = f"{where} (task {task_id})"

    gt = _decode(record.get("ground_truth"), here, "ground_truth",
                 "In the .jsonl release ground_truth is serialized JSON; fix the string.")
    rubric_raw = gt.get("scoring_rubric") if isinstance(gt, dict) else None
    rubric_raw = _decode(rubric_raw, here, "ground_truth.scoring_rubric", "Make it a list of {points, correct_criterion}.")
    # Before any field is used: JSON's NaN/Infinity tokens (a rubric that can never be summed or
    # scored) and absurd nesting anywhere in the record, with the field that holds them.
    decoded = dict(record)
    if isinstance(gt, dict):
        decoded["ground_truth"] = {**gt, "scoring_rubric": rubric_raw}
    if bad := non_json_value(decoded):
        raise DataError(f"{here}: field `{bad.field}` {bad.problem}.", _NOT_A_RECORD if bad.too_deep else _NUMBER_FIX if bad.too_large else
                        bad.hint or "JSON has no NaN or Infinity (Python writes them, no JSON reader accepts them): "
                        "write a finite number there (rubric points are numbers >= 0).")

    # Each field's problem is noted and the record read on, so every one is reported at once.
    problems: list[BatchrunError] = []
    question = record.get("question_text")
    if not isinstance(question, str) or not question.strip():
        problems.append(DataError(f"{here}: field `question_text` is {_state(record, 'question_text', 'a string', _RECORD_KEYS)}.",
                                  "Every task needs its question in question_text."))
    corpus_file = record.get("corpus_file")
    if not isinstance(corpus_file, str) or not corpus_file.strip():
        problems.append(DataError(f"{here}: field `corpus_file` is {_state(record, 'corpus_file', 'a string', _RECORD_KEYS)}.",
                                  "Name the task's document, e.g. \"corpus_file\": \"report.txt\"."))
    elif not printable_line(corpus_file):
        problems.append(DataError(f"{here}: field `corpus_file` {corpus_file!r} contains a control character (NUL, line break, ...).",
                                  "corpus_file is a file name inside the corpus folder, like \"report.txt\"."))

    items = []
    if not isinstance(gt, dict):
        problems.append(DataError(f"{here}: field `ground_truth` is {_state(record, 'ground_truth', 'an object', _RECORD_KEYS)}.",
                                  "Add ground_truth: an object with scoring_rubric, a list of {points, correct_criterion}."))
    elif rubric_raw is None:
        problems.append(DataError(f"{here}: field `ground_truth.scoring_rubric` is {_state(gt, 'scoring_rubric', 'a list', _GROUND_TRUTH_KEYS)}.",
                                  "Add the rubric: a list of {points, correct_criterion}."))
    elif not isinstance(rubric_raw, list) or not rubric_raw:
        problems.append(DataError(f"{here}: field `ground_truth.scoring_rubric` must be a non-empty list (got {type(rubric_raw).__name__}).",
                                  "Make it a list of {points, correct_criterion} objects."))
    else:
        for i, item in enumerate(rubric_raw):
            f = f"ground_truth.scoring_rubric[{i}]"
            if not isinstance(item, dict):
                problems.append(DataError(f"{here}: `{f}` must be an object.", "Each rubric item is {\"points\": 40, \"correct_criterion\": \"...\"}."))
                continue
            points = item.get("points")
            if isinstance(points, bool) or not isinstance(points, (int, float)):
                got = f"got {points!r}" if "points" in item else f"it is {_state(item, 'points', 'a number', _ITEM_KEYS)}"
                problems.append(DataError(f"{here}: `{f}.points` must be a number ({got}).", "Write points as a JSON number, e.g. 40."))
            elif points < 0:
                problems.append(DataError(f"{here}: `{f}.points` is negative ({points}).", "Rubric points must be >= 0."))
            criterion = item.get("correct_criterion")
            if not isinstance(criterion, str):
                problems.append(DataError(f"{here}: `{f}.correct_criterion` is {_state(item, 'correct_criterion', 'a string', _ITEM_KEYS)}.",
                                          "Each rubric item needs its correct_criterion text."))
            if isinstance(points, (int, float)) and not isinstance(points, bool) and isinstance(criterion, str):
                extra = {k: v for k, v in item.items() if k not in _ITEM_KEYS}
                items.append(RubricItem(points=points, criterion=criterion, extra=extra))
        if not problems and sum(i.points for i in items) <= 0:
            problems.append(DataError(f"{here}: the rubric's points sum to 0.", "Scores are total / sum of points; give the rubric items their points."))
    if problems:
        raise RecordProblems(problems, task_id)
    assert isinstance(question, str) and isinstance(corpus_file, str) and isinstance(gt, dict)
    fields = {k: v for k, v in record.items() if k not in ("question_text", "corpus_file")}
    fields["ground_truth"] = gt
    return Task(task_id=task_id, question=question, corpus_file=corpus_file, rubric=tuple(items), fields=fields, position=position, where=where)
