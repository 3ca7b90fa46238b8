"""Byte-level tokenizer: token id = byte value, plus one end-of-sequence id.

Token strings follow vLLM: a byte that is not a whole UTF-8 character alone is shown as
`bytes:\\xNN`, and `return_tokens_as_token_ids` shows every token as `token_id:N`.
"""

from __future__ import annotations

from sandbox.modelserver.lm.weights import EOS_ID, VOCAB

EOS_TEXT = "<|endoftext|>"


def encode(text: str) -> list[int]:
    return list(text.encode("utf-8"))


def decode(ids: list[int]) -> str:
    """Text of generated or prompt tokens; EOS contributes nothing."""
    return bytes(i for i in ids if i != EOS_ID).decode("utf-8", errors="replace")


def token_bytes(token_id: int) -> list[int]:
    return [] if token_id == EOS_ID else [token_id]


def token_str(token_id: int, *, as_ids: bool) -> str:
    if as_ids:
        return f"token_id:{token_id}"
    if token_id == EOS_ID:
        return EOS_TEXT
    if token_id < 128:
        return chr(token_id)
    return f"bytes:\\x{token_id:02x}"


def is_valid_id(token_id: int) -> bool:
    return 0 <= token_id < VOCAB


def render_chat(messages: list[tuple[str, str]]) -> str:
    """The chat template: one tagged block per message, then the assistant's opening tag."""
    blocks = [f"<|{role}|>\n{content}\n" for role, content in messages]
    return "".join(blocks) + "<|assistant|>\n"
