"""A route's policy: everything that decides what its requests are and how their results count.

The policy (model and endpoint, API version, caps, decoding settings, prompt template, retry
policy) is hashed into a fingerprint that every request, cell and result records; results are
only ever aggregated under the fingerprint of the current config, so changing any of it makes the
affected cells pending again (old rows stay for audit). Base URLs and key variables are
deliberately not part of it: they say where a request goes, not what it is.

`route_policies` builds every route's policy once per command, when the command resolves its
inputs (ledger.inputs): what is sent (the temperature or its absence, the completion budget) and
what is recorded are read from the `RoutePolicy` values from then on, never rebuilt below.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Literal

from ..providers import get_adapter
from .config import Config, Route
from .prompts import GENERATION_TEMPLATE_SHA256, JUDGE_TEMPLATE_SHA256

Role = Literal["contestant", "judge", "idle"]


@dataclass(frozen=True)
class RoutePolicy:
    """One route as its requests are built: its role, its policy and fingerprint, and the two
    decoding settings a request line carries. An idle judge has its judge policy (recorded, so a
    role change is caught) but sends nothing."""

    route: Route
    role: Role
    policy: dict[str, Any]  # as recorded in state.db's `policies` (never edited)
    fingerprint: str
    temperature: float | None  # None: the key is absent from the request (the route rejects it)
    max_tokens: int

    @property
    def stage(self) -> Literal["gen", "judge"]:
        return "gen" if self.role == "contestant" else "judge"


def fingerprint(policy: dict[str, Any]) -> str:
    blob = json.dumps(policy, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def generation_max_tokens(config: Config, route: Route) -> int:
    """The completion budget of the route's generation requests."""
    if route.max_tokens is not None:
        return route.max_tokens
    return config.generation.reasoning_max_tokens if route.reasoning else config.generation.max_tokens


def _temperature(value: float, route: Route) -> float | None:
    return value if route.send_temperature else None


def generation_policy(config: Config, route: Route) -> dict[str, Any]:
    """Everything that decides what a generation request is and how its result counts."""
    return {
        "stage": "gen",
        "route": route.name,
        "provider": route.provider,
        "model": route.model,
        "endpoint": get_adapter(route.provider).policy_endpoint(route),
        "api_version": route.api_version,
        "caps": {"en": route.caps.en, "cjk": route.caps.cjk},
        "temperature": _temperature(config.generation.temperature, route),
        "max_tokens": generation_max_tokens(config, route),
        "prompt_template_sha256": GENERATION_TEMPLATE_SHA256,
        "retry_policy": {"max_retries": config.generation.max_retries, "max_resubmits": config.generation.max_resubmits},
    }


def judge_policy(config: Config, route: Route) -> dict[str, Any]:
    return {
        "stage": "judge",
        "route": route.name,
        "provider": route.provider,
        "model": route.model,
        "endpoint": get_adapter(route.provider).policy_endpoint(route),
        "api_version": route.api_version,
        "temperature": _temperature(config.judging.temperature, route),
        "max_tokens": config.judging.max_tokens,
        "prompt_template_sha256": JUDGE_TEMPLATE_SHA256,
    }


def generation_decoding(config: Config, route: Route) -> tuple[float | None, int]:
    """(temperature, completion budget) of the route's generation requests."""
    return _temperature(config.generation.temperature, route), generation_max_tokens(config, route)


def decoding(config: Config, name: str) -> tuple[float | None, int]:
    """(temperature, completion budget) the route's requests carry, by its role: the [generation]
    settings for a contestant, the [judging] ones for a judge (config_file checks them against
    what the provider accepts)."""
    route = config.routes[name]
    if config.role_of(name) == "contestant":
        return generation_decoding(config, route)
    return _temperature(config.judging.temperature, route), config.judging.max_tokens


def route_policies(config: Config) -> dict[str, RoutePolicy]:
    """Every route's policy, by route name: a contestant's generation policy, a judge's (or an
    idle judge's) judge policy."""
    out = {}
    for name, route in config.routes.items():
        role = config.role_of(name)
        policy = generation_policy(config, route) if role == "contestant" else judge_policy(config, route)
        out[name] = RoutePolicy(route, role, policy, fingerprint(policy), *decoding(config, name))
    return out
