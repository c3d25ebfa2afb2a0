"""The config: paths, protocol defaults, the judge panel and the routes (config_file.py reads it).

What each route's settings make of its requests (its policy and fingerprint) is policy.py's.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from ..base.errors import ConfigError, did_you_mean
from ..providers import get_adapter
from . import caps as capslib

Transport = Literal["batch", "sync"]
Role = Literal["contestant", "judge"]
ROLES: tuple[str, ...] = ("contestant", "judge")
# The top-level `protocol` key: "wildtrace" (the default) holds the config to the protocol's
# panel (spec 001 §4: three judges of three distinct models, none a contestant); "custom" is the
# maintainer's declaration that it runs another panel, and every output then says its numbers are
# not WildTrace-protocol numbers.
Protocol = Literal["wildtrace", "custom"]
PROTOCOLS: tuple[str, ...] = ("wildtrace", "custom")
PANEL_SIZE = 3

# Rehearsals (--emulator) keep their state.db, jobs/ and results/ in a folder of this name beside
# each configured path: <parent>/rehearsal/<name>. Emulator answers then cannot reach the real
# state.db by construction, and a person listing the project folder sees which is which.
REHEARSAL_DIR = "rehearsal"


def results_stem(route: str) -> str:
    """The name a route's results files start with: results/<stem>.responses.json, .scores.json."""
    return route.replace("/", "_")


def rehearsal_path(path: Path) -> Path:
    """Where a rehearsal keeps what a real run keeps at `path`."""
    return path.parent / REHEARSAL_DIR / path.name


@dataclass(frozen=True)
class Paths:
    dataset: Path
    corpus: Path
    state: Path
    jobs: Path
    results: Path


@dataclass(frozen=True)
class Generation:
    temperature: float = 0.1
    max_tokens: int = 8192
    reasoning_max_tokens: int = 32768
    max_retries: int = 5  # transient errors (429, 5xx, overloaded, timeouts), per request
    max_resubmits: int = 3  # requests a batch expired or cancelled; separate from max_retries


@dataclass(frozen=True)
class Judging:
    panel: tuple[str, ...] = ()
    temperature: float = 0.1
    max_tokens: int = 16384
    max_retries_per_run: int = 3  # judge infrastructure failures are retried, bounded per run


@dataclass(frozen=True)
class PriceTier:
    above_input_tokens: int
    input: float
    output: float


@dataclass(frozen=True)
class Price:
    """Dollars per million tokens at the online rate; None = unknown (never shown as $0)."""

    input: float | None = None
    output: float | None = None
    tiers: tuple[PriceTier, ...] = ()

    @property
    def known(self) -> bool:
        return self.input is not None and self.output is not None


@dataclass(frozen=True)
class Route:
    name: str
    provider: str  # a name in providers.PROVIDER_NAMES
    model: str
    # As written in the config; None = inferred from judging.panel. Kept apart from the effective
    # role (Config.role_of) because only an explicit role may turn a former judge into a contestant.
    role: Role | None = None
    reasoning: bool = False
    send_temperature: bool = True
    send_temperature_source: str = "default"
    caps: capslib.Caps = field(default_factory=lambda: capslib.Caps(*capslib.DEFAULT_CAPS, "default (unlisted model)"))
    transport: Transport = "batch"
    endpoint: Literal["chat", "responses"] = "chat"
    endpoint_path: str = "/v1/chat/completions"
    base_url: str | None = None
    api_key_env: str = ""
    api_version: str | None = None  # only for providers with API versions (Adapter.default_api_version)
    completion_window: str = "24h"
    max_tokens: int | None = None  # completion budget override
    max_requests_per_file: int = 50_000
    max_bytes_per_file: int = 200_000_000
    sync_concurrency: int = 4
    price: Price = field(default_factory=Price)
    batch_discount: float = 0.5
    chars_per_token: tuple[float, float] = (3.3, 1.5)  # (en, cjk): the paper's ratios
    max_enqueued_tokens: int | None = None
    max_batches_in_flight: int | None = None
    key_optional: bool = False  # a rehearsal on the emulator: no key variable needs to be set

    @property
    def endpoint_label(self) -> str:
        """The API endpoint the requests go to, for provenance."""
        return get_adapter(self.provider).endpoint_label(self)

    @property
    def endpoint_host(self) -> str:
        from urllib.parse import urlparse

        if self.base_url:
            return urlparse(self.base_url).netloc or self.base_url
        return get_adapter(self.provider).default_host or "?"


@dataclass(frozen=True)
class Fallback:
    """One rule that found nothing built in for a route's model and fell back (or, for "idle",
    a route the config leaves unused)."""

    rule: Literal["caps", "temperature", "idle"]
    text: str  # starts with the rule's name: "caps: default row 2,850,000 / 850,000 characters. ..."


@dataclass(frozen=True)
class ConfigWarning:
    """What the config falls back on for one route: said once per route (state.db remembers which
    fallbacks were shown, see ledger.unshown_warnings), not on every command."""

    path: Path
    route: str
    model: str
    fallbacks: tuple[Fallback, ...]

    @property
    def message(self) -> str:
        return f"{self.path}: route {self.route!r} (model {self.model!r}): " + " ".join(f.text for f in self.fallbacks)

    def meta_key(self, fallback: Fallback) -> str:
        # Keyed by the normalised model: respelling the same model is not news, another model is.
        return f"warned:{self.route}:{fallback.rule}:{capslib.normalise_model(self.model)}"

    def __str__(self) -> str:
        return self.message

    def __contains__(self, text: str) -> bool:
        return text in self.message


@dataclass(frozen=True)
class Config:
    path: Path
    paths: Paths
    generation: Generation
    judging: Judging
    routes: dict[str, Route]
    budget: float | None = None
    warnings: tuple[ConfigWarning, ...] = ()
    rehearsal: str | None = None  # the emulator's URL when this config is a rehearsal
    protocol: Protocol = "wildtrace"

    @property
    def protocol_note(self) -> str | None:
        """What every output says when the config declares another panel than the protocol's
        (None for a WildTrace config: config_file checked its panel)."""
        if self.protocol == "wildtrace":
            return None
        panel = ", ".join(f"{j.name} ({j.model})" for j in self.judges) or "none"
        return ('Not WildTrace-protocol numbers: the config declares protocol = "custom" '
                f"(judge panel: {panel}; the protocol grades every answer with {PANEL_SIZE} judges of {PANEL_SIZE} "
                "distinct models, none a contestant: spec 001 §4).")

    def role_of(self, name: str) -> Literal["contestant", "judge", "idle"]:
        """A route in the panel judges; a route declared a judge but out of the panel is idle
        (nothing is sent for it); every other route is a contestant (the protocol's panel is non-contestant)."""
        if name in self.judging.panel:
            return "judge"
        return "idle" if self.routes[name].role == "judge" else "contestant"

    @property
    def contestants(self) -> list[Route]:
        """Routes on the leaderboard: neither in the panel nor declared judges (the protocol's panel is non-contestant)."""
        return [r for name, r in self.routes.items() if self.role_of(name) == "contestant"]

    @property
    def judges(self) -> list[Route]:
        return [self.routes[name] for name in self.judging.panel]

    @property
    def idle(self) -> list[Route]:
        """Judge routes out of the panel: kept in the config, never sent anything."""
        return [r for name, r in self.routes.items() if self.role_of(name) == "idle"]

    def route_error(self, name: str, *, what: str = "--route", among: Iterable[str] | None = None,
                    kind: str = "route") -> ConfigError:
        """The one message for a route name that is not there (every command's --route, compare's
        A and B, probe's ROUTE): the closest name ("Did you mean", as for a config key), then the
        routes it could be, in config order (`among`: a subset, or names state.db adds, last)."""
        known = list(self.routes) if among is None else list(among)
        known = [n for n in self.routes if n in known] + sorted(n for n in known if n not in self.routes)
        return ConfigError(f"{what + ' ' if what else ''}{name!r} is not a {kind} of {self.path}.",
                           f"{did_you_mean(name, known)}Known {kind}s: {', '.join(known) or 'none'}.")

    def require_routes(self, names: Iterable[str], *, what: str = "--route") -> None:
        """Refuse (ConfigError, exit 1) the first of `names` the config has no route for."""
        for name in names:
            if name not in self.routes:
                raise self.route_error(name, what=what)

    def with_emulator(self, url: str, *, own_paths: bool = True) -> "Config":
        """A rehearsal: every route sent to a local emulator (rehearsals, the demo, tests).

        With `own_paths` (the default) state.db, jobs/ and results/ move to their rehearsal paths
        (`rehearsal_path`), so emulator answers never mix with real ones. The demo, whose whole
        folder is a demo, keeps its paths (its state.db is still marked as a rehearsal's)."""
        # The real keys go along on a rehearsal: the same rule as a route's base_url (the
        # emulator itself only ever listens on loopback).
        if problem := base_url_problem(url, allow_insecure=False):
            raise ConfigError(f"--emulator (or BATCHRUN_EMULATOR) {problem[0]}.", "Give the URL the emulator printed, e.g. http://127.0.0.1:8765.")
        url = url.rstrip("/")
        routes = {}
        for name, r in self.routes.items():
            # The emulator takes any key: a rehearsal needs none set (a real one set is used).
            routes[name] = replace(r, base_url=url + get_adapter(r.provider).base_url_suffix, key_optional=True)
        paths = self.paths
        if own_paths:
            paths = replace(paths, state=rehearsal_path(paths.state), jobs=rehearsal_path(paths.jobs),
                            results=rehearsal_path(paths.results))
        return replace(self, routes=routes, paths=paths, rehearsal=url)


# A key's shape: OpenAI's and the OpenAI-compatible providers' keys begin "sk-" (Anthropic's
# "sk-ant-"), Google's API keys "AIza". Where a variable's name or a URL belongs (a clumsy paste,
# a gateway path `/v1/sk-…/`) it is refused, and never repeated in the error (stderr ends up in
# cron mail and logs). Not after a letter or digit: `desk-…` in a host name is no key.
KEY_SHAPED = re.compile(r"(?<![A-Za-z0-9])(?:sk-|AIza)[A-Za-z0-9_-]{16,}")
# Query parameters that carry a credential: Google's `key=`, Azure's `api-key=`, tokens, SAS signatures.
_CREDENTIAL_PARAM = re.compile(r"(?i)key|token|secret|passw|sig|auth")


def base_url_problem(url: str, *, allow_insecure: bool) -> tuple[str, str] | None:
    """(problem, fix) if `url` is not somewhere batchrun may send a key, else None.

    An http(s) URL with a host, and https unless the host is this machine: every request carries
    the key (Authorization: Bearer ..., x-api-key), which plain http shows to the whole path."""
    from urllib.parse import parse_qsl, urlsplit

    example = 'Use the provider\'s base URL, e.g. "https://api.example.com/v1".'
    try:
        # What follows the host: a key in the host name is no key (a host `sk-openai-proxy-prod-eu.…`
        # is a name); in a value that is no URL, anywhere.
        split = urlsplit(url)
        after_host = url[len(f"{split.scheme}://{split.netloc}"):] if split.scheme and split.netloc else url
    except ValueError:
        after_host = url
    if KEY_SHAPED.search(after_host):
        # base_url is recorded and published (below): a key anywhere in it would be too.
        return ("looks like an API key, or holds one (not shown here), which batchrun would record and publish with the route",
                "Put the provider's base URL there (e.g. \"https://api.example.com/v1\"); the key goes in the variable "
                "api_key_env names (export MY_PROVIDER_KEY=...), and out of the config file.")
    try:
        parts = urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018 (raises ValueError for a port that is not a number in range)
    except ValueError as e:
        return f"is not a valid URL ({url!r}: {e})", example
    if parts.scheme not in ("http", "https") or not host:
        return f"must be an http:// or https:// URL with a host (got {url!r})", example
    # A credential written into the URL would be recorded and published with it: the host and
    # base URL go into state.db, the results files, the manifest and the site (provenance), and
    # into messages. Neither is shown here.
    if parts.username is not None or parts.password is not None:
        return ("holds a user name or password (user:password@host), which batchrun would record and publish with the "
                "route's host (not shown here)", "Remove it from base_url; the provider's key goes in the variable api_key_env names.")
    secret_names = [k for k, _ in parse_qsl(parts.query, keep_blank_values=True) if _CREDENTIAL_PARAM.search(k)]
    if secret_names:
        return (f"holds a credential in its query string ({secret_names[0]}=...), which batchrun would record and publish "
                "(not shown here)", "Remove it from base_url; the provider's key goes in the variable api_key_env names.")
    if parts.scheme == "http" and not is_loopback(host) and not allow_insecure:
        return (f"is plain http to {host}, which would send the API key unencrypted over the network ({url!r})",
                "Use https://. If the endpoint really is on a network you trust (a proxy inside a private network), "
                "add allow_insecure_http = true to this route.")
    return None


def is_loopback(host: str) -> bool:
    """True for addresses that never leave this machine: 127.0.0.0/8, ::1 and `localhost`."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # any other name: DNS decides where it goes, so it is not trusted to be local
