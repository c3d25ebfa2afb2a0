"""A checksummed run manifest, and `batchrun verify`: anyone holding a published leaderboard can
check that its numbers come from these inputs.

`results/manifest.json` is written beside the results files every time they are: the dataset
file's sha256 and record count; each document's sha256 and length in characters; the config in
canonical form (and its sha256) with each route's policy fingerprint; the prompt templates'
sha256; each request file that went out, with its BLAKE3 checksum (its sha256 if it was planned
before batchrun recorded BLAKE3: checksums.py), line count and the provider batch id;
each results file's sha256; batchrun's version and, when run from a git checkout, the commit.

`verify` recomputes every checksum from the files present and compares them with the manifest and
with state.db (which recorded the request files' checksums before they were sent, and the
documents' when they were measured). Each mismatch is named. Paths in the manifest are relative to
the config file's folder (the project), so a project can be moved or published as a folder.
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
# /2: a request file's checksum is under "blake3" (under "sha256" for a file planned before
# m018_request_blake3); /1 had "sha256" only.
FORMAT = "batchrun-manifest/2"
_FORMAT_1 = "batchrun-manifest/1"
_READABLE = (_FORMAT_1, FORMAT)
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
    return {
        "format": FORMAT,
        "written_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "batchrun_version": __version__,
        "git_commit": _git_commit(),
        "rehearsal": store.meta("rehearsal"),
        "dataset": {"path": _rel(ds_path, root), "sha256": ds_sha, "records": n_records},
        "documents": documents,
        "config": {"path": _rel(config.path, root), "sha256": fingerprint(canonical), "canonical": canonical},
        "routes": routes,
        "prompt_templates": {"generation_sha256": GENERATION_TEMPLATE_SHA256, "judge_sha256": JUDGE_TEMPLATE_SHA256},
        "request_files": request_files,
        "results_files": [{"path": _rel(p, root), "sha256": results_files[p]} for p in sorted(results_files)],
    }


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
    v = Verification(rehearsal=m.get("rehearsal"))

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
    for f in m["results_files"]:
        if (path := present(f["path"], "the results file")) is not None:
            actual = file_digest(path)
            v.check(actual == f["sha256"], f"the results file {f['path']} has sha256 {actual[:12]}…, the manifest says {f['sha256'][:12]}…")
    return v
