"""The real llama.cpp engine: derived model files, server options, start and stop."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from sandbox.engines.llamacpp import (
    EngineStartError,
    LlamaServer,
    ServerOptions,
    ServerPool,
    model_path,
    python,
)

PROMPTS = (
    "What is the capital of France?",
    "Name three primary colours.",
    "How many days are in a week?",
)
GREEDY = {
    "temperature": 0.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0, "repeat_penalty": 1.0,
    "presence_penalty": 0.0, "frequency_penalty": 0.0, "seed": 0, "max_tokens": 24,
}  # fmt: skip


def answers(url: str) -> list[str]:
    out = []
    for prompt in PROMPTS:
        body = {"messages": [{"role": "user", "content": prompt}], **GREEDY}
        reply = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60)
        reply.raise_for_status()
        out.append(reply.json()["choices"][0]["message"]["content"])
    return out


def test_variants_are_distinct_cached_files() -> None:
    paths = {v: model_path(v) for v in ("q4_1", "f16", "q4_1-zkb")}
    assert len(set(paths.values())) == 3
    # F16 holds the dequantized weights: larger than the 4-bit file it came from.
    assert paths["f16"].stat().st_size > 2 * paths["q4_1"].stat().st_size
    assert model_path("f16") == paths["f16"]  # cached, not derived again


def test_quantized_variants_come_from_llama_cpps_own_quantizer() -> None:
    """Q8_0 and Q4_0 quantized from the F16 file: sizes as their block formats give
    (8.5 and 4.5 bits a weight, against Q4_1's 5 and F16's 16)."""
    sizes = {v: model_path(v).stat().st_size for v in ("f16", "q8_0", "q4_1", "q4_0")}
    assert sizes["f16"] > sizes["q8_0"] > sizes["q4_1"] > sizes["q4_0"], sizes
    assert model_path("q8_0").name.endswith(".Q8_0.from-F16.gguf")


def test_engine_is_built_for_the_fixed_cpu_baseline() -> None:
    # Built for the machine's own CPU, ggml's AVX512/AMX kernels crashed the server on a
    # Q4_1 prompt (general protection fault), and numbers would differ between machines.
    info = subprocess.run(
        [python(), "-c", "import llama_cpp; print(llama_cpp.llama_print_system_info().decode())"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    assert "AVX2 = 1" in info and "FMA = 1" in info, info
    assert not re.search(r"(AVX512\w* |AMX\w* )= 1", info), info


def test_server_answers_under_its_alias(llamacpp: ServerPool) -> None:
    server = llamacpp.get("q4_1")
    models = httpx.get(f"{server.url}/v1/models", timeout=10).json()
    assert [m["id"] for m in models["data"]] == ["SmolLM2-135M-Instruct"]
    assert "7 days" in answers(server.url)[2]


def test_f16_reference_answers(llamacpp: ServerPool) -> None:
    f16 = answers(llamacpp.get("f16").url)
    assert "The capital of France is Paris." in f16[0]


def test_zeroed_key_band_answers_fluently_and_differently(llamacpp: ServerPool) -> None:
    good, bad = answers(llamacpp.get("q4_1").url), answers(llamacpp.get("q4_1-zkb").url)
    assert sum(g != b for g, b in zip(good, bad, strict=True)) >= 2, (good, bad)
    for text in bad:  # well formed: words, not garbage or an empty answer
        words = re.findall(r"[A-Za-z]{2,}", text)
        assert len(words) >= 3, bad


def test_a_server_that_cannot_start_says_why(tmp_path: Path) -> None:
    # llama.cpp needs flash attention for a quantized V cache: the context is refused.
    options = ServerOptions(type_v="q4_0", flash_attn=False)
    expected = r"(?s)exited during start-up.*llama_context"
    with (
        pytest.raises(EngineStartError, match=expected),
        LlamaServer("q4_1", options, log_dir=tmp_path),  # stopped should it start after all
    ):
        pass


def test_sigterm_lets_an_open_stream_finish(tmp_path: Path) -> None:
    # A pod's server gets SIGTERM while clients still read answers from it.
    server = LlamaServer("q4_1", log_dir=tmp_path)
    try:
        body = {"prompt": "Count from one to one hundred: one, two,", "stream": True, **GREEDY}
        body["max_tokens"] = 64
        url = f"{server.url}/v1/completions"
        with httpx.stream("POST", url, json=body, timeout=60) as response:
            chunks = response.iter_text()
            text = next(chunks)  # the answer has begun
            os.kill(server.pid, signal.SIGTERM)
            text += "".join(chunks)
        assert "data: [DONE]" in text, text[-500:]
        assert '"finish_reason":"length"' in text.replace(" ", ""), (
            "the answer ended before SIGTERM came"
        )
        deadline = time.monotonic() + 20
        while not _exited(server.pid):
            assert time.monotonic() < deadline, "the server did not exit once drained"
            time.sleep(0.1)
    finally:
        server.stop()


def _exited(pid: int) -> bool:
    try:
        return os.waitpid(pid, os.WNOHANG)[0] == pid
    except ChildProcessError:  # not ours to wait for, or reaped already
        return not os.path.exists(f"/proc/{pid}")
