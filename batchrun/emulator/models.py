"""The model ids each emulated provider serves, in its own id form, and the ones a user adds.

A request naming a model its provider does not serve is refused as that provider refuses it
(``*_rules.py``): OpenAI 404 ``model_not_found``, Anthropic 404 ``not_found_error`` "model: ID",
Gemini 404 ``NOT_FOUND`` "models/ID is not found for API version ...", DashScope 404
``model_not_found``. The tables hold the WildTrace paper's models and judges (spec 001 §3-4) in
each provider's real spelling, and the other ids the evidence below names; anything else is
added by the user (``batchrun emulator --model ID``, ``Emulator(models=[...])``): a model the
tables do not know is accepted by every provider from then on.

Evidence, per table:

The tables are copied, not read from the installed SDKs: the emulator must refuse and accept the
same ids whatever SDK version is installed (an SDK at batchrun's dependency floor neither has
today's ids nor the module paths that hold them, e.g. openai 1.55.3 has no
``openai.types.shared.chat_model``).

* OpenAI: the ``ChatModel`` Literal of the openai SDK (3.57.0)
  (``openai/types/shared/chat_model.py``: gpt-4.1, gpt-4.1-2025-04-14, gpt-5.1,
  gpt-5.1-2025-11-13, gpt-5.4, gpt-5.5, gpt-5.5-2026-04-23 ...), generated from OpenAI's API
  spec, plus the gpt-5.4 snapshot ``gpt-5.4-2026-03-05`` (vercel/ai ``OpenAIChatModelId``,
  socket.dev diff of @ai-sdk/openai 2.0.99; the batch object in
  ProjectTech4DevAI/kaapi-backend#723 names ``gpt-5.4-pro-2026-03-05``).
* Anthropic: the ``Model`` Literal of the anthropic SDK (2.15.0) (``anthropic/types/model.py``:
  claude-opus-4-8, claude-opus-4-6, claude-sonnet-4-6 ...). From Claude 4.6 on the API id is also
  its alias, undated ("Claude API ID claude-opus-4-6 | Claude API alias claude-opus-4-6",
  platform.claude.com/docs/en/docs/legacy-model-guide); earlier models have dated ids
  (claude-haiku-4-5-20251001).
* Gemini (Developer API): google-genai's model list (``google/genai/_local_tokenizer_loader.py``:
  gemini-2.5-pro, gemini-2.5-flash, gemini-3.1-pro-preview ...) and the model page
  ai.google.dev/gemini-api/docs/models/gemini-3.1-pro-preview ("Model code
  gemini-3.1-pro-preview"; there is no bare "gemini-3.1"). Ids may carry the ``models/`` prefix.
* DashScope (Alibaba Model Studio, OpenAI-compatible mode): the models its Batch File API accepts
  (help.aliyun.com/zh/model-studio/batch-interfaces-compatible-with-openai, Beijing: qwen3.8-max,
  qwen3.7-max, qwen3-max, qwen3.7-plus, qwen3.6-plus, qwen3.5-plus, qwen-plus ..., deepseek-r1,
  deepseek-v3.2, deepseek-v3; international: qwen-max, qwen-plus, qwen-flash, qwen-turbo), and,
  online only, third-party models it serves on the same base URL: Kimi
  (help.aliyun.com/zh/model-studio/kimi-api: kimi-k2.5, kimi-k2-thinking,
  Moonshot-Kimi-K2-Instruct; kimi-k2.6 on https://dashscope.aliyuncs.com/compatible-mode/v1 in
  public client code) and GLM (alibabacloud.com/help/en/model-studio glm: glm-5, glm-4.7, glm-4.6,
  glm-4.5, glm-4.5-air). The paper's other OpenAI-compatible models (glm-5.2 on Zhipu, deepseek-v4,
  doubao-seed-2.1 on Volcengine Ark, minimax-m2.7 on MiniMax) are served by other providers: a
  rehearsal of such a route adds its model with ``--model``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable


OPENAI_MODELS: frozenset[str] = frozenset({
    # openai 3.57.0, openai/types/shared/chat_model.py ChatModel, plus gpt-5.4-2026-03-05 (see above)
    "chatgpt-4o-latest", "codex-mini-latest", "gpt-3.5-turbo", "gpt-3.5-turbo-0125", "gpt-3.5-turbo-0301",
    "gpt-3.5-turbo-0613", "gpt-3.5-turbo-1106", "gpt-3.5-turbo-16k", "gpt-3.5-turbo-16k-0613", "gpt-4",
    "gpt-4-0125-preview", "gpt-4-0314", "gpt-4-0613", "gpt-4-1106-preview", "gpt-4-32k", "gpt-4-32k-0314",
    "gpt-4-32k-0613", "gpt-4-turbo", "gpt-4-turbo-2024-04-09", "gpt-4-turbo-preview", "gpt-4-vision-preview",
    "gpt-4.1", "gpt-4.1-2025-04-14", "gpt-4.1-mini", "gpt-4.1-mini-2025-04-14", "gpt-4.1-nano",
    "gpt-4.1-nano-2025-04-14", "gpt-4o", "gpt-4o-2024-05-13", "gpt-4o-2024-08-06", "gpt-4o-2024-11-20",
    "gpt-4o-audio-preview", "gpt-4o-audio-preview-2024-10-01", "gpt-4o-audio-preview-2024-12-17",
    "gpt-4o-audio-preview-2025-06-03", "gpt-4o-mini", "gpt-4o-mini-2024-07-18", "gpt-4o-mini-audio-preview",
    "gpt-4o-mini-audio-preview-2024-12-17", "gpt-4o-mini-search-preview",
    "gpt-4o-mini-search-preview-2025-03-11", "gpt-4o-search-preview", "gpt-4o-search-preview-2025-03-11",
    "gpt-5", "gpt-5-2025-08-07", "gpt-5-chat-latest", "gpt-5-mini", "gpt-5-mini-2025-08-07", "gpt-5-nano",
    "gpt-5-nano-2025-08-07", "gpt-5.1", "gpt-5.1-2025-11-13", "gpt-5.1-chat-latest", "gpt-5.1-codex",
    "gpt-5.1-mini", "gpt-5.2", "gpt-5.2-2025-12-11", "gpt-5.2-chat-latest", "gpt-5.2-pro",
    "gpt-5.2-pro-2025-12-11", "gpt-5.3-chat-latest", "gpt-5.4", "gpt-5.4-2026-03-05", "gpt-5.4-mini",
    "gpt-5.4-mini-2026-03-17", "gpt-5.4-nano", "gpt-5.4-nano-2026-03-17", "gpt-5.5", "gpt-5.5-2026-04-23",
    "gpt-5.6-luna", "gpt-5.6-sol", "gpt-5.6-terra", "gpt-6-astra", "gpt-6-luna", "gpt-6-sol", "gpt-6.1-sol",
    "gpt-6.1-terra", "gpt-6.2-astra", "gpt-6.2-sol", "gpt-audio-mini", "gpt-audio-mini-2025-12-15", "o1",
    "o1-2024-12-17", "o1-mini", "o1-mini-2024-09-12", "o1-preview", "o1-preview-2024-09-12", "o3",
    "o3-2025-04-16", "o3-mini", "o3-mini-2025-01-31", "o4-mini", "o4-mini-2025-04-16",
})

ANTHROPIC_MODELS: frozenset[str] = frozenset({
    # anthropic 2.15.0, anthropic/types/model.py Model
    "claude-fable-5", "claude-fable-5-1", "claude-fable-5-2", "claude-haiku-4-5", "claude-haiku-4-5-20251001",
    "claude-haiku-5-5", "claude-mythos-5", "claude-mythos-5-1", "claude-mythos-5-2", "claude-mythos-preview",
    "claude-opus-4-5", "claude-opus-4-5-20251101", "claude-opus-4-6", "claude-opus-4-7", "claude-opus-4-8",
    "claude-opus-5", "claude-opus-5-5", "claude-sonnet-4-6", "claude-sonnet-5", "claude-sonnet-5-5",
})

GEMINI_MODELS: frozenset[str] = frozenset({
    # google/genai/_local_tokenizer_loader.py (stable ids, previews and the Gemini 3 family)
    "gemini-2.5-pro", "gemini-2.5-flash", "gemini-2.5-flash-lite", "gemini-2.0-flash", "gemini-2.0-flash-lite",
    "gemini-2.0-flash-001", "gemini-2.0-flash-lite-001", "gemini-2.5-pro-preview-06-05", "gemini-2.5-flash-preview-05-20",
    "gemini-3-pro-preview", "gemini-3-flash-preview", "gemini-3.1-pro-preview", "gemini-3.1-flash-lite", "gemini-3.5-flash",
})

DASHSCOPE_BATCH_MODELS: frozenset[str] = frozenset({
    "qwen3.8-max", "qwen3.7-max", "qwen3-max", "qwen-max",
    "qwen3.7-plus", "qwen3.6-plus", "qwen3.5-plus", "qwen-plus", "qwen-plus-latest",
    "qwen3.8-flash", "qwen3.7-flash", "qwen3.6-flash", "qwen3.5-flash", "qwen-flash", "qwen-turbo",
    "qwen-long", "qwen-long-latest", "deepseek-r1", "deepseek-v3.2", "deepseek-v3",
})

DASHSCOPE_MODELS: frozenset[str] = DASHSCOPE_BATCH_MODELS | {
    "kimi-k2.6", "kimi-k2.5", "kimi-k2-thinking", "Moonshot-Kimi-K2-Instruct",
    "glm-5", "glm-4.7", "glm-4.6", "glm-4.5", "glm-4.5-air",
}


class Models:
    """The model tables in force (thread-safe): the built-in ones plus the ids a user added."""

    def __init__(self, extra: Iterable[str] = ()) -> None:
        self._lock = threading.Lock()
        self._tables: dict[str, frozenset[str]] = {
            "openai": OPENAI_MODELS, "anthropic": ANTHROPIC_MODELS, "gemini": GEMINI_MODELS, "dashscope": DASHSCOPE_MODELS,
        }
        self._extra: set[str] = set()
        self.add(extra)

    def add(self, models: Iterable[str]) -> None:
        """Accept these ids everywhere from now on (``--model``); ValueError for a blank one."""
        checked = []
        for model in models:
            if not isinstance(model, str) or not model.strip():
                raise ValueError(f"a model id must be a non-empty string, got {model!r}")
            checked.append(model.strip())
        with self._lock:
            self._extra.update(checked)

    def known(self, provider: str, model: str, *, batch: bool = False) -> bool:
        """Whether ``provider`` serves ``model`` (in a batch, where its batch API is narrower)."""
        if provider == "gemini" and model.startswith("models/"):
            model = model[len("models/"):]
        with self._lock:
            if model in self._extra:
                return True
        table = DASHSCOPE_BATCH_MODELS if provider == "dashscope" and batch else self._tables.get(provider, frozenset())
        return model in table

    def is_added(self, model: str) -> bool:
        with self._lock:
            return model in self._extra

    @property
    def added(self) -> list[str]:
        with self._lock:
            return sorted(self._extra)
