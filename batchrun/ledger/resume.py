"""A resume that finds an input changed underneath work already sent refuses, naming the input.

Every request is built from inputs the run manifest lists: a document, a dataset record (the
question; for a judge, the question and rubric as the judge sees them), the route's settings in
the config (its policy fingerprint) and the prompt templates of the batchrun that planned it.
Its custom_id (or, for a judge, its `graded_sha256`) is a checksum of them, so an edit makes new
ids and the affected cells are planned again from the new inputs ("edit, re-plan"), while the
requests built from the old inputs never count again.

Where no batch exists at a provider yet that is all there is to it: a `planned` batch (or one
uploaded but not created: a quota hold) whose requests the inputs no longer want is superseded
(ledger), never sent. Work that has gone out is another matter. A batch in flight at the
provider (or a sync batch part-sent online) was built from the old inputs: resuming it silently would pay for answers that can never be
scored, and send the same cells again beside it. So the writers that resume work (plan, submit,
collect, refresh, retry, accept-failures) refuse, before anything is written, naming each changed
input and the batches built from it, with the two ways forward: put the input back as it was
(the batches go on), or `batchrun cancel --batch ID` each of them to take the new inputs.

Read-only: it compares the requests of such batches with the ids the current inputs make
(`ids.generation_custom_id`, `prompts.judge_graded_sha256`, the current policy fingerprints: the
command's resolved inputs, ledger/inputs.py),
and names the change from what state.db recorded at the last sync (`tasks`, `policies`). It runs
at the start of every sync (`ledger.sync_state`, inside its transaction) and in `poll` before a
sync batch's lines are sent. Batches of a route no longer in the config (or now idle) are left
to `poll` and `cancel`, as before.

The other two inputs the manifest lists are files batchrun wrote itself, checked by checksum: a
request file before any of it is sent (`submit.verify_request_file`), and a downloaded result
file before collect reads it (`send_back_lost_result_files`, against the sha256 poll recorded):
a result file changed or deleted since is downloaded again from the provider, which keeps the
results for weeks; only one nothing else holds (a sync batch's) is refused when changed.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..base.checksums import file_digest
from ..base.errors import StateError
from ..base.progress import SILENT, Progress
from ..protocol.config import Config
from .ids import generation_custom_id
from .inputs import Inputs
from .lifecycle import CANCEL_REQUESTED, REDOWNLOAD_GONE, REDOWNLOAD_PENDING, Status, move
from .store import Store, sql_list

# Batches a provider is running (or that poll is sending online) and that will go on if nothing
# stops them. `creating` is left out: whether the provider created it is settled by the next
# submit (adoption); it is `in_flight` (and checked) from then on. `uploading` and `uploaded` are
# left out too: no batch exists at the provider, so the sync supersedes them like planned ones
# (ledger.supersede_stale_batches; submit runs it again once uncertain creates are resolved).
STARTED = (Status.IN_FLIGHT,)
_WHERE = {Status.IN_FLIGHT: "in flight"}


@dataclass(frozen=True)
class Change:
    """One changed input: what it is (as a user names it), what changed, and how to put it back."""

    input: str  # "the document corpus/harbor.txt (tasks t1, t2)"
    detail: str  # "sha256 1a2b… when planned, 9f8e… now"
    restore: str  # "put corpus/harbor.txt back as it was (sha256 1a2b…)"


def _short(sha: str | None) -> str:
    return f"{sha[:12]}…" if sha else "?"


def _rel(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(path)


def _flatten(policy: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in policy.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


class _Changes:
    """What changed: the command's inputs against what state.db recorded of them at the last sync."""

    def __init__(self, store: Store, inputs: Inputs):
        config, corpus = inputs.config, inputs.require_corpus()
        self.store, self.config, self.corpus = store, config, corpus
        self.root = config.path.resolve().parent
        self.tasks = {t.task_id: t for t in corpus.dataset.tasks}
        self.old_tasks = {r["task_id"]: r for r in store.rows("SELECT task_id, question, corpus_file, doc_sha256, graded_sha256 FROM tasks")}
        # The routes that send (an idle judge sends nothing): their stage and current policy.
        self.policies: dict[str, tuple[str, dict[str, Any]]] = {
            name: (p.stage, p.policy) for name, p in inputs.policies.items() if p.role != "idle"}
        self.fps = {name: inputs.policy(name).fingerprint for name in self.policies}
        self._policy_changes: dict[tuple[str, str], Change] = {}
        # Asked once per request in flight (thousands): each path resolved, each task's graded
        # sha256 computed, once.
        self.dataset = _rel(corpus.dataset.path, self.root)
        self._graded: dict[str, str] = {}
        self._generation_changes: dict[tuple[str, str, str], Change | None] = {}

    def policy_change(self, route: str, stage: str, old_fp: str) -> Change | None:
        """The route's settings (or this batchrun's prompt template) differ from the request's."""
        cur = self.policies.get(route)
        if cur is None or cur[0] != stage or self.fps[route] == old_fp:
            return None
        key = (route, old_fp)
        if key not in self._policy_changes:  # once per route and old policy, not per request
            self._policy_changes[key] = self._policy_change(route, stage, old_fp, cur[1])
        return self._policy_changes[key]

    def _policy_change(self, route: str, stage: str, old_fp: str, policy: dict[str, Any]) -> Change:
        row = self.store.one("SELECT policy_json FROM policies WHERE fingerprint = ?", [old_fp])
        old = _flatten(json.loads(row["policy_json"])) if row else {}
        new = _flatten(policy)
        what = "generation" if stage == "gen" else "judge"
        if old.get("prompt_template_sha256") != new.get("prompt_template_sha256"):
            return Change(
                f"the {what} prompt template (route {route})",
                f"this batchrun builds {what} prompts from a template with sha256 {_short(new.get('prompt_template_sha256'))}, "
                f"the batchrun that planned them used {_short(old.get('prompt_template_sha256'))}",
                "finish these batches with the batchrun version that planned them",
            )
        diffs = [f"{k} {old.get(k)!r} then, {new.get(k)!r} now" for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
        return Change(
            f"the config {_rel(self.config.path, self.root)} (route {route})",
            "its policy changed: " + ("; ".join(diffs) if diffs else f"fingerprint {old_fp} then, {self.fps[route]} now"),
            f"restore route {route}'s settings in {_rel(self.config.path, self.root)}",
        )

    def generation_change(self, route: str, task_id: str, custom_id: str) -> Change | None:
        """The document or dataset record a generation request was built from changed (asked
        once per answer, not once per judge request grading it)."""
        key = (route, task_id, custom_id)
        if key not in self._generation_changes:
            self._generation_changes[key] = self._generation_change(route, task_id, custom_id)
        return self._generation_changes[key]

    def _generation_change(self, route: str, task_id: str, custom_id: str) -> Change | None:
        dataset = self.dataset
        t = self.tasks.get(task_id)
        if t is None:
            return Change(f"the dataset {dataset} (task {task_id})", "the task is no longer in the dataset",
                          f"put task {task_id} back in {dataset}")
        info = self.corpus.docs[t.corpus_file]
        if generation_custom_id(self.fps[route], t, info) == custom_id:
            return None
        old = self.old_tasks.get(task_id)
        if old is not None and old["corpus_file"] == t.corpus_file and old["doc_sha256"] != info.sha256:
            doc = _rel(self.corpus.paths[t.corpus_file], self.root)
            return Change(f"the document {doc}", f"sha256 {_short(old['doc_sha256'])} when planned, {_short(info.sha256)} now",
                          f"put {doc} back as it was (sha256 {old['doc_sha256']})")
        if old is not None and old["question"] != t.question:
            what = "its question changed"
        elif old is not None and old["corpus_file"] != t.corpus_file:
            what = f"its corpus_file changed ({old['corpus_file']} then, {t.corpus_file} now)"
        elif info.newlines_translated and generation_custom_id(self.fps[route], t, replace(info, newlines_translated=False)) == custom_id:
            # Same bytes, same question, read differently: planned by a batchrun before corpus.READING.
            doc = _rel(self.corpus.paths[t.corpus_file], self.root)
            return Change(f"the reading of the document {doc}", "this batchrun reads its line ends as the reference harness "
                          "does (\\r\\n as \\n), the batchrun that planned them did not",
                          "finish these batches with the batchrun version that planned them")
        else:
            # state.db already records the new inputs (a sync ran since): which of the two is unknown.
            doc = _rel(self.corpus.paths[t.corpus_file], self.root)
            return Change(f"the dataset {dataset} (task {task_id}) or the document {doc}", "its question or its document changed",
                          f"restore task {task_id} in {dataset} and {doc}")
        return Change(f"the dataset {dataset} (task {task_id})", what, f"restore task {task_id} in {dataset}")

    def judge_change(self, task_id: str, graded_sha256: str | None) -> Change | None:
        """The question or rubric a judge request grades changed."""
        t = self.tasks.get(task_id)
        dataset = self.dataset
        if t is None:
            return Change(f"the dataset {dataset} (task {task_id})", "the task is no longer in the dataset",
                          f"put task {task_id} back in {dataset}")
        if graded_sha256 is None:
            return None
        if task_id not in self._graded:
            # Imported here, once per task: an import statement runs the import machinery even
            # when the module is loaded, and this is asked once per judge request (86,000 a night).
            from ..protocol.prompts import judge_graded_sha256

            self._graded[task_id] = judge_graded_sha256(t.question, t.rubric)
        if self._graded[task_id] == graded_sha256:
            return None
        return Change(f"the dataset {dataset} (task {task_id})", "what the judges grade changed (the question or a rubric criterion)",
                      f"restore task {task_id} in {dataset}")


def changed_inputs(store: Store, inputs: Inputs,
                   statuses: tuple[Status, ...] = STARTED) -> dict[str, tuple[dict[str, Any], list[Change]]]:
    """For each batch in `statuses` (not cancelled by the user) that holds requests built from
    inputs that changed since: the batch and the changes (each input once), in batch order."""
    if "batches" not in store.db.table_names():
        return {}
    batches = {b["id"]: b for b in store.rows(
        f"""SELECT id, status, transport, n_requests, route FROM batches
            WHERE status IN {sql_list(statuses)} AND coalesce(provider_state, '') != ? ORDER BY seq""", [CANCEL_REQUESTED])}
    if not batches:
        return {}
    known = _Changes(store, inputs)
    if not _any_change(store, known, tuple(batches)):
        return {}
    found: dict[str, dict[str, Change]] = defaultdict(dict)
    rows = store.db.execute(
        f"""SELECT br.batch_id, q.custom_id, q.stage, q.route, q.task_id, q.policy_fp, q.graded_sha256,
                   p.custom_id AS parent_id, p.route AS parent_route, p.policy_fp AS parent_fp
            FROM batch_requests br JOIN requests q ON q.custom_id = br.custom_id
            LEFT JOIN requests p ON p.custom_id = q.parent_custom_id
            WHERE br.batch_id IN {sql_list(tuple(batches))}""")
    for batch_id, cid, stage, route, task_id, fp, graded, parent_id, parent_route, parent_fp in rows:
        if route not in known.policies:
            continue  # no longer in the config, or idle: poll and cancel deal with it, as before
        changes: list[Change | None] = [known.policy_change(route, stage, fp)]
        if stage == "gen" and changes[0] is None:
            changes.append(known.generation_change(route, task_id, cid))
        elif stage == "judge":
            if parent_id is not None and parent_route in known.policies:
                parent_policy = known.policy_change(parent_route, "gen", parent_fp)
                changes.append(parent_policy or known.generation_change(parent_route, task_id, parent_id))
            changes.append(known.judge_change(task_id, graded))
        for c in changes:
            if c is not None:
                found[batch_id].setdefault(c.input, c)
    return {bid: (batches[bid], list(found[bid].values())) for bid in batches if bid in found}


def _any_change(store: Store, known: _Changes, batch_ids: tuple[str, ...]) -> bool:
    """Whether changed_inputs would find anything: the same checks of the same requests, without
    its parent join. Nearly always nothing changed, and then this is the whole check; when
    something did, changed_inputs reads the requests again its own way, for the changes in its
    order. Each judge request's parent (an answer graded by every judge: 14,347 parents of
    81,000 judge requests at bench/ingest.py's night 2) is looked up once, not once per judge
    request: that night's check 0.54 -> 0.37 s (two B-tree descents by custom_id fewer a row)."""
    parents: set[tuple[str, str]] = set()  # (parent custom_id, the judge request's task)
    for cid, stage, route, task_id, fp, graded, parent_cid in store.db.execute(
            f"""SELECT q.custom_id, q.stage, q.route, q.task_id, q.policy_fp, q.graded_sha256, q.parent_custom_id
                FROM batch_requests br JOIN requests q ON q.custom_id = br.custom_id
                WHERE br.batch_id IN {sql_list(batch_ids)}"""):
        if route not in known.policies:
            continue
        if known.policy_change(route, stage, fp) is not None:
            return True
        if stage == "gen":
            if known.generation_change(route, task_id, cid) is not None:
                return True
        elif stage == "judge":
            if known.judge_change(task_id, graded) is not None:
                return True
            if parent_cid is not None:
                parents.add((parent_cid, task_id))
    found = {cid: (route, fp) for cid, route, fp in store.db.execute(
        "SELECT custom_id, route, policy_fp FROM requests WHERE custom_id IN (SELECT value FROM json_each(?))",
        [json.dumps(sorted({cid for cid, _ in parents}))])}
    for parent_cid, task_id in parents:
        if parent_cid not in found:
            continue  # no such request: the join in changed_inputs finds no parent either
        parent_route, parent_fp = found[parent_cid]
        if parent_route in known.policies and (known.policy_change(parent_route, "gen", parent_fp)
                                               or known.generation_change(parent_route, task_id, parent_cid)) is not None:
            return True
    return False


def refuse_changed_inputs(store: Store, inputs: Inputs) -> None:
    """StateError naming every input that changed under a started batch, and the fix."""
    stale = changed_inputs(store, inputs)
    if not stale:
        return
    changes: dict[str, Change] = {}
    built: dict[str, list[str]] = defaultdict(list)
    for bid, (_, cs) in stale.items():
        for c in cs:
            changes.setdefault(c.input, c)
            built[c.input].append(bid)
    lines = [f"  - {c.input}: {c.detail}; batches built from it: {', '.join(built[name])}" for name, c in changes.items()]
    batch_lines = [f"  - {bid} (route {b['route']}, {b['n_requests']} requests, "
                   + ("being sent online" if b["transport"] == "sync" and b["status"] == Status.IN_FLIGHT else _WHERE[Status(b["status"])]) + ")"
                   for bid, (b, _) in stale.items()]
    n = len(changes)
    message = (
        f"{'An input' if n == 1 else f'{n} inputs'} changed after work built from {'it' if n == 1 else 'them'} went to a provider; "
        "resuming would pay for answers that could never be scored (they answer the old inputs) and send the same cells again:\n"
        + "\n".join(lines) + "\nBatches:\n" + "\n".join(batch_lines)
    )
    cancels = " && ".join(f"batchrun cancel --batch {bid}" for bid in stale)
    restores = "; ".join(c.restore for c in changes.values())
    hint = (f"Either {restores}, and run again (the batches go on); or, to use the new inputs, run `{cancels}` "
            "(they stop at the provider; what they did not finish is not paid for) and run again: the affected cells are "
            "planned again from the new inputs. Nothing was changed.")
    raise StateError(message, hint)


# Why a downloaded result file is downloaded again rather than its requests sent (and paid for)
# again: each provider keeps a batch's results long after it ends.
# - OpenAI: the output and error files are Files API files, served by GET /v1/files/{id}/content
#   until they expire: "By default, files with purpose=batch expire after 30 days and all other
#   files are persisted until they are manually deleted" (the `expires_after` reference of
#   files.create); a batch's `output_expires_after` sets the output files' policy instead, "the
#   anchor is the file creation time", 1 h to 30 days (batches.create; provider-apis.md §2.6).
# - Anthropic: results are downloadable for 29 days after the batch's `created_at`
#   (platform.claude.com/docs/en/build-with-claude/batch-processing; provider-apis.md §3.5); then
#   the batch is still shown, with `archived_at`, "the time at which the Message Batch was archived
#   and its results became unavailable" (the Message Batch object's reference).
# - Gemini: the results are the batch's `responsesFile`, a Files API file, for as long as the batch
#   and the file exist; the docs give no retention for batch output (a user asked on
#   discuss.ai.google.dev/t/112404) and Files API files "are stored for 48 hours"
#   (ai.google.dev/gemini-api/docs/files), so a Gemini result file lost days later may be gone.
# Then, and only then, its requests are sent again: a 404 for a batch sent back here, from a
# provider that otherwise answers, means the results are gone (run.poll).
CHANGED_SUFFIX = ".changed"  # a changed result file is kept beside the new download, under this suffix


@dataclass(frozen=True)
class LostFile:
    """A downloaded result file collect cannot read as the provider's: gone, or changed since."""

    batch: dict[str, Any]
    path: Path
    name: str  # as the user names it: relative to the project
    changed: tuple[str, str] | None  # (sha256 recorded, sha256 now) if it changed; None if it is gone


def _lost_files(store: Store, config: Config, check_changes: bool) -> list[LostFile]:
    root = config.path.resolve().parent
    lost: list[LostFile] = []
    for b in store.rows("""SELECT id, route, transport, provider_batch_id, result_files_json, result_files_sha256_json, redownload
                           FROM batches WHERE status = ? ORDER BY seq""", [Status.DOWNLOADED]):
        # None for a file downloaded before batchrun recorded checksums (m015): nothing to compare with.
        shas = json.loads(b["result_files_sha256_json"] or "null") if check_changes else None
        for i, path in enumerate(json.loads(b["result_files_json"] or "[]")):
            p = Path(path)
            if not p.is_file():
                lost.append(LostFile(b, p, _rel(p, root), None))
            elif shas and i < len(shas) and (actual := file_digest(p)) != shas[i]:
                lost.append(LostFile(b, p, _rel(p, root), (shas[i], actual)))
    return lost


def _downloadable_again(b: dict[str, Any], config: Config) -> bool:
    """Whether the provider can hand the batch's results over again: a provider batch (a sync
    batch's file is batchrun's own record of online answers: nothing else holds them), of a route
    still in the config (poll follows no other), not already found gone."""
    return (b["transport"] != "sync" and bool(b["provider_batch_id"]) and b["route"] in config.routes
            and b["redownload"] != REDOWNLOAD_GONE)


def send_back_lost_result_files(store: Store, config: Config, *, check_changes: bool = True,
                                progress: Progress = SILENT, then: str = "downloading it again") -> list[str]:
    """Move each `downloaded` batch whose result file is gone (or, with `check_changes`, no longer
    the bytes poll recorded, m015) back to `ended`, for poll to download again; the batches moved.

    A changed file is kept beside the new download as NAME.changed. A changed file the provider
    cannot hand over again (a sync batch's, one whose results the provider no longer held) is
    refused with a StateError before anything is written: its answers would be scored as the
    provider's. A gone file that cannot be downloaded again reads as before (its requests have no
    result, and are sent again)."""
    lost = _lost_files(store, config, check_changes)
    for f in lost:
        if f.changed and not _downloadable_again(f.batch, config):
            then_sha, now_sha = f.changed
            raise StateError(
                f"The results file {f.name} of batch {f.batch['id']} changed after it was downloaded (sha256 {_short(then_sha)} then, "
                f"{_short(now_sha)} now). Refusing to read it: its answers would be scored as the provider's"
                + (", and the provider no longer holds the results to download again." if f.batch["redownload"] == REDOWNLOAD_GONE
                   else "."),
                f"Put {f.name} back as it was downloaded (sha256 {then_sha}) and run again; or delete it and run again: its requests "
                "then have no result and are sent again (and paid for again). Nothing was changed.",
            )
    moved: list[str] = []
    by_batch: dict[str, list[LostFile]] = defaultdict(list)
    for f in lost:
        if _downloadable_again(f.batch, config):
            by_batch[f.batch["id"]].append(f)
    for bid, files in by_batch.items():
        for f in files:
            if f.changed:
                # Kept, not overwritten: the evidence of what changed it (restored if the provider
                # no longer holds the results: results_gone).
                f.path.replace(f.path.with_name(f.path.name + CHANGED_SUFFIX))
        what = "; ".join(f"{f.name} {'changed after it was downloaded' if f.changed else 'was deleted'}" for f in files)
        move(store, bid, Status.ENDED, redownload=REDOWNLOAD_PENDING, download_attempts=0, download_truncated=None,
             error=f"result file lost before collect read it ({what}): downloaded again from the provider, not sent again")
        moved.append(bid)
        progress.event(f"{bid} (route {files[0].batch['route']}): {what} before collect read it; {then} from the provider "
                       "(its requests are not sent again)")
    return moved


def results_gone(store: Store, b: dict[str, Any], why: str) -> str:
    """A batch sent back for a new download whose results the provider no longer holds: back to
    `downloaded` with what is on disk (a changed file put back as it was, so collect refuses it as
    before), its missing lines then read as no result and sent again. The message said."""
    for path in json.loads(b["result_files_json"] or "[]"):
        kept = Path(path).with_name(Path(path).name + CHANGED_SUFFIX)
        if kept.is_file() and not Path(path).exists():
            kept.replace(path)
    message = (f"the result file was lost before collect read it and the provider no longer holds the results ({why}): "
               "its requests without a result are sent again")
    move(store, b["id"], Status.DOWNLOADED, redownload=REDOWNLOAD_GONE, downloaded_at=time.time(), error=message)
    return message
