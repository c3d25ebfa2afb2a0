"""Status and cancel: what is where, and stopping batches."""

from __future__ import annotations

import time
from collections.abc import Collection
from datetime import datetime, timezone
from typing import Any

from ..base.errors import BatchrunError
from ..ledger.diagnosis import open_problems
from ..ledger.lifecycle import CANCEL_REQUESTED, LIVE, NOT_CREATED, REDOWNLOAD_PENDING, SPENDING, Status, move, record
from ..ledger.store import Store, sql_list
from ..protocol.config import Config
from ..providers import get_adapter
from ..providers.clients import make_client
from .preflight import held_now


def status_data(store: Store, config: Config | None = None, routes_only: Collection[str] | None = None) -> dict[str, Any]:
    """What `batchrun status` shows: cells per route (in config order, then routes only state.db
    still knows), batches, live and planned batches, problems. `routes_only`: those routes' lines."""
    from ..publish.outputs import snapshot_cells

    snapshot_cells(store)  # the views, evaluated once: cells_now and requests_now below
    cells = store.rows("SELECT route, status, count(*) AS n FROM cells_now GROUP BY route, status ORDER BY route, status")
    routes: dict[str, dict[str, int]] = {}
    for r in cells:
        routes.setdefault(r["route"], {})[r["status"]] = r["n"]
    batches = store.rows("SELECT route, stage, status, count(*) AS n, coalesce(sum(n_requests), 0) AS requests FROM batches GROUP BY route, stage, status ORDER BY route, stage, status")
    live = store.rows(f"SELECT id, route, stage, status, provider_status, provider_state, provider_batch_id, n_requests, error, redownload "
                      f"FROM batches WHERE status IN {sql_list(LIVE)} ORDER BY seq")
    # Why a submit held each batch not created yet (its latest hold, migration m021).
    holds = {r["batch_id"]: r for r in store.rows(
        f"""SELECT h.batch_id, h.reason, h.held_at FROM batch_holds h JOIN batches b ON b.id = h.batch_id
            WHERE b.status IN {sql_list((*NOT_CREATED, Status.CREATING))}
              AND h.id = (SELECT max(id) FROM batch_holds WHERE batch_id = h.batch_id)""")}
    for b in live:
        hold = holds.get(b["id"])
        # A hold for the route's preflight reads the latest preflight: gone once the route passed.
        b["held"] = held_now(store, b["route"], hold["reason"]) if hold else None
        b["held_at"] = _iso(hold["held_at"]) if hold and b["held"] else None
        # The word status prints: planned batches are not sent yet; a cancelled one is cancelling
        # until a poll sees the provider end it.
        b["state"] = ("planned (not sent)" if b["status"] in NOT_CREATED
                      else "cancelling (requested)" if b["provider_state"] == CANCEL_REQUESTED and b["status"] == Status.IN_FLIGHT
                      # its result file was lost before collect read it (m024): the next poll downloads it again
                      else "ended (downloading the results again)" if b["redownload"] == REDOWNLOAD_PENDING and b["status"] == Status.ENDED
                      else b["status"])
    # A pending cell is either not sent yet (no batch, or a batch planned and not created) or in
    # flight (its generation request is in a batch created at the provider).
    pending = store.rows(
        f"""SELECT cs.route,
              sum(EXISTS (SELECT 1 FROM batch_requests br JOIN batches b ON b.id = br.batch_id
                          WHERE br.custom_id = cs.custom_id AND b.status IN {sql_list(SPENDING)})) AS in_flight,
              count(*) AS n
            FROM cells_now cs WHERE cs.status = 'pending' GROUP BY cs.route ORDER BY cs.route""")
    pending_split: dict[str, dict[str, Any]] = {
        r["route"]: {"unsent": r["n"] - r["in_flight"], "in_flight": r["in_flight"]} for r in pending}
    judges_backing_off: dict[str, dict[str, Any]] = {}
    if config is not None:
        # Of the unsent, those waiting out a backoff after a failure, and when the first goes again
        # (a route whose batch failed read "pending (unsent)" with nothing to say it waits, or till when).
        from ..ledger.pending import scan_pending

        for route, (n, at) in scan_pending(store, config, states="requests_now", estimates=False).backing_off_by_route.items():
            if route in pending_split:
                pending_split[route].update(backing_off=n, next_attempt_at=_iso(at))
            else:  # a judge route: its requests grade other routes' answers (their cells read "judging")
                judges_backing_off[route] = {"requests": n, "next_attempt_at": _iso(at)}
    problems = [{**p.as_json(), "text": p.describe()} for p in open_problems(store, config, requests="requests_now")]
    # Batches whose result file was accepted truncated (poll.MAX_DOWNLOAD_ATTEMPTS), named for
    # as long as a request of its unreadable tail is still open.
    # (request_status is read only when there is such a batch: the view evaluates every request.)
    truncated = store.rows(
        """SELECT b.id, b.route, b.stage, b.download_attempts, count(DISTINCT r.custom_id) AS open_requests
           FROM batches b JOIN results r ON r.batch_id = b.id AND r.kind = 'missing'
           JOIN request_status s ON s.custom_id = r.custom_id
           WHERE b.download_truncated = 1 AND s.state NOT IN ('ok', 'failed', 'accepted')
           GROUP BY b.id ORDER BY b.seq""") if store.scalar("SELECT 1 FROM batches WHERE download_truncated = 1 LIMIT 1") else []
    for t in truncated:
        t["text"] = (f"batch {t['id']} ({t['route']}): result file still truncated after {t['download_attempts']} download(s), "
                     f"accepted as it is; {t['open_requests']} request(s) of its unreadable tail are resubmitted")
    order = list(config.routes) if config is not None else []
    routes = dict(sorted(routes.items(), key=lambda kv: (order.index(kv[0]) if kv[0] in order else len(order), kv[0])))
    data: dict[str, Any] = {"cells": routes, "pending": pending_split, "judges_backing_off": judges_backing_off, "batches": batches,
            "in_flight": [b for b in live if b["status"] not in NOT_CREATED],
            "planned": [b for b in live if b["status"] in NOT_CREATED], "problems": problems, "truncated": truncated}
    if config is not None:
        data["judges_held"] = _judges_held(store, config, data)
    if routes_only is not None:
        keep = set(routes_only)
        data = {k: ({r: v for r, v in rows.items() if r in keep} if isinstance(rows, dict) else [x for x in rows if x["route"] in keep])
                for k, rows in data.items()}
    return data


def _judges_held(store: Store, config: Config, data: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Contestant route -> what holds up the judge routes grading its answers: each held judge
    batch holding some of them (a preflight hold, a refused create, the budget: why, since when, and
    how many of its requests grade this route's answers), and each judge route backing off after a
    failure while the route has answers waiting for their grades ("judging"). `status --route R`
    printed only R's own lines, where these cells read "judging" with nothing to say they wait."""
    panel = {j.name for j in config.judges}
    held = {b["id"]: b for b in data["planned"] if b["held"] and b["route"] in panel and b["stage"] == "judge"}
    out: dict[str, list[dict[str, Any]]] = {}
    if held:
        # A judge request names the answer it grades (parent_custom_id), whose request names the route.
        for r in store.rows(
                f"""SELECT br.batch_id, g.route, count(*) AS n FROM batch_requests br
                    JOIN requests j ON j.custom_id = br.custom_id JOIN requests g ON g.custom_id = j.parent_custom_id
                    WHERE br.batch_id IN ({', '.join('?' * len(held))}) GROUP BY br.batch_id, g.route ORDER BY br.batch_id""",
                list(held)):
            b = held[r["batch_id"]]
            out.setdefault(r["route"], []).append({"judge": b["route"], "batch": b["id"], "requests": r["n"], "held": b["held"],
                                                   "held_at": b["held_at"]})
    for route, counts in data["cells"].items():
        if counts.get("judging"):
            for judge, off in data["judges_backing_off"].items():
                out.setdefault(route, []).append({"judge": judge, "backing_off": off["requests"],
                                                  "next_attempt_at": off["next_attempt_at"]})
    return out


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="seconds")


def cancel(store: Store, config: Config, *, batch: str | None = None, route: str | None = None, all_: bool = False) -> list[str]:
    """Cancel live batches. Not-yet-created ones are withdrawn locally; created ones are cancelled
    at the provider (their unfinished requests come back as cancelled and are resubmitted by the
    next submit, per the protocol; remove a route from the config to stop it for good)."""
    if not (batch or route or all_):
        raise BatchrunError("Say what to cancel.", "Use --batch ID, --route NAME or --all.")
    known_routes = set(config.routes) | {r[0] for r in store.db.execute("SELECT DISTINCT route FROM batches")}
    if route and route not in known_routes:
        raise config.route_error(route, among=known_routes)
    where, params = [f"status IN {sql_list(LIVE)}"], []
    if batch:
        where.append("id = ?")
        params.append(batch)
    if route:
        where.append("route = ?")
        params.append(route)
    rows = store.rows(f"SELECT * FROM batches WHERE {' AND '.join(where)} ORDER BY seq", params)
    if batch and not rows:
        raise BatchrunError(f"No live batch {batch!r}.", "See `batchrun status` for the batches in flight.")
    done = []
    for b in rows:
        if b["status"] in NOT_CREATED or b["transport"] == "sync":
            move(store, b["id"], Status.WITHDRAWN, error="cancelled by the user before creation", collected_at=time.time())
        elif b["status"] == Status.IN_FLIGHT:
            r = config.routes[b["route"]]
            get_adapter(r.provider).cancel(make_client(r), r, b["provider_batch_id"])
            # Until the next poll sees it end, status says "cancelling (requested)".
            record(store, b["id"], provider_state=CANCEL_REQUESTED)
        else:
            continue
        done.append(b["id"])
    return done
