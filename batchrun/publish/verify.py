"""`batchrun verify`: a published leaderboard checked against its inputs, every checksum of its
run manifest (manifest.py) recomputed.

`verify` recomputes every checksum from the files present and compares them with the manifest and
with state.db (which recorded the request files' checksums before they were sent, the documents'
when they were measured, each provider file's when it was downloaded, and each results file's,
the manifest's own included, when collect wrote it). A manifest edited to match an edited file
still differs from state.db's record of what was written. With state.db, verify also recomputes
every published number (each route's headline and each task's score) from state.db and compares
it with the results files. Each mismatch is named.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..base.checksums import file_digest
from ..base.errors import DataError
from ..ledger.migrations import applied_names, known_migrations
from ..ledger.store import Store
from ..protocol.config import Config, rehearsal_path, results_stem
from ..protocol.policy import fingerprint
from ..protocol.prompts import GENERATION_TEMPLATE_SHA256, JUDGE_TEMPLATE_SHA256
from .manifest import FORMAT, FORMAT_1, MANIFEST_NAME, READABLE, canonical_config, recorded_provider_files, relative
from .outputs import ZERO_FILLED, leaderboard

# The numbers a scores file publishes that verify recomputes from state.db.
HEADLINE_KEYS = ("overall", "all_tasks_overall", "scored_overall", "accepted_overall", "scored_n", "n_tasks", "out_of_context_n",
                 "failed_n", "pending_n", "accepted_n", "complete")


def _lines(path: Path) -> int:
    n = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            n += chunk.count(b"\n")
    return n


def _results_file_records(store: Store) -> dict[str, tuple[str, float]]:
    """(sha256, written_at) that collect recorded for each results file it wrote (m016), by the
    path it wrote it to."""
    if not store.db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'results_files'").fetchone():
        return {}
    return {path: (sha, at) for path, sha, at in store.db.execute("SELECT path, sha256, written_at FROM results_files")}


def _record_for(records: dict[str, tuple[str, float]], path: Path, rel: str) -> str | None:
    """state.db's record of the results file at `path` (`rel` in the project). A moved or
    published copy of the project has other absolute paths than the ones recorded: then the
    record whose path ends with `rel` (the latest written, if several do)."""
    if str(path) in records:
        return records[str(path)][0]
    suffix = "/" + rel.lstrip("/")
    hits = [p for p in records if Path(p).as_posix().endswith(suffix)]
    return records[max(hits, key=lambda p: records[p][1])][0] if hits else None


@dataclass
class Verification:
    checked: int = 0
    mismatches: list[str] = field(default_factory=list)
    rehearsal: str | None = None
    notes: list[str] = field(default_factory=list)  # what was not checked, and why
    protocol_note: str | None = None  # the numbers are not WildTrace-protocol numbers (manifest /3)

    def check(self, ok: bool, problem: str) -> None:
        self.checked += 1
        if not ok:
            self.mismatches.append(problem)


def verify(manifest_path: Path, config: Config, store: Store | None) -> Verification:
    """Recompute every checksum the manifest lists, against the files and against state.db."""
    try:
        m = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as e:  # RecursionError: nested too deep to decode
        raise DataError(f"{manifest_path} is not JSON ({e}).", "It is written by `batchrun collect`; restore the published one.") from e
    if not isinstance(m, dict) or m.get("format") not in READABLE:
        found = m.get("format") if isinstance(m, dict) else None
        raise DataError(f"{manifest_path} is not a manifest this batchrun reads (format {found!r}; it reads {', '.join(READABLE)}).",
                        "Verify it with the batchrun version that wrote it (its batchrun_version field).")
    try:
        return _verify_manifest(manifest_path, m, config, store)
    except (KeyError, IndexError, TypeError, AttributeError) as e:
        # A published manifest is a document from outside: one edited into another shape (a field
        # missing, a list where an object belongs) is named as such, never a traceback.
        raise DataError(f"{manifest_path} does not have the shape of a manifest of format {m['format']} "
                        f"({type(e).__name__}: {e}).",
                        "It is written by `batchrun collect`: restore the published one; an edited manifest proves nothing.") from e


def _verify_manifest(manifest_path: Path, m: dict[str, Any], config: Config, store: Store | None) -> Verification:
    from ..protocol.corpus import measure_file
    from ..protocol.dataset import load_dataset

    if store is not None:
        check_same_store(m, manifest_path, config, store)
    root = config.path.resolve().parent
    v = Verification(rehearsal=m.get("rehearsal"), protocol_note=m.get("protocol_note"))

    def present(rel: str, what: str) -> Path | None:
        path = root / rel
        v.check(path.is_file(), f"{what} {rel} is missing")
        return path if path.is_file() else None

    ds = m["dataset"]
    if (path := present(ds["path"], "the dataset")) is not None:
        actual = file_digest(path)
        v.check(actual == ds["sha256"], f"the dataset {ds['path']} has sha256 {actual[:12]}…, the manifest says {str(ds['sha256'])[:12]}…")
        if actual == ds["sha256"]:
            n = len(load_dataset(path).tasks)
            v.check(n == ds["records"], f"the dataset {ds['path']} has {n} records, the manifest says {ds['records']}")
    for d in m["documents"]:
        if (path := present(d["path"], "the document")) is not None:
            info = measure_file(d["name"], path, where=f"{MANIFEST_NAME} (document {d['name']})")
            v.check(info.sha256 == d["sha256"], f"the document {d['path']} has sha256 {info.sha256[:12]}…, the manifest says {d['sha256'][:12]}…")
            v.check(info.chars == d["chars"], f"the document {d['path']} has {info.chars} characters, the manifest says {d['chars']}")
    if (path := present(m["config"]["path"], "the config")) is not None:
        actual = fingerprint(canonical_config(config))
        v.check(actual == m["config"]["sha256"], f"the config {m['config']['path']} differs from the one in the manifest (canonical sha {actual} vs {m['config']['sha256']})")
    templates = {"generation_sha256": GENERATION_TEMPLATE_SHA256, "judge_sha256": JUDGE_TEMPLATE_SHA256}
    for key, value in m["prompt_templates"].items():
        v.check(templates.get(key) == value, f"the prompt template {key} of this batchrun differs from the manifest's")
    recorded = {}
    if store is not None:
        # A state.db from before m018_request_blake3 has no blake3 column (and no batch with one).
        has_blake3 = any(r[1] == "blake3" for r in store.db.execute("PRAGMA table_info(batches)"))
        recorded = {b["id"]: b for b in store.rows(
            f"SELECT id, {'blake3' if has_blake3 else 'NULL AS blake3'}, sha256, provider_batch_id FROM batches")}
        v.check(store.meta("dataset_sha256") == ds["sha256"], "state.db's current dataset is not the manifest's")
        known_docs = {r[0] for r in store.db.execute("SELECT sha256 FROM documents")}
        for d in m["documents"]:
            v.check(d["sha256"] in known_docs, f"state.db never measured the document {d['path']} with the manifest's sha256")
        policies = {r["route"]: r["policy_fp"] for r in store.rows("SELECT route, policy_fp FROM config_routes")}
        for r in m["routes"]:
            v.check(policies.get(r["route"]) == r["policy_fingerprint"],
                    f"route {r['route']}'s policy in state.db is not the manifest's ({policies.get(r['route'])} vs {r['policy_fingerprint']})")
    for f in m["request_files"]:
        if (path := present(f["path"], "the request file")) is None:
            continue
        # Format /1, and a file planned before m018: sha256.
        algorithm = "blake3" if m["format"] != FORMAT_1 and "blake3" in f else "sha256"
        expected = str(f.get(algorithm))
        actual = file_digest(path, algorithm)
        v.check(actual == expected, f"the request file {f['path']} has {algorithm} {actual[:12]}…, the manifest says {expected[:12]}…")
        v.check(_lines(path) == f["lines"], f"the request file {f['path']} has {_lines(path)} lines, the manifest says {f['lines']}")
        if store is not None:
            b = recorded.get(f["batch"])
            v.check(b is not None and b[algorithm] == expected and b["provider_batch_id"] == f["provider_batch_id"],
                    f"the request file {f['path']} (batch {f['batch']}) is not the one state.db recorded as sent")
    _verify_provider_files(v, m, root, config.paths.jobs, store, present)
    records = _results_file_records(store) if store is not None else {}
    for f in m["results_files"]:
        if (path := present(f["path"], "the results file")) is not None:
            actual = file_digest(path)
            v.check(actual == f["sha256"], f"the results file {f['path']} has sha256 {actual[:12]}…, the manifest says {f['sha256'][:12]}…")
            if records:
                written = _record_for(records, path, f["path"])
                v.check(written == actual, f"the results file {f['path']} is not the one collect wrote (sha256 {actual[:12]}…, "
                                           f"state.db recorded {str(written)[:12]}…)")
    if records and m["format"] == FORMAT:
        # The manifest itself, as collect wrote it: one edited to match an edited file is not.
        rel = relative(manifest_path, root)
        written = _record_for(records, manifest_path.resolve(), rel)
        actual = file_digest(manifest_path)
        v.check(written == actual, f"the manifest {rel} is not the one collect wrote (sha256 {actual[:12]}…, state.db recorded "
                                   f"{str(written)[:12]}…)")
    if store is not None:
        _verify_numbers(v, m, root, store, config)
    return v


def writers_config(manifest_path: Path) -> Path | None:
    """The config file of the project whose collect wrote this manifest, where it still lies beside
    it; None when the manifest cannot be read or names none (verify itself then says what is
    wrong with it)."""
    try:
        m = json.loads(manifest_path.read_text(encoding="utf-8"))
        return _writers_config(m, manifest_path) if isinstance(m, dict) else None
    except (OSError, ValueError):  # unreadable, or not JSON: verify says so itself
        return None


def _writers_config(m: dict[str, Any], manifest_path: Path) -> Path | None:
    # The manifest's paths are relative to its project's folder, and its results files beside it
    # (results/NAME; the site's pages lie deeper) say how many levels up that folder is. The
    # manifest is data: paths that leave the project (absolute, `..`) are not followed.
    files, config = m.get("results_files"), m.get("config")
    if not (isinstance(files, list) and isinstance(config, dict) and isinstance(config.get("path"), str)):
        return None
    rels = [Path(f["path"]) for f in files if isinstance(f, dict) and isinstance(f.get("path"), str)]
    name = Path(config["path"])
    if not rels or any(p.is_absolute() or ".." in p.parts for p in (*rels, name)):
        return None
    here = manifest_path.resolve().parent
    levels = min(len(p.parent.parts) for p in rels)
    if levels > len(here.parents):
        return None
    candidate = (here.parents[levels - 1] if levels else here) / name
    return candidate if candidate.is_file() else None


def check_same_store(m: dict[str, Any], manifest_path: Path, config: Config, store: Store) -> None:
    """Refuse a manifest that another state.db wrote (its `store_id`, manifests since session 12):
    `verify OTHER/results` from this project read the other project's results against this
    state.db and reported each number as a mismatch, as if they had been tampered with."""
    written_by, here = m.get("store_id"), store.meta("store_id")
    if not written_by or not here or written_by == here:
        return
    other = _writers_config(m, manifest_path)
    where = manifest_path.parent
    if m.get("rehearsal") and not config.rehearsal and where.resolve() == rehearsal_path(config.paths.results).resolve():
        # This project's rehearsal's results (rehearsal/results) read against the real state.db:
        # verified with --emulator (review: the hint named the command just run).
        raise DataError(
            f"The results in {where} were written by a rehearsal on the emulator {m['rehearsal']} (store {written_by}), "
            f"not by {config.paths.state} (store {here}): verify checks results against the state.db that wrote them.",
            f"Verify them as a rehearsal: `batchrun --config {config.path} --emulator {m['rehearsal']} verify {where}`. "
            "Nothing was checked.")
    raise DataError(
        f"The results in {where} were written by another state.db (store {written_by}), not by {config.paths.state} "
        f"(store {here}) of the config {config.path}: verify checks results against the state.db that wrote them.",
        (f"Run it with that project's config: `batchrun --config {other} verify {where}`." if other else
         "Run `batchrun verify` from that project's folder, or pass its config: `batchrun --config PATH verify DIR`.")
        + " Nothing was checked.")


def _verify_provider_files(v: Verification, m: dict[str, Any], root: Path, jobs: Path, store: Store | None, present: Any) -> None:
    """Each provider result and error file against the manifest's digest and state.db's record of
    it as downloaded; a file state.db recorded must be listed (manifests before /3 list none:
    then each is checked against state.db alone)."""
    recorded = ({(batch, Path(path).name): (path, sha) for batch, path, sha in recorded_provider_files(store)}
                if store is not None else {})
    listed = m.get("provider_files", []) if m["format"] == FORMAT else []
    seen = set()
    for f in listed:
        key = (f["batch"], Path(f["path"]).name)
        seen.add(key)
        if (path := present(f["path"], "the provider file")) is None:
            continue
        actual = file_digest(path)
        v.check(actual == f["sha256"], f"the provider file {f['path']} (batch {f['batch']}) has sha256 {actual[:12]}…, "
                                       f"the manifest says {str(f['sha256'])[:12]}…")
        if store is not None:
            rec = recorded.get(key)
            v.check(rec is not None and rec[1] in (None, actual),
                    f"the provider file {f['path']} (batch {f['batch']}) is not the one poll downloaded"
                    + (f" (sha256 {actual[:12]}…, state.db recorded {str(rec[1])[:12]}…)" if rec else " (state.db records no such file)"))
    for key, (path_text, sha) in recorded.items():
        if key in seen:
            continue
        # Recorded where it was downloaded: jobs/<batch folder>/<file> of this project, wherever
        # the project was when it ran.
        path = jobs / Path(path_text).parent.name / Path(path_text).name
        rel = relative(path, root)
        if path.is_file():
            actual = file_digest(path)
            if m["format"] == FORMAT:
                v.check(False, f"the provider file {rel} (batch {key[0]}) is not listed in the manifest")
            elif sha is not None:
                v.check(actual == sha, f"the provider file {rel} (batch {key[0]}) has sha256 {actual[:12]}…, state.db recorded "
                                       f"{sha[:12]}… when it was downloaded")
        elif store is not None and store.scalar("SELECT 1 FROM results WHERE batch_id = ? AND kind != 'missing' LIMIT 1", [key[0]]):
            # Answers were collected from it: the evidence of published numbers is gone.
            v.check(False, f"the provider file {rel} (batch {key[0]}) is missing, and state.db holds answers collected from it")


def _verify_numbers(v: Verification, m: dict[str, Any], root: Path, store: Store, config: Config) -> None:
    """Every published number of each scores file (the headline, and each task's status and score)
    recomputed from state.db. Needs state.db's current schema (its views define the numbers)."""
    if known_migrations() - (applied_names(store.db.conn) or set()):
        v.notes.append("state.db has an older schema than this batchrun: the published numbers were not recomputed "
                       "(verify with the batchrun version that wrote them, or upgrade state.db with a writing command)")
        return
    board = {r["route"]: r for r in leaderboard(store)}  # fills cells_now
    cells: dict[str, dict[str, tuple[str, Any]]] = {}
    for route, task_id, status, score in store.db.execute("SELECT route, task_id, status, score FROM cells_now"):
        cells.setdefault(route, {})[task_id] = (status, score)
    listed = {Path(f["path"]).name: f["path"] for f in m["results_files"]}
    for route, row in board.items():
        name = results_stem(route) + ".scores.json"
        rel = listed.get(name)
        v.check(rel is not None, f"route {route} has no scores file in the manifest ({name})")
        if rel is None or not (root / rel).is_file():
            continue
        try:
            published = json.loads((root / rel).read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError):
            v.check(False, f"the results file {rel} is not JSON")
            continue
        if not isinstance(published, dict):
            v.check(False, f"the results file {rel} is not a scores file")
            continue
        for key in HEADLINE_KEYS:
            if key not in published and key not in row:
                continue
            mine = row.get(key)
            v.check(_same(published.get(key), bool(mine) if key == "complete" else mine),
                    f"the results file {rel} publishes {key} = {published.get(key)!r}; state.db gives {mine!r}")
        tasks: list[Any] = published["tasks"] if isinstance(published.get("tasks"), list) else []
        wrong = []
        for t in tasks:
            status, score = cells.get(route, {}).get(str(t.get("task_id")) if isinstance(t, dict) else "", (None, None))
            status = "pending" if status == "judging" else status
            expected = score if status == "ok" else (0.0 if status in ZERO_FILLED else None)
            if not isinstance(t, dict) or t.get("status") != status or not _same(t.get("score"), expected):
                wrong.append(str(t.get("task_id")) if isinstance(t, dict) else "?")
        v.check(not wrong and len(tasks) == len(cells.get(route, {})),
                f"the results file {rel} publishes task scores state.db does not give: "
                + (", ".join(wrong[:10]) + (f" and {len(wrong) - 10} more" if len(wrong) > 10 else "") if wrong
                   else f"{len(tasks)} task(s) for {len(cells.get(route, {}))}"))


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return abs(a - b) <= 1e-9
    return bool(a == b)
