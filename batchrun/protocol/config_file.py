"""Reading the config file: `batchrun.toml` (or JSON with the same structure) into a `Config`.

Every key is checked: an unknown or mistyped key is an error naming the file, the key and the
fix, because a silently ignored setting in an overnight run is a night lost. Relative paths
resolve against the config file's folder. What a provider needs of a route (its key variable,
its base URL, its file limits, its API versions) is its adapter's to say. Each value is read by
config_values.Checker.
"""

from __future__ import annotations

import functools
import json
import os
import re
import tomllib
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..base.errors import ConfigError, did_you_mean
from ..base.redaction import know_key_variables
from ..base.userfiles import (
    DuplicateKey,
    NotRegularFile,
    NumberTooLong,
    TooDeep,
    file_kind,
    number_too_long,
    parse_json,
    printable_line,
    read_regular,
    reject_duplicate_keys,
)
from ..providers import PROVIDER_NAMES, Adapter, get_adapter, providers_where
from . import caps as capslib
from .config import (
    KEY_SHAPED,
    PANEL_SIZE,
    PROTOCOLS,
    ROLES,
    Config,
    ConfigWarning,
    Fallback,
    Generation,
    Judging,
    Paths,
    Price,
    PriceTier,
    Route,
    base_url_problem,
    results_stem,
)
from .config_values import Checker
from .policy import decoding

# File limits of the sync transport (requests, bytes): it sends its lines online, one by one, so
# only the local file is bounded. A batch route's limits are its provider's (Adapter.file_limits).
SYNC_LIMITS = (10_000, 2_000_000_000)

# Every provider accepts temperatures in 0..2 (Anthropic 0..1); anything else is a typo that would
# be sent to every request. Integers are bounded where they must survive JSON and SQLite.
MAX_TEMPERATURE = 2.0
_NUMBER_FIX = "Write that value with a few digits (every count, size and price in a config fits in 16)."
# A route name names files (results/<route>.responses.json): see its check in load.
MAX_ROUTE_NAME_BYTES = 200
# An environment variable's name (POSIX: letters, digits and underscores, not starting with a digit).
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# The key itself where its variable's name belongs (a clumsy paste): KEY_SHAPED (config.py; "AIza…"
# can be a valid variable name), and a long value that cannot be a name may be any key. Such a
# value is never repeated in the error (stderr ends up in cron mail and logs), nor kept.

DEFAULT_PATHS = {
    "dataset": "data/wildtrace_strict481.with_answers.json",
    "corpus": "corpus",
    "state": "state.db",
    "jobs": "jobs",
    "results": "results",
}

_TOP_KEYS = {"paths", "generation", "judging", "routes", "budget", "protocol"}
_ROUTE_KEYS = {
    "provider", "model", "role", "reasoning", "send_temperature", "caps", "transport", "endpoint",
    "endpoint_path", "base_url", "api_key_env", "api_version", "completion_window", "max_tokens",
    "max_requests_per_file", "max_bytes_per_file", "sync_concurrency", "price", "batch_discount",
    "chars_per_token", "max_enqueued_tokens", "max_batches_in_flight", "allow_insecure_http",
}


CONFIG_NAME = "batchrun.toml"


def find_config_path(explicit: str | os.PathLike[str] | None) -> Path:
    """The config file: `explicit` (--config), else BATCHRUN_CONFIG, else the nearest
    batchrun.toml in the current folder or above it, as git finds its .git (`cd data && batchrun
    status` works); `batchrun.toml` itself when there is none (load_config says it is missing).
    The config's paths are relative to its own folder (parse_config), wherever it was found."""
    if explicit:
        return Path(explicit)
    env = os.environ.get("BATCHRUN_CONFIG")
    if env:
        return Path(env)
    return discover_config() or Path(CONFIG_NAME)


def discover_config() -> Path | None:
    """batchrun.toml in the current folder (as the relative `batchrun.toml`, so messages read as
    before) or the nearest folder above it (absolute); None if no folder up to / has one.

    One found above that another user owns is refused, as git refuses a .git of "dubious
    ownership" (CVE-2022-24765): a config names the hosts the keys are sent to, and anyone can put
    a batchrun.toml in a shared folder such as /tmp above someone's working folder."""
    try:
        cwd = Path.cwd()
    except OSError:  # the current folder was deleted under us: no folder to look up from
        return None
    for folder in (cwd, *cwd.parents):
        candidate = folder / CONFIG_NAME
        try:
            if not candidate.exists():  # a folder or a FIFO of that name is load_config's to refuse
                continue
            if folder == cwd:
                return Path(CONFIG_NAME)
            owner = candidate.stat().st_uid
        except OSError:  # a folder above we may not look into: keep climbing
            continue
        if hasattr(os, "getuid") and owner != os.getuid():
            raise ConfigError(f"{candidate}, found above the current folder, belongs to another user (uid {owner}); batchrun "
                              "does not use a config someone else could have put there (it names where your keys are sent).",
                              f"If you trust it, pass --config {candidate} (or set BATCHRUN_CONFIG); else run batchrun "
                              "in your project's folder.")
        return candidate
    return None


def load_config(path: str | os.PathLike[str] | None = None) -> Config:
    """Read and validate a config file (TOML, or JSON by extension or content)."""
    path = find_config_path(path)
    if not path.exists():
        raise ConfigError(
            f"Config file {path} not found.",
            "Run batchrun in the folder holding batchrun.toml (or a folder below it), pass --config PATH, or set BATCHRUN_CONFIG.",
        )
    try:
        text = read_regular(path).decode("utf-8")
    except NotRegularFile as e:
        raise ConfigError(f"Config file {e}.", "Pass --config the path of the batchrun.toml file itself.")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"Cannot read config file {path}: {e}", "Check the file's permissions and that it is UTF-8.")
    try:
        if path.suffix.lower() == ".json":
            # json keeps the last of two equal keys without a word: two [routes."x"] tables or two
            # temperatures would silently lose one (TOML refuses duplicates itself).
            raw = parse_json(text, object_pairs_hook=reject_duplicate_keys)
        else:
            raw = tomllib.loads(text)
    except DuplicateKey as e:
        raise ConfigError(f"{path}: the key {e.key!r} appears twice in the same object; JSON would keep only the last one.",
                          "Remove one of the two (or merge them), so the config says one thing.")
    except (TooDeep, RecursionError):  # tomllib recurses too
        raise ConfigError(f"{path}: nested thousands of levels deep; this is not a batchrun config.", "See the config reference in README.md.")
    except NumberTooLong as e:
        raise ConfigError(f"{path}: line {e.lineno}, column {e.colno}: {e.msg}.", _NUMBER_FIX)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}: line {e.lineno}, column {e.colno}: invalid JSON: {e.msg}.", "Fix the JSON syntax at that position.")
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: invalid TOML: {e}.", "Fix the TOML syntax at that position.")
    except ValueError as e:  # tomllib's int() past Python's int-string limit: no position of its own
        if (too_long := number_too_long(text, e)) is None:
            raise
        raise ConfigError(f"{path}: line {too_long.lineno}, column {too_long.colno}: {too_long.msg}.", _NUMBER_FIX)
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a table/object.", "See the config reference in README.md.")
    return parse_config(raw, path)


def parse_config(raw: dict[str, Any], path: Path) -> Config:
    c = Checker(path)
    c.unknown(raw, _TOP_KEYS, "")
    root = path.resolve().parent
    paths = c.section(lambda: _parse_paths(c, raw, root))
    generation = c.section(lambda: _parse_generation(c, raw))
    judging = c.section(lambda: _parse_judging(c, raw))
    protocol = c.string(raw, "protocol", "", "wildtrace", choices=PROTOCOLS)

    routes: dict[str, Route] = {}
    broken: set[str] = set()  # routes with a problem: not named again as "not defined" below
    rraw = c.section(lambda: c.table(raw.get("routes"), "routes"))
    for name, r in (rraw or {}).items():
        if not name or not printable_line(name):
            # Route names become folder names, SQL values, log lines and Markdown table cells.
            c.problems.append(c.fail(f"routes.{name!r}", "is not a usable route name: it must be non-empty, printable and on one line",
                                     'Rename the route, e.g. [routes."gpt-5.5"].'))
            broken.add(name)
            continue
        if len(name.encode("utf-8")) > MAX_ROUTE_NAME_BYTES:
            # results/<route>.responses.json (and its temporary twin, 27 bytes longer) must fit in
            # one file name: at most 255 bytes on Linux, macOS and Windows file systems (NAME_MAX).
            c.problems.append(c.fail(f"routes.{name[:40]!r}…", f"is {len(name.encode('utf-8')):,} bytes long; a route name "
                                     f"names its results files, and may be at most {MAX_ROUTE_NAME_BYTES} bytes",
                                     'Rename the route, e.g. [routes."gpt-5.5"].'))
            broken.add(name)
            continue
        route = c.section(functools.partial(_parse_route, c, name, r))
        if route is None:
            broken.add(name)
        else:
            routes[name] = route
    stems: dict[str, str] = {}
    for name in routes:
        # Two routes whose results files have one name would overwrite each other's published
        # results ("q/x" and "q_x"; "GPT" and "gpt" on the case-insensitive file systems macOS
        # and Windows use by default).
        other = stems.setdefault(results_stem(name).casefold(), name)
        if other != name:
            c.problems.append(c.fail(f"routes.{name!r}", f"would write the same results files as route {other!r} "
                                     f"(results/{results_stem(other)}.scores.json)", "Rename one of the two routes."))
    if rraw == {}:  # (None: [routes] is not a table, said above)
        c.problems.append(c.fail("routes", "defines no route", 'Add at least one [routes."name"] table with provider and model.'))
    if judging is not None:
        # Every route the config defines, those with a problem of their own too (a misspelt
        # provider): the panel's misspelt name is guessed among them all.
        defined = [name for name in (rraw or {}) if name and printable_line(name)]
        for judge in judging.panel:
            if judge not in routes and judge not in broken:
                c.problems.append(c.fail(
                    "judging.panel",
                    f"names route {judge!r}, which is not defined",
                    f'{did_you_mean(str(judge), defined)}Add a [routes."{judge}"] table or remove it from the panel '
                    f'(defined routes: {", ".join(defined)}).',
                ))
        _check_roles(c, judging, routes)
        if protocol == "wildtrace":
            _check_panel(c, judging, routes, broken)
    if paths is not None and generation is not None and judging is not None:
        _check_sampling(c, Config(path=path, paths=paths, generation=generation, judging=judging, routes=routes))
    budget = c.number(raw, "budget", "", None, allow_none=True)
    c.raise_problems()
    config = Config(path=path, paths=paths, generation=generation, judging=judging, routes=routes, budget=budget,
                    protocol=protocol)
    # Every key variable the config names is redacted from whatever batchrun stores or prints, and
    # every variable a provider's SDK reads a key from besides (Adapter.alt_key_env).
    know_key_variables(r.api_key_env for r in routes.values())
    know_key_variables(name for name in (get_adapter(p).alt_key_env for p in PROVIDER_NAMES) if name)
    return replace(config, warnings=tuple(w for name in routes if (w := _route_warning(config, name)) is not None))


def _parse_paths(c: Checker, raw: dict[str, Any], root: Path) -> Paths:
    praw = c.table(raw.get("paths"), "paths")
    c.unknown(praw, set(DEFAULT_PATHS), "paths")
    resolved = {}
    for key, default in DEFAULT_PATHS.items():
        value = c.string(praw, key, "paths", default)
        resolved[key] = (root / value) if not Path(value).is_absolute() else Path(value)
    paths = Paths(**resolved)
    _check_paths(c, paths)
    return paths


def _parse_generation(c: Checker, raw: dict[str, Any]) -> Generation:
    graw = c.table(raw.get("generation"), "generation")
    c.unknown(graw, {"temperature", "max_tokens", "reasoning_max_tokens", "max_retries", "max_resubmits"}, "generation")
    g = Generation()  # the defaults
    return Generation(
        temperature=c.number(graw, "temperature", "generation", g.temperature, maximum=MAX_TEMPERATURE),
        max_tokens=c.number(graw, "max_tokens", "generation", g.max_tokens, integer=True, minimum=1),
        reasoning_max_tokens=c.number(graw, "reasoning_max_tokens", "generation", g.reasoning_max_tokens, integer=True, minimum=1),
        max_retries=c.number(graw, "max_retries", "generation", g.max_retries, integer=True),
        max_resubmits=c.number(graw, "max_resubmits", "generation", g.max_resubmits, integer=True),
    )


def _parse_judging(c: Checker, raw: dict[str, Any]) -> Judging:
    jraw = c.table(raw.get("judging"), "judging")
    c.unknown(jraw, {"panel", "temperature", "max_tokens", "max_retries_per_run"}, "judging")
    panel = jraw.get("panel", [])
    if not isinstance(panel, list) or not all(isinstance(p, str) for p in panel):
        raise c.fail("judging.panel", "must be a list of route names", 'Write panel = ["judge-a", "judge-b", "judge-c"].')
    if len(set(panel)) != len(panel):
        raise c.fail("judging.panel", "names a route twice", "List each judge route once.")
    j = Judging()  # the defaults
    return Judging(
        panel=tuple(panel),
        temperature=c.number(jraw, "temperature", "judging", j.temperature, maximum=MAX_TEMPERATURE),
        max_tokens=c.number(jraw, "max_tokens", "judging", j.max_tokens, integer=True, minimum=1),
        max_retries_per_run=c.number(jraw, "max_retries_per_run", "judging", j.max_retries_per_run, integer=True),
    )


def _check_paths(c: Checker, paths: Paths) -> None:
    """What already exists at a configured path must be of the right kind: otherwise the first
    write fails mid-command (a folder where state.db should be, a file where jobs/ should be)."""
    state = paths.state
    if state.exists() and not state.is_file():
        kind = file_kind(state.stat().st_mode)
        raise c.fail("paths.state", f"is {state}, which is {kind}; it must be the SQLite database file",
                     f'Set state to a file name, e.g. state = "{(state / "state.db") if state.is_dir() else "state.db"}".')
    if state.parent.exists() and not state.parent.is_dir():
        raise c.fail("paths.state", f"is {state}, inside {state.parent}, which is not a folder", "Point state at a file in a folder.")
    for key in ("jobs", "results", "corpus"):
        folder = getattr(paths, key)
        if folder.exists() and not folder.is_dir():
            raise c.fail(f"paths.{key}", f"is {folder}, which is {'a file' if folder.is_file() else file_kind(folder.stat().st_mode)}; it must be a folder",
                         f"Move that file away, or set {key} to a folder path.")


def _check_roles(c: Checker, judging: Judging, routes: dict[str, Route]) -> None:
    """The WildTrace protocol's panel is non-contestant. A judge is never a contestant, and no contestant is
    graded by its own model, however the two routes spell it or whoever serves them."""
    for name in judging.panel:
        if name in routes and routes[name].role == "contestant":
            c.problems.append(c.fail(
                f'routes."{name}".role',
                'is "contestant", but the route is in judging.panel (a judge is never a contestant, spec §4)',
                f'Set role = "judge" to keep it judging, or remove "{name}" from judging.panel to put it on the leaderboard.',
            ))
    for name, route in routes.items():
        if name in judging.panel or route.role == "judge":
            continue
        for judge in judging.panel:
            if judge in routes and capslib.same_model(route.model, routes[judge].model):
                c.problems.append(c.fail(
                    f'routes."{name}".model',
                    f"is {route.model!r}, the same model as judge route {judge!r} ({routes[judge].model!r}) of judging.panel; "
                    "the panel must not grade its own model (spec §4: non-contestant panel)",
                    f'Remove route "{name}" (or set role = "judge" on it to keep it idle), or replace "{judge}" in '
                    "judging.panel with a judge of another model.",
                ))


def _check_panel(c: Checker, judging: Judging, routes: dict[str, Route], broken: set[str]) -> None:
    """Spec 001 §4: each answer is graded by three judges that are not on the leaderboard. So the
    panel is exactly three judge routes of three distinct models (compared as the caps table
    compares them: caps.same_model), none a contestant (_check_roles). Another panel is a
    deliberate choice the config must state (`protocol = "custom"`), never an accident."""
    custom = ('To run another panel deliberately, add protocol = "custom" at the top of the config: every output '
              "then says its numbers are not WildTrace-protocol numbers.")
    panel = judging.panel
    if len(panel) != PANEL_SIZE:
        named = f"{len(panel)} judge route(s) ({', '.join(panel)})" if panel else "no judge route"
        c.problems.append(c.fail(
            "judging.panel",
            f"names {named}; the WildTrace protocol grades every answer with exactly {PANEL_SIZE} judges of {PANEL_SIZE} "
            "distinct models, none a contestant (spec 001 §4)",
            f'Name {PANEL_SIZE} judge routes of {PANEL_SIZE} different models, e.g. the paper\'s panel: '
            'panel = ["judge-sonnet", "judge-qwen", "judge-flash"] (claude-sonnet-4-6, qwen3.5-plus, gemini-2.5-flash). '
            + custom))
    known = [j for j in panel if j in routes and j not in broken]
    for i, a in enumerate(known):
        for b in known[i + 1:]:
            if capslib.same_model(routes[a].model, routes[b].model):
                c.problems.append(c.fail(
                    "judging.panel",
                    f"names judge routes {a!r} ({routes[a].model!r}) and {b!r} ({routes[b].model!r}), which are the same "
                    f"model ({capslib.normalise_model(routes[a].model)}); the protocol's {PANEL_SIZE} judges are "
                    f"{PANEL_SIZE} distinct models (spec 001 §4)",
                    f"Replace {b!r} in judging.panel with a judge route of another model. " + custom))


def _check_sampling(c: Checker, config: Config) -> None:
    """What each route would send, in the range its provider accepts (Adapter.temperature_range,
    min_output_tokens): a value outside it is refused on every request, found at 2 a.m. otherwise.
    Per route, because the temperature and budget are the [generation] or [judging] ones by role."""
    for name, route in config.routes.items():
        role = config.role_of(name)
        if role == "idle":
            continue  # sends nothing
        adapter = get_adapter(route.provider)
        where = f'routes."{name}"'
        section = "generation" if role == "contestant" else "judging"
        temperature, budget = decoding(config, name)
        low, high = adapter.temperature_range
        if temperature is not None and not low <= temperature <= high:
            c.problems.append(c.fail(
                where, f"would send temperature {temperature} ([{section}].temperature), outside the {low:g} to {high:g} "
                f"that {route.provider} accepts",
                f"Set [{section}].temperature to at most {high:g} (the protocol's is 0.1), or send_temperature = false under "
                f"[{where}] if this model takes none (spec §2)."))
        least = adapter.min_output_tokens(route)
        if budget < least:
            key = "max_tokens" if role == "contestant" and route.max_tokens is not None else f"[{section}] max_tokens"
            c.problems.append(c.fail(
                where, f"would send a completion budget of {budget} tokens ({key}), below the {least} that its endpoint accepts",
                f"Set {key} to at least {least}."))


def _route_warning(config: Config, name: str) -> ConfigWarning | None:
    """The built-in rules that fell back for this route, by what the route is used for: a judge
    never gets a document (no caps), an idle route is sent nothing (only the notice that it is idle)."""
    route = config.routes[name]
    role = config.role_of(name)
    where = f'[routes."{name}"]'
    fallbacks: list[Fallback] = []
    if role == "idle":
        fallbacks.append(Fallback(
            "idle",
            'idle: role = "judge" but not in judging.panel, so nothing is sent for it and it is not on the '
            f"leaderboard. Add it to judging.panel to judge with it, or remove {where}.",
        ))
    if role == "contestant" and route.caps.source.startswith("default"):
        fallbacks.append(Fallback(
            "caps",
            f"caps: default row {route.caps.en:,} / {route.caps.cjk:,} characters (not in the built-in caps table). "
            f"Probe its real context window (`batchrun probe {name}`, then --write) or set caps = {{ en = ..., cjk = ... }} "
            f"under {where} (spec §3: never inherit an older version's cap).",
        ))
    if role != "idle" and route.send_temperature_source == "default" and not capslib.known_model(route.model):
        fallbacks.append(Fallback(
            "temperature",
            "temperature: sent (not in the built-in list of models that reject it). If this model rejects "
            f"temperature, set send_temperature = false under {where}; if it accepts it, send_temperature = true "
            "says so (spec §2).",
        ))
    return ConfigWarning(config.path, name, route.model, tuple(fallbacks)) if fallbacks else None


def _providers_text(capability: Callable[[Adapter], object]) -> str:
    """'provider = "x"' (or several, joined by "or") for the providers with a capability."""
    return " or ".join(f'provider = "{name}"' for name in providers_where(capability))


def _parse_route(c: Checker, name: str, r: Any) -> Route:
    where = f'routes."{name}"'
    if not isinstance(r, dict):
        raise c.fail(where, "must be a table", f'Write [routes."{name}"] with provider and model keys.')
    c.unknown(r, _ROUTE_KEYS, where)
    if "provider" not in r:
        raise c.fail(f"{where}.provider", "is missing", f"Set provider to one of: {', '.join(PROVIDER_NAMES)}.")
    provider = c.string(r, "provider", where, None, PROVIDER_NAMES)
    adapter = get_adapter(provider)
    if "model" not in r:
        raise c.fail(f"{where}.model", "is missing", 'Set model = "<the provider\'s model name>".')
    model = c.string(r, "model", where, None)

    role = c.string(r, "role", where, None, ROLES)

    # Caps: config override, else the paper's table, else the default row (warned about once,
    # for contestants: see _route_warning).
    builtin = capslib.builtin_caps(model)
    if "caps" in r:
        craw = c.table(r["caps"], f"{where}.caps")
        c.unknown(craw, {"en", "cjk"}, f"{where}.caps")
        base = builtin or capslib.Caps(*capslib.DEFAULT_CAPS, "default")
        en = c.number(craw, "en", f"{where}.caps", base.en, integer=True, minimum=1)
        cjk = c.number(craw, "cjk", f"{where}.caps", base.cjk, integer=True, minimum=1)
        route_caps = capslib.Caps(en, cjk, "config")
    elif builtin:
        route_caps = builtin
    else:
        route_caps = capslib.Caps(*capslib.DEFAULT_CAPS, "default (unlisted model)")

    # A Route's field defaults are the config's defaults (Route.<field> is the default value).
    transport = c.string(r, "transport", where, Route.transport, ("batch", "sync"))
    endpoint = c.string(r, "endpoint", where, Route.endpoint, ("chat", "responses"))
    if endpoint not in adapter.endpoints:
        raise c.fail(f"{where}.endpoint", f"can be \"{endpoint}\" only for {_providers_text(lambda a: endpoint in a.endpoints)}",
                     'Remove endpoint or set it to "chat".')
    default_path = "/v1/responses" if endpoint == "responses" else Route.endpoint_path
    endpoint_path = c.string(r, "endpoint_path", where, default_path)
    if not endpoint_path.startswith("/"):
        raise c.fail(f"{where}.endpoint_path", "must start with /", 'For example endpoint_path = "/v4/chat/completions".')

    api_version = None
    if adapter.default_api_version is not None:
        api_version = c.string(r, "api_version", where, adapter.default_api_version)
    elif "api_version" in r:
        raise c.fail(f"{where}.api_version", f"applies only to {_providers_text(lambda a: a.default_api_version is not None)}", "Remove it.")

    if "send_temperature" in r:
        send_temperature = c.boolean(r, "send_temperature", where, True)
        source = "config"
    else:
        send_temperature = not capslib.rejects_temperature(model)
        source = "built-in list" if not send_temperature else "default"
    if api_version in adapter.no_sampling_api_versions and send_temperature:
        raise c.fail(
            where,
            f"uses api_version = \"{api_version}\", which rejects temperature on every model, while it sends temperature",
            f'The protocol sends temperature 0.1 to models that accept it, which needs api_version = "{adapter.default_api_version}" '
            '(the default); or set send_temperature = false if this model rejects temperature anyway.',
        )

    base_url = c.string(r, "base_url", where, None)
    allow_insecure_http = c.boolean(r, "allow_insecure_http", where, False)
    if base_url is not None and (problem := base_url_problem(base_url, allow_insecure=allow_insecure_http)):
        raise c.fail(f"{where}.base_url", *problem)
    if not adapter.default_key_env and "api_key_env" not in r:
        raise c.fail(
            f"{where}.api_key_env",
            f"is required for {provider} routes",
            'Name the environment variable holding this provider\'s key, e.g. api_key_env = "DASHSCOPE_API_KEY" '
            "(batchrun never sends one provider's key to another).",
        )
    if adapter.default_host is None and not base_url:
        raise c.fail(f"{where}.base_url", f"is required for {provider} routes", 'Set base_url = "https://.../v1" (the provider\'s base URL).')
    api_key_env = c.string(r, "api_key_env", where, adapter.default_key_env)
    if KEY_SHAPED.match(api_key_env) or (not ENV_NAME.fullmatch(api_key_env) and len(api_key_env) >= 16):
        raise c.fail(f"{where}.api_key_env", "looks like an API key itself, not the name of an environment variable (not shown here)",
                     "Put the key in an environment variable (export MY_PROVIDER_KEY=...), name that variable here "
                     "(api_key_env = \"MY_PROVIDER_KEY\"), and remove the key from the config file.")
    if not ENV_NAME.fullmatch(api_key_env):
        # "A B" or "A=B" can never be set in an environment (POSIX: a name is letters, digits and
        # underscores, not starting with a digit), so the route could only ever fail for a missing key.
        raise c.fail(f"{where}.api_key_env", f"is {api_key_env!r}, which is not the name of an environment variable",
                     "Use letters, digits and underscores, not starting with a digit, e.g. api_key_env = \"DASHSCOPE_API_KEY\".")

    limit_n, limit_bytes = SYNC_LIMITS if transport == "sync" else adapter.file_limits
    max_n = c.number(r, "max_requests_per_file", where, limit_n, integer=True, minimum=1)
    max_bytes = c.number(r, "max_bytes_per_file", where, limit_bytes, integer=True, minimum=1024)
    if max_n > limit_n or max_bytes > limit_bytes:
        raise c.fail(where, f"sets file limits above the provider's ({limit_n:,} requests / {limit_bytes:,} bytes)", "Limits can only be lowered per route.")

    price = Price()
    if "price" in r:
        praw = c.table(r["price"], f"{where}.price")
        c.unknown(praw, {"input", "output", "tiers"}, f"{where}.price")
        tiers = []
        tier_list = c.array(praw.get("tiers"), f"{where}.price.tiers",
                            "tiers = [{ above_input_tokens = 200000, input = 2.5, output = 15.0 }]")
        for i, t in enumerate(tier_list):
            tw = f"{where}.price.tiers[{i}]"
            t = c.table(t, tw)
            c.unknown(t, {"above_input_tokens", "input", "output"}, tw)
            for k in ("above_input_tokens", "input", "output"):
                if k not in t:
                    raise c.fail(f"{tw}.{k}", "is missing", "Each tier needs above_input_tokens, input and output.")
            tiers.append(PriceTier(c.number(t, "above_input_tokens", tw, 0, integer=True), c.number(t, "input", tw, 0.0), c.number(t, "output", tw, 0.0)))
        price = Price(
            input=c.number(praw, "input", f"{where}.price", None, allow_none=True),
            output=c.number(praw, "output", f"{where}.price", None, allow_none=True),
            tiers=tuple(sorted(tiers, key=lambda t: t.above_input_tokens)),
        )
    cpt = Route.chars_per_token
    if "chars_per_token" in r:
        craw = c.table(r["chars_per_token"], f"{where}.chars_per_token")
        c.unknown(craw, {"en", "cjk"}, f"{where}.chars_per_token")
        cpt = (c.number(craw, "en", f"{where}.chars_per_token", cpt[0], minimum=0.1),
               c.number(craw, "cjk", f"{where}.chars_per_token", cpt[1], minimum=0.1))

    route = Route(
        name=name,
        provider=provider,
        model=model,
        role=role,
        reasoning=c.boolean(r, "reasoning", where, Route.reasoning),
        send_temperature=send_temperature,
        send_temperature_source=source,
        caps=route_caps,
        transport=transport,
        endpoint=endpoint,
        endpoint_path=endpoint_path,
        base_url=base_url,
        api_key_env=api_key_env,
        api_version=api_version,
        completion_window=c.string(r, "completion_window", where, Route.completion_window),
        max_tokens=c.number(r, "max_tokens", where, None, integer=True, minimum=1, allow_none=True),
        max_requests_per_file=max_n,
        max_bytes_per_file=max_bytes,
        sync_concurrency=c.number(r, "sync_concurrency", where, Route.sync_concurrency, integer=True, minimum=1),
        price=price,
        batch_discount=c.number(r, "batch_discount", where, Route.batch_discount if transport == "batch" else 1.0, maximum=1.0),
        chars_per_token=cpt,
        max_enqueued_tokens=c.number(r, "max_enqueued_tokens", where, None, integer=True, minimum=1, allow_none=True),
        max_batches_in_flight=c.number(r, "max_batches_in_flight", where, None, integer=True, minimum=1, allow_none=True),
    )
    # What the provider's API would refuse (its adapter says), each reported with the others.
    if "endpoint_path" in r and not adapter.uses_endpoint_path:
        c.problems.append(c.fail(f"{where}.endpoint_path", f"applies only to {_providers_text(lambda a: a.uses_endpoint_path)}",
                                 f"Remove it: {provider} requests go to the provider's own endpoint."))
    elif problem := adapter.endpoint_path_problem(route):
        c.problems.append(c.fail(f"{where}.endpoint_path", *problem))
    if problem := adapter.completion_window_problem(route):
        c.problems.append(c.fail(f"{where}.completion_window", *problem))
    return route
