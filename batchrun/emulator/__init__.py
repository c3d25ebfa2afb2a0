"""Local emulator of the OpenAI, Anthropic and Gemini batch + online APIs for the official SDKs.

    from batchrun.emulator import Emulator
    with Emulator(latency=0.0).start() as emu:
        client = openai.OpenAI(base_url=f"{emu.url}/v1", api_key="test")

See ``server.py`` for the routes and batch lifecycle, ``responder.py`` for the built-in
deterministic responder, ``faults.py`` for fault injection. CLI: ``python -m batchrun.emulator``.
"""

from .faults import normalize_fault
from .responder import builtin_responder, load_responder
from .server import Emulator, run_emulator
from .wire import REJECTS_TEMPERATURE

__all__ = ["Emulator", "run_emulator", "builtin_responder", "load_responder", "normalize_fault", "REJECTS_TEMPERATURE"]
