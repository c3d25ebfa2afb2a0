"""The Files API handlers OpenAI and Gemini share: retrieve, content, delete and list a file.

A provider with a Files API is a ``FileApi``: it names these handlers in its route table and
supplies its own 404 (``file_missing``), file shape (``file_json``), list page (``file_page``,
``listed_files``), delete answer and download type; how files arrive is its own (OpenAI's
multipart upload in ``openai.py``, Gemini's resumable upload in ``gemini_upload.py``), and the
files themselves live in ``Core.files``.
"""

from __future__ import annotations

from abc import abstractmethod

from .batches import Paged
from .core import FileRec, Provider
from .httpio import ApiError, Ctx, Resp, json_resp


class FileApi(Provider):
    """A provider's Files API: the handlers here, the shapes in the subclass."""

    @abstractmethod
    def file_missing(self, file_id: str) -> ApiError:
        """The provider's 404 for a file id it does not hold."""

    @abstractmethod
    def file_json(self, rec: FileRec, ctx: Ctx) -> dict:
        """A file as the provider shows it."""

    @abstractmethod
    def file_page(self, ctx: Ctx, ids: list[str]) -> Paged:
        """One page of a file listing in the provider's pagination style."""

    def listed_files(self, ctx: Ctx) -> list[FileRec]:
        """The files a listing shows, in order: the provider's own, newest first."""
        with self.core.lock:
            return sorted((f for f in self.core.files.values() if f.provider == self.name), key=lambda f: f.created, reverse=True)

    def deleted_file(self, file_id: str) -> dict:
        """The body of a file delete's answer; empty unless the provider names the deleted file."""
        return {}

    def content_type(self, rec: FileRec) -> str:
        return rec.mime or "application/octet-stream"

    def file(self, file_id: str) -> FileRec:
        rec = self.core.files.get(file_id)
        if rec is None:
            raise self.file_missing(file_id)
        return rec

    def owns_file(self, ctx: Ctx, file_id: str | None = None) -> bool:
        """Route claim on a file path two providers share (see ``Core.owner``)."""
        return self.core.owner(self.core.files, file_id, ctx) == self.name

    def file_retrieve(self, ctx: Ctx, file_id: str) -> Resp:
        self.auth(ctx)
        return json_resp(self.file_json(self.file(file_id), ctx))

    def file_content(self, ctx: Ctx, file_id: str) -> Resp:
        self.auth(ctx)
        rec = self.file(file_id)
        return self.core.download(rec, self.content_type(rec))

    def file_delete(self, ctx: Ctx, file_id: str) -> Resp:
        self.auth(ctx)
        self.core.delete_file(self.file(file_id))
        return json_resp(self.deleted_file(file_id))

    def file_list(self, ctx: Ctx) -> Resp:
        self.auth(ctx)
        items = self.listed_files(ctx)
        window, wrap = self.file_page(ctx, [f.id for f in items])
        return json_resp(wrap([self.file_json(f, ctx) for f in items[window]]))
