"""A checksummed run manifest, and `batchrun verify`: anyone holding a published leaderboard can
check that its numbers come from these inputs.

`results/manifest.json` is written beside the results files every time they are: the dataset
file's sha256 and record count; each document's sha256 and length in characters; the config in
canonical form (and its sha256) with each route's policy fingerprint; the prompt templates'
sha256; each request file that went out, with its BLAKE3 checksum (its sha256 if it was planned
before batchrun recorded BLAKE3: checksums.py), line count and the provider batch id; each
provider result and error file downloaded into jobs/ (the raw answers everything else is derived
from), with the sha256 poll recorded when it downloaded it; each results file's sha256; whether
the numbers are WildTrace-protocol numbers (`protocol`); batchrun's version and, when run from a
git checkout, the commit.

`verify` recomputes every checksum from the files present and compares them with the manifest and
with state.db (which recorded the request files' checksums before they were sent, the documents'
when they were measured, each provider file's when it was downloaded, and each results file's,
the manifest's own included, when collect wrote it). A manifest edited to match an edited file
still differs from state.db's record of what was written. With state.db, verify also recomputes
every published number (each route's headline and each task's score) from state.db and compares
it with the results files. Each mismatch is named. Paths in the manifest are relative to the
config file's folder (the project), so a project can be moved or published as a folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .checksums import RequestChecksum, file_digest
from .config import Config, fingerprint
from .errors import DataError
from .prompts import GENERATION_TEMPLATE_SHA256, JUDGE_TEMPLATE_SHA256
from .store import Store, sql_list

MANIFEST_NAME = "manifest.json"
# /3: `provider_files` (every downloaded provider result and error file, with its sha256) and
# `protocol`. /2: a request file's checksum is under "blake3" (under "sha256" for a file planned
# before m018_request_blake3); /1 had "sha256" only.
FORMAT = "batchrun-manifest/3"
_FORMAT_1 = "batchrun-manifest/1"
_FORMAT_2 = "batchrun-manifest/2"
_READABLE = (_FORMAT_1, _FORMAT_2, FORMAT)
# The numbers a scores file publishes that verify recomputes from state.db.
HEADLINE_KEYS = ("overall", "all_tasks_overall", "scored_overall", "accepted_overall", "scored_n", "n_tasks", "out_of_context_n",
                 "failed_n", "pending_n", "accepted_n", "complete")
# Batches whose request file went out to a provider (or online, for the sync transport).
_SENT = ("in_flight", "ended", "downloaded", "collected", "refused")


def _lines(path: Path) -> int:
    n = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            n += chunk.count(b"\n")
    return n


def _rel(path: Path, root: Path) -> str:
    try:
        return Path(os.path.relpath(Path(path).resolve(), root.resolve())).as_posix()
    except ValueError:  # another drive (Windows): keep it absolute
        return str(path)


def canonical_config(config: Config) -> dict[str, Any]:
    """The config file as parsed, keys sorted: what was asked for, byte-stable across formats."""
    text = config.path.read_text(encoding="utf-8")
    raw = json.loads(text) if config.path.suffix.lower() == ".json" else tomllib.loads(text)
    return json.loads(json.dumps(raw, sort_keys=True, ensure_ascii=False))


def _git_commit() -> str | None:
    """The commit of the batchrun checkout running this, if it runs from one (and git is there)."""
    here = Path(__file__).resolve().parent
    if not (here.parent / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "-C", str(here.parent), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    commit = out.stdout.strip()
    return commit if out.returncode == 0 and len(commit) == 40 else None


def build(store: Store, config: Config, results_files: Mapping[Path, str]) -> dict[str, Any]:
    """`results_files`: each results file's sha256, as written (results_files.publish)."""
    from .version import __version__

    root = config.path.resolve().parent
    ds_path = config.paths.dataset
    ds_sha = store.meta("dataset_sha256")
    n_records = store.scalar("SELECT n_tasks FROM datasets WHERE sha256 = ?", [ds_sha]) if ds_sha else None
    documents = [
        {"name": name, "path": _rel(config.paths.corpus / name, root), "sha256": sha, "chars": chars}
        for name, sha, chars in store.db.execute(
            """SELECT DISTINCT d.name, d.sha256, coalesce(r.chars, d.chars) FROM tasks t JOIN documents d ON d.sha256 = t.doc_sha256
               LEFT JOIN document_readings r ON r.sha256 = d.sha256 ORDER BY d.name""")
    ]
    routes = [
        {"route": r["route"], "role": r["role"], "policy_fingerprint": r["policy_fp"]}
        for r in store.rows("SELECT route, role, policy_fp FROM config_routes ORDER BY route")
    ]
    canonical = canonical_config(config)
    request_files = []
    # The checksums and line counts state.db recorded when each file was written (one request a
    # line): request files run to GBs, and re-reading them on every collect would cost minutes.
    for b in store.rows(f"SELECT id, request_file, blake3, sha256, n_requests, provider_batch_id FROM batches WHERE status IN {sql_list(_SENT)} ORDER BY seq"):
        checksum = RequestChecksum.of_batch(b)
        request_files.append({
            "batch": b["id"], "path": _rel(Path(b["request_file"]), root),
            **({checksum.algorithm: checksum.hexdigest} if checksum else {}),
            "lines": b["n_requests"], "provider_batch_id": b["provider_batch_id"],
        })
    # Those still on disk: a result file deleted before collect read it (the way out of a file
    # changed after its download, resume.refuse_changed_result_files) answered nothing published.
    provider_files = [
        {"batch": batch, "path": _rel(Path(path), root), "sha256": sha}
        for batch, path, sha in _recorded_provider_files(store) if Path(path).is_file()
    ]
    return {
        "format": FORMAT,
        "written_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "batchrun_version": __version__,
        "git_commit": _git_commit(),
        "rehearsal": store.meta("rehearsal"),
        "protocol": config.protocol,
        "protocol_note": config.protocol_note,
        "dataset": {"path": _rel(ds_path, root), "sha256": ds_sha, "records": n_records},
        "documents": documents,
        "config": {"path": _rel(config.path, root), "sha256": fingerprint(canonical), "canonical": canonical},
        "routes": routes,
        "prompt_templates": {"generation_sha256": GENERATION_TEMPLATE_SHA256, "judge_sha256": JUDGE_TEMPLATE_SHA256},
        "request_files": request_files,
        "provider_files": provider_files,
        "results_files": [{"path": _rel(p, root), "sha256": results_files[p]} for p in sorted(results_files)],
    }


def _recorded_provider_files(store: Store) -> list[tuple[str, str, str | None]]:
    """(batch, path, sha256 as downloaded) of every provider result and error file state.db
    recorded (poll, m015; sha256 None for a file downloaded before m015 recorded it)."""
    has_sha = any(r[1] == "result_files_sha256_json" for r in store.db.execute("PRAGMA table_info(batches)"))
    out = []
    for batch, files, shas in store.db.execute(
            f"SELECT id, result_files_json, {'result_files_sha256_json' if has_sha else 'NULL'} FROM batches "
            "WHERE result_files_json IS NOT NULL ORDER BY seq"):
        paths = json.loads(files or "[]")
        digests = json.loads(shas) if shas else [None] * len(paths)
        out += [(batch, path, sha) for path, sha in zip(paths, digests)]
    return out


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


def write(store: Store, config: Config, results_files: Mapping[Path, str]) -> Path:
    """results/manifest.json, written atomically (a reader never sees half of it), and only when
    something in it other than its `written_at` changed: a collect with nothing new leaves it as is."""
    from .results_files import publish

    path = config.paths.results / MANIFEST_NAME
    data = build(store, config, results_files)
    publish(store, path, data, fingerprint_of={k: v for k, v in data.items() if k != "written_at"},
            private=False)
    return path


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
    from .corpus import measure_file
    from .dataset import load_dataset

    try:
        m = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise DataError(f"{manifest_path} is not JSON ({e}).", "It is written by `batchrun collect`; restore the published one.") from e
    if not isinstance(m, dict) or m.get("format") not in _READABLE:
        found = m.get("format") if isinstance(m, dict) else None
        raise DataError(f"{manifest_path} is not a manifest this batchrun reads (format {found!r}; it reads {', '.join(_READABLE)}).",
                        "Verify it with the batchrun version that wrote it (its batchrun_version field).")
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
        algorithm = "blake3" if m["format"] != _FORMAT_1 and "blake3" in f else "sha256"
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
        rel = _rel(manifest_path, root)
        written = _record_for(records, manifest_path.resolve(), rel)
        actual = file_digest(manifest_path)
        v.check(written == actual, f"the manifest {rel} is not the one collect wrote (sha256 {actual[:12]}…, state.db recorded "
                                   f"{str(written)[:12]}…)")
    if store is not None:
        _verify_numbers(v, m, root, store, config)
    return v


def _verify_provider_files(v: Verification, m: dict[str, Any], root: Path, jobs: Path, store: Store | None, present: Any) -> None:
    """Each provider result and error file against the manifest's digest and state.db's record of
    it as downloaded; a file state.db recorded must be listed (manifests before /3 list none:
    then each is checked against state.db alone)."""
    recorded = ({(batch, Path(path).name): (path, sha) for batch, path, sha in _recorded_provider_files(store)}
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
        rel = _rel(path, root)
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
    from .schema import applied_names, known_migrations

    if known_migrations() - (applied_names(store.db.conn) or set()):
        v.notes.append("state.db has an older schema than this batchrun: the published numbers were not recomputed "
                       "(verify with the batchrun version that wrote them, or upgrade state.db with a writing command)")
        return
    from .outputs import leaderboard

    board = {r["route"]: r for r in leaderboard(store)}  # fills cells_now
    cells: dict[str, dict[str, tuple[str, Any]]] = {}
    for route, task_id, status, score in store.db.execute("SELECT route, task_id, status, score FROM cells_now"):
        cells.setdefault(route, {})[task_id] = (status, score)
    listed = {Path(f["path"]).name: f["path"] for f in m["results_files"]}
    for route, row in board.items():
        name = route.replace("/", "_") + ".scores.json"
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
        from .outputs import ZERO_FILLED

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
