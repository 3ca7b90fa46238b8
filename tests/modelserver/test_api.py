"""The OpenAI-compatible surface behaves like vLLM's where clients look: response shapes,
legacy and chat logprobs, token ids as `token_id:N`, teacher forcing through echo, SSE
framing (role chunk first, usage-only chunk before [DONE]), keep-alive comments, and
OpenAI-style 400s after which the server keeps serving."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.modelserver.conftest import StartServers

PROMPT = "The candle-vllm pod reached Running but"


@pytest.fixture(scope="module")
def client(start_servers: StartServers) -> Iterator[httpx.Client]:
    [server] = start_servers({"profile": "clef-flash-candle", "keep_alive_ms": 20.0})
    with httpx.Client(base_url=server.base_url, timeout=30) as c:
        yield c


def complete(client: httpx.Client, **body: Any) -> dict[str, Any]:
    response = client.post("/v1/completions", json={"prompt": PROMPT, "temperature": 0} | body)
    assert response.status_code == 200, response.text
    return response.json()


def sse_events(client: httpx.Client, path: str, body: dict[str, Any]) -> list[str]:
    """The raw SSE events of one streamed request, in order."""
    with client.stream("POST", path, json=body | {"stream": True}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"] == "text/event-stream"
        raw = response.read().decode()
    assert raw.endswith("\n\n")
    return raw[:-2].split("\n\n")


def data_events(events: list[str]) -> list[str]:
    return [e.removeprefix("data: ") for e in events if not e.startswith(":")]


def test_models_lists_the_served_model(client: httpx.Client) -> None:
    body = client.get("/v1/models").json()
    assert body["object"] == "list"
    assert [m["id"] for m in body["data"]] == ["clef-flash"]


def test_health_is_ok_once_serving(client: httpx.Client) -> None:
    assert client.get("/health").status_code == 200


def test_completion_has_text_usage_and_legacy_logprobs_with_token_ids(client: httpx.Client) -> None:
    body = complete(client, max_tokens=12, logprobs=3, return_tokens_as_token_ids=True)
    choice = body["choices"][0]
    lp = choice["logprobs"]
    assert body["object"] == "text_completion" and body["model"] == "clef-flash"
    assert body["usage"] == {
        "prompt_tokens": len(PROMPT),
        "completion_tokens": 12,
        "total_tokens": len(PROMPT) + 12,
    }
    assert choice["finish_reason"] == "length" and len(choice["text"]) == 12
    assert [int(t.removeprefix("token_id:")) for t in lp["tokens"]] == list(choice["text"].encode())
    assert lp["text_offset"] == list(range(12))
    for token, logprob, top in zip(
        lp["tokens"], lp["token_logprobs"], lp["top_logprobs"], strict=True
    ):
        assert logprob <= 0 and top[token] == logprob and len(top) in (3, 4)
        assert all(k.startswith("token_id:") for k in top)


def test_default_max_tokens_is_sixteen(client: httpx.Client) -> None:
    assert complete(client, ignore_eos=True)["usage"]["completion_tokens"] == 16


def test_prompt_as_token_ids_is_the_same_prompt(client: httpx.Client) -> None:
    as_text = complete(client, max_tokens=8)
    as_ids = complete(client, max_tokens=8, prompt=list(PROMPT.encode()))
    assert as_ids["choices"][0]["text"] == as_text["choices"][0]["text"]


def test_echo_without_new_tokens_scores_the_prompt(client: httpx.Client) -> None:
    body = complete(client, max_tokens=0, echo=True, logprobs=2)
    lp = body["choices"][0]["logprobs"]
    assert body["choices"][0]["text"] == PROMPT
    assert "".join(lp["tokens"]) == PROMPT
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert all(x <= 0 for x in lp["token_logprobs"][1:])
    assert body["usage"]["completion_tokens"] == 0


def test_ignore_eos_runs_to_max_tokens(client: httpx.Client) -> None:
    natural = complete(client, prompt="It works.", max_tokens=64)
    assert natural["choices"][0]["finish_reason"] == "stop"
    assert natural["usage"]["completion_tokens"] < 64
    forced = complete(client, prompt="It works.", max_tokens=64, ignore_eos=True)
    assert forced["usage"]["completion_tokens"] == 64


def test_chat_completion_has_a_message_and_chat_logprobs(client: httpx.Client) -> None:
    body = {"messages": [{"role": "user", "content": "Is it ready?"}], "max_tokens": 5}
    response = client.post(
        "/v1/chat/completions", json=body | {"temperature": 0, "logprobs": True, "top_logprobs": 2}
    )
    out = response.json()
    choice = out["choices"][0]
    assert out["object"] == "chat.completion" and choice["message"]["role"] == "assistant"
    entries = choice["logprobs"]["content"]
    assert "".join(e["token"] for e in entries) == choice["message"]["content"]
    assert all(
        len(e["top_logprobs"]) == 2 and e["bytes"] == list(e["token"].encode()) for e in entries
    )


def test_completion_stream_is_framed_like_vllm(client: httpx.Client) -> None:
    body = {
        "prompt": PROMPT,
        "temperature": 0,
        "max_tokens": 10,
        "stream_options": {"include_usage": True},
    }
    events = data_events(sse_events(client, "/v1/completions", body))
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    usage_chunk = chunks.pop()
    assert usage_chunk["choices"] == [] and usage_chunk["usage"]["completion_tokens"] == 10
    assert len({c["id"] for c in chunks}) == 1
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None] * 9 + ["length"]
    text = "".join(c["choices"][0]["text"] for c in chunks)
    assert text == complete(client, max_tokens=10)["choices"][0]["text"]


def test_chat_stream_opens_with_a_role_chunk(client: httpx.Client) -> None:
    body = {"messages": [{"role": "user", "content": "hi"}], "temperature": 0, "max_tokens": 4}
    chunks = [
        json.loads(e) for e in data_events(sse_events(client, "/v1/chat/completions", body))[:-1]
    ]
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert deltas[0] == {"role": "assistant", "content": ""}
    assert all(set(d) == {"content"} and len(d["content"]) == 1 for d in deltas[1:])
    assert len(deltas) == 5 and all(c["object"] == "chat.completion.chunk" for c in chunks)


def test_keep_alive_comments_fill_the_wait_for_the_first_token(client: httpx.Client) -> None:
    # clef-flash-candle takes ~70 ms to the first token; keep-alives come every 20 ms.
    events = sse_events(client, "/v1/completions", {"prompt": PROMPT, "max_tokens": 2})
    assert events[0] == ": keep-alive"


def test_a_seed_makes_sampling_repeatable(client: httpx.Client) -> None:
    def sample(seed: int) -> str:
        return complete(client, temperature=1.5, seed=seed, max_tokens=24)["choices"][0]["text"]

    assert sample(7) == sample(7)
    assert len({sample(seed) for seed in range(4)}) > 1


BAD_BODIES = [
    ({"prompt": PROMPT, "max_tokens": -1}, "max_tokens"),
    ({"max_tokens": 4}, "prompt"),
    ({"prompt": "", "max_tokens": 4}, "prompt"),
    ({"prompt": PROMPT, "temperature": "hot"}, "temperature"),
    ({"prompt": PROMPT, "logprobs": 21}, "logprobs"),
    ({"prompt": [72, 999], "max_tokens": 4}, "prompt"),
    ({"prompt": PROMPT, "n": 2}, "n"),
    ({"prompt": PROMPT, "max_tokens": 9000}, "max_tokens"),
]


@pytest.mark.parametrize(("body", "param"), BAD_BODIES)
def test_invalid_completion_requests_are_400_naming_the_field(
    client: httpx.Client, body: dict[str, Any], param: str
) -> None:
    response = client.post("/v1/completions", json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "BadRequestError" and error["code"] == 400
    assert error["param"].startswith(param) and param in error["message"]


def test_malformed_requests_never_stop_the_server(client: httpx.Client) -> None:
    assert client.post("/v1/completions", content=b"{not json").status_code == 400
    chat = {"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}
    assert client.post("/v1/chat/completions", json=chat).status_code == 400
    assert client.post("/v1/completions", json={"prompt": "x", "model": "other"}).status_code == 404
    assert client.get("/v1/nowhere").status_code == 404
    assert client.get("/v1/completions").status_code == 405
    host, port = client.base_url.host, client.base_url.port
    with socket.create_connection((host, port), timeout=5) as raw:
        raw.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        answer = raw.recv(4096)
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert complete(client, max_tokens=3)["usage"]["completion_tokens"] == 3
