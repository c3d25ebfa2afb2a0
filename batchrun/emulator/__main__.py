"""``python -m batchrun.emulator``: serve the emulator until SIGTERM/SIGINT.

    python -m batchrun.emulator --host 127.0.0.1 --port 0 --latency 0.5 \\
        --responder my_responder.py:answer --fault '{"kind": "request_error", "status": 429}' \\
        --model my-fine-tune --key sk-rehearsal

Prints ``listening on http://HOST:PORT`` to stderr once the socket is bound: the address really
bound. The host must be a loopback address (the same rule as ``batchrun emulator``).
"""

from __future__ import annotations

import argparse
import json
import sys

from ..base.durations import parse_duration
from .faults import check_seconds, normalize_fault
from .server import run_emulator
from .windows import parse_window


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port: use 0-65535 (0 = any free port)")
    return port


def _seconds(text: str) -> float:
    # The one duration syntax of every batchrun option (base/durations.py): 0.5, 90s, 2m.
    try:
        return check_seconds(parse_duration(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m batchrun.emulator", description="Serve the local OpenAI / Anthropic / Gemini batch API emulator until SIGTERM or SIGINT.")
    parser.add_argument("--host", default="127.0.0.1", help="loopback address to bind: 127.0.0.1 (default), ::1 or localhost")
    parser.add_argument("--port", type=_port, default=0, help="port (default 0 = pick a free one)")
    parser.add_argument("--latency", type=_seconds, default=0.0, metavar="DURATION",
                        help="time from batch creation until it is ready (0.5, 90s, 2m)")
    parser.add_argument("--responder", default=None, help="FILE.py:FUNC or package.module:FUNC (default: built-in)")
    parser.add_argument("--fault", action="append", default=[], metavar="JSON", help="a fault to arm (repeatable)")
    parser.add_argument("--window", action="append", default=[], metavar="MODEL=TOKENS",
                        help="a model's context window in input tokens, 0 = none (repeatable; default: see windows.py)")
    parser.add_argument("--model", action="append", default=[], metavar="ID",
                        help="accept this model id besides the built-in tables (repeatable; see models.py)")
    parser.add_argument("--key", action="append", default=[], metavar="VALUE",
                        help="accept only these API keys (repeatable; default: any key)")
    args = parser.parse_args(argv)
    windows = {}
    for text in args.window:
        try:
            model, tokens = parse_window(text)
        except ValueError as exc:
            parser.error(str(exc))
        windows[model] = tokens
    faults = []
    for text in args.fault:
        try:
            faults.append(normalize_fault(json.loads(text)))
        except ValueError as exc:
            parser.error(f"--fault {text!r}: {exc}")
    try:
        run_emulator(host=args.host, port=args.port, latency=args.latency, responder=args.responder, faults=faults, windows=windows,
                     models=args.model, keys=args.key or None)
    except (OSError, ValueError, ImportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
