"""The Gemini Files API's resumable upload (https://ai.google.dev/api/files, media.upload), as
google-genai drives it: a start POST to ``/upload/{ver}/files`` answered with an
``X-Goog-Upload-URL``, then chunk POSTs to that URL (``X-Goog-Upload-Command: upload[, finalize]``,
``X-Goog-Upload-Offset``), each answered with ``X-Goog-Upload-Status`` (provider-apis.md §4.6).
A mixin of ``gemini.Gemini``, which owns the files and how they are shown (``file_json``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from .core import Core, FileRec
from .gemini_rules import get_field
from .httpio import CHUNK, ApiError, Ctx, Resp
from .wire import lower_id, new_id


@dataclass
class Upload:
    """A resumable upload session: bytes land in ``path`` until the finalize command."""

    id: str  # the file id it will get
    path: str
    mime: str
    version: str
    display_name: str | None
    offset: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


class ResumableUploads:
    """The upload routes of the Gemini provider (see the module docstring)."""

    name: ClassVar[str]
    core: Core
    _uploads: dict[str, Upload]
    if TYPE_CHECKING:
        file_json: Callable[..., dict]

        def auth(self, ctx: Ctx) -> None: ...

    def upload(self, ctx: Ctx, version: str) -> Resp:
        """Resumable upload (https://ai.google.dev/api/files, media.upload): a start POST, then chunk
        POSTs to the X-Goog-Upload-URL it returned (X-Goog-Upload-Command: upload[, finalize])."""
        upload_id = ctx.q("upload_id")
        if upload_id is None:
            return self._upload_start(ctx, version)
        # Chunk requests carry no API key: the upload URL itself authorises them.
        with self.core.lock:
            session = self._uploads.get(upload_id)
        if session is None:
            raise ApiError(404, f"Unknown upload session {upload_id!r}.")
        commands = {c.strip() for c in ctx.header("X-Goog-Upload-Command").lower().split(",")}

        def status(state: str) -> list[tuple[str, str]]:
            return [("X-Goog-Upload-Status", state)]

        if "query" in commands:
            return Resp(200, b"", headers=status("active") + [("X-Goog-Upload-Size-Received", str(session.offset))])
        with session.lock:
            if "upload" in commands:
                try:
                    offset = int(ctx.header("X-Goog-Upload-Offset") or session.offset)
                except ValueError:
                    raise ApiError(400, "Invalid X-Goog-Upload-Offset.") from None
                if offset > session.offset:
                    raise ApiError(400, f"X-Goog-Upload-Offset {offset} is beyond the {session.offset} bytes received.")
                with open(session.path, "r+b") as f:
                    f.seek(offset)
                    f.truncate()  # a resent chunk replaces what followed its offset
                    written = ctx.body.copy_to(f)
                session.offset = offset + written
            if "finalize" not in commands:
                return Resp(200, b"", headers=status("active"))
            digest = hashlib.sha256()
            with open(session.path, "rb") as received:
                for chunk in iter(lambda: received.read(CHUNK), b""):
                    digest.update(chunk)
            with self.core.lock:
                self._uploads.pop(upload_id, None)
            rec = self.core.add_file(
                FileRec(
                    session.id, self.name, session.path, session.offset, session.display_name or "", self.name, time.time(),
                    mime=session.mime, display_name=session.display_name, sha256=digest.hexdigest(),
                )
            )
        return Resp(200, json.dumps({"file": self.file_json(rec, ctx, session.version)}).encode(), headers=status("final"))

    def _upload_start(self, ctx: Ctx, version: str) -> Resp:
        self.auth(ctx)
        protocol = ctx.header("X-Goog-Upload-Protocol").lower()
        if protocol != "resumable" or "start" not in ctx.header("X-Goog-Upload-Command").lower():
            raise ApiError(400, "The emulator supports only the resumable upload protocol (X-Goog-Upload-Protocol: resumable, X-Goog-Upload-Command: start).")
        body = ctx.json()
        meta: dict = body["file"] if isinstance(body, dict) and isinstance(body.get("file"), dict) else {}
        display_name = get_field(meta, "displayName")
        mime = ctx.header("X-Goog-Upload-Header-Content-Type") or get_field(meta, "mimeType") or "application/octet-stream"
        if mime == "jsonl":  # the docs' config={"mime_type": "jsonl"}
            mime = "application/jsonl"
        name = meta.get("name")
        file_id = name[len("files/"):] if isinstance(name, str) and name.startswith("files/") else (name or lower_id(12))
        if not isinstance(file_id, str) or not re.fullmatch(r"[a-z0-9-]{1,40}", file_id):
            # The Files API's rule, and what keeps a client's name from leading out of our folder.
            raise ApiError(400, f"Invalid file name {name!r}: a name is at most 40 lowercase alphanumeric characters or dashes.")
        if file_id in self.core.files:
            raise ApiError(409, f"File files/{file_id} already exists.")
        upload_id = new_id("ABgVH", 40)
        path = os.path.join(self.core.dir, f"gemini-{file_id}-{lower_id(6)}")
        open(path, "wb").close()
        with self.core.lock:
            self._uploads[upload_id] = Upload(file_id, path, mime, version, display_name)
        upload_url = f"{ctx.base}/upload/{version}/files?upload_id={upload_id}&upload_protocol=resumable"
        return Resp(200, b"", headers=[
            ("X-Goog-Upload-URL", upload_url),
            ("X-Goog-Upload-Status", "active"),
            ("X-Goog-Upload-Chunk-Granularity", str(8 * 1024 * 1024)),
        ])
