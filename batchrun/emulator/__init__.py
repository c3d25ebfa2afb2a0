"""Local emulator of the OpenAI, Anthropic and Gemini batch + online APIs for the official SDKs.

    from batchrun.emulator import Emulator
    with Emulator(latency=0.0, models=["my-fine-tune"], keys=None).start() as emu:
        client = openai.OpenAI(base_url=f"{emu.url}/v1", api_key="test")

Cut as provider modules over one shared core, as moto cuts a fake cloud. ``batches.py`` owns the
flow every batch API repeats (create's fault/log/register tail, retrieve, list, cancel, delete, the
processing loop, result files, online calls) and ``files.py`` the Files API handlers (retrieve,
content, delete, list); both sit on ``core.py``'s state (files, batches and their lifecycle,
latency, logs, fault hooks). A provider module supplies only what is its own: ``openai.py``,
``anthropic.py`` and ``gemini.py`` (with ``gemini_upload.py``, its resumable upload) each hold one
API's route table, auth, id forms, pagination style, wire shapes (``openai_answers.py`` and
``gemini_answers.py`` the objects OpenAI and Gemini answer with) and quirks, each with the provider
fact it rests on; ``dashscope.py`` the OpenAI-compatible provider modelled (DashScope's compatible
mode, on ``openai.py``'s routes). What each API refuses, and how it words it: ``openai_rules.py``,
``anthropic_rules.py``, ``gemini_rules.py`` (and ``dashscope.py``), over ``schema.py`` (a walker of
the SDKs' own request types) and ``models.py`` (the model ids each provider serves).
``server.py``: the HTTP server that dispatches to the routes, and the ``/_emulator/*`` control API;
``wire.py``: ids, usage and outcomes the shapes share; ``httpio.py``: bodies, requests, responses,
routes; ``responder.py``: the built-in deterministic responder; ``faults.py``: fault injection;
``windows.py``: per-model context windows. CLI: ``python -m batchrun.emulator``.

It models the providers, not batchrun's client, so it stands beside the pipeline: of batchrun it
uses only the protocol's model tables (``protocol.caps``) and its loopback rule
(``protocol.config.is_loopback``); only the CLI (``batchrun emulator``, the demo) imports it.

May import: base, protocol.
"""

from .faults import normalize_fault
from .responder import builtin_responder, load_responder
from .server import Emulator, check_loopback, run_emulator
from .wire import REJECTS_TEMPERATURE

__all__ = [
    "Emulator",
    "run_emulator",
    "check_loopback",
    "builtin_responder",
    "load_responder",
    "normalize_fault",
    "REJECTS_TEMPERATURE",
]
