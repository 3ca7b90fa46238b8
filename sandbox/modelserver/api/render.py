"""Response bodies and stream chunks for /v1/completions and /v1/chat/completions.

One renderer per request. The streaming loop and the non-streaming path are shared by both
endpoints; only these classes know the two wire shapes.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from sandbox.modelserver.api.logprobs import LegacyLogprobs, chat_entry
from sandbox.modelserver.engine.sequence import Event, TokenEvent
from sandbox.modelserver.lm.sampling import TokenOut
from sandbox.modelserver.lm.tokenizer import decode

Json = dict[str, Any]


class Renderer:
    kind = ""
    chunk_object = ""
    body_object = ""

    def __init__(
        self, *, model: str, prompt: tuple[int, ...], logprobs: bool, as_ids: bool
    ) -> None:
        self.id = f"{self.kind}-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.model = model
        self.prompt = prompt
        self.logprobs = logprobs
        self.as_ids = as_ids

    def envelope(self, obj: str, choices: list[Json], usage: Json | None = None) -> Json:
        out: Json = {"id": self.id, "object": obj, "created": self.created, "model": self.model}
        out["choices"] = choices
        if usage is not None:
            out["usage"] = usage
        return out

    def usage(self, completion_tokens: int) -> Json:
        n = len(self.prompt)
        return {
            "prompt_tokens": n,
            "completion_tokens": completion_tokens,
            "total_tokens": n + completion_tokens,
        }

    def usage_chunk(self, completion_tokens: int) -> Json:
        return self.envelope(self.chunk_object, [], self.usage(completion_tokens))

    def opening(self, prompt_logprobs: list[TokenOut | None] | None) -> list[Json]:
        """Chunks sent just before the first token (role, echoed prompt)."""
        return []

    def chunk(self, event: Event) -> Json:
        raise NotImplementedError

    def body(
        self, tokens: list[TokenOut], finish: str, prompt_logprobs: list[TokenOut | None] | None
    ) -> Json:
        raise NotImplementedError


class CompletionRenderer(Renderer):
    kind = "cmpl"
    chunk_object = body_object = "text_completion"

    def __init__(self, *, echo: bool, **common: Any) -> None:
        super().__init__(**common)
        self.echo = echo
        self._lp = LegacyLogprobs(as_ids=self.as_ids)

    def opening(self, prompt_logprobs: list[TokenOut | None] | None) -> list[Json]:
        if not self.echo:
            return []
        self._add_prompt(prompt_logprobs)
        return [self._choice_chunk(decode(list(self.prompt)), None)]

    def chunk(self, event: Event) -> Json:
        text = ""
        if isinstance(event, TokenEvent):
            text = decode([event.token.token_id])
            self._lp.add(event.token.token_id, event.token, text)
        return self._choice_chunk(text, event.finish_reason)

    def body(
        self, tokens: list[TokenOut], finish: str, prompt_logprobs: list[TokenOut | None] | None
    ) -> Json:
        text = decode([t.token_id for t in tokens])
        if self.echo:
            self._add_prompt(prompt_logprobs)
            text = decode(list(self.prompt)) + text
        for token in tokens:
            self._lp.add(token.token_id, token, decode([token.token_id]))
        choice = {"index": 0, "text": text, "logprobs": self._take(), "finish_reason": finish}
        return self.envelope(
            self.body_object, [choice | {"stop_reason": None}], self.usage(len(tokens))
        )

    def _add_prompt(self, prompt_logprobs: list[TokenOut | None] | None) -> None:
        scored = prompt_logprobs or [None] * len(self.prompt)
        for token_id, entry in zip(self.prompt, scored, strict=True):
            self._lp.add(token_id, entry, decode([token_id]))

    def _choice_chunk(self, text: str, finish: str | None) -> Json:
        choice = {"index": 0, "text": text, "logprobs": self._take(), "finish_reason": finish}
        return self.envelope(self.chunk_object, [choice | {"stop_reason": None}])

    def _take(self) -> Json | None:
        taken = self._lp.take()
        return taken if self.logprobs else None


class ChatRenderer(Renderer):
    kind = "chatcmpl"
    chunk_object = "chat.completion.chunk"
    body_object = "chat.completion"

    def opening(self, prompt_logprobs: list[TokenOut | None] | None) -> list[Json]:
        return [self._delta({"role": "assistant", "content": ""}, None, None)]

    def chunk(self, event: Event) -> Json:
        if not isinstance(event, TokenEvent):
            return self._delta({}, None, event.finish_reason)
        token = event.token
        content = decode([token.token_id])
        return self._delta({"content": content}, self._logprobs([token]), event.finish_reason)

    def body(
        self, tokens: list[TokenOut], finish: str, prompt_logprobs: list[TokenOut | None] | None
    ) -> Json:
        message = {"role": "assistant", "content": decode([t.token_id for t in tokens])}
        choice = {"index": 0, "message": message, "logprobs": self._logprobs(tokens)}
        choice["finish_reason"] = finish
        return self.envelope(self.body_object, [choice], self.usage(len(tokens)))

    def _delta(self, delta: Json, logprobs: Json | None, finish: str | None) -> Json:
        choice = {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
        return self.envelope(self.chunk_object, [choice])

    def _logprobs(self, tokens: list[TokenOut]) -> Json | None:
        if not self.logprobs:
            return None
        return {"content": [chat_entry(t, as_ids=self.as_ids) for t in tokens]}
