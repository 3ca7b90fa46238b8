"""Known escapes from the task gate's code checks, each a malicious answer scored through
the gate's own `gates.task.check.check`, in a process of its own: once as the user running
the tests and, when that is root, once more as `nobody` (as a flow image's non-root user
runs it). That process carries a secret in its environment, and a marker in its argv.

Each answer tries to pass a wrong `add`, or to carry out what it could read: every test
asserts it scored 0, or that nothing escaped."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.gates.conftest import REPO

NOBODY = 65534
SECRET_VAR = "HANDOFF_ESCAPE_SECRET"
ADD_TESTS = "assert add(2, 3) == 5\nassert add(-1, 1) == 0\n"
WRONG_ADD = "\ndef add(a, b):\n    return a - b\n"

# The process that scores them: reads [name, kind, answer, tests] rows, prints their
# verdicts as {name: [score, detail]}.
RUNNER = """
import json, sys
from gates.task.check import check
from gates.task.suite import Code, Function, Limits
limits = Limits(cpu_s=2, wall_s=8, memory_mb=256)
out = {}
for name, kind, answer, tests in json.load(sys.stdin):
    checker = Code(tests=tests) if kind == "code" else Function(source=tests)
    try:
        verdict = check(checker, answer, limits)
        out[name] = [verdict.score, verdict.detail]
    except Exception as exc:
        out[name] = [-1.0, f"{type(exc).__name__}: {exc}"]
print(json.dumps(out))
"""

# Reads the harness's locals from its frames and prints a pass with them (escapes 1-2).
_FORGE_FROM_FRAME = """
import json, os, sys
def _forge(frame):
    while frame is not None and "nonce" not in frame.f_locals:
        frame = frame.f_back
    if frame is not None:
        line = {"nonce": frame.f_locals["nonce"], "score": 1.0, "detail": "tests passed"}
        frame.f_locals["out"].write(json.dumps(line) + "\\n")
        frame.f_locals["out"].flush()
        os._exit(0)
"""


@dataclass(frozen=True)
class World:
    """What the escapes aim at: a directory anyone may write, a readable secret file."""

    root: Path
    outside: Path
    secret_file: Path
    secret: str
    marker: str


def _answers(world: World) -> dict[str, tuple[str, str, str]]:
    w = world
    return {
        "json_dumps": (
            "code",
            "import json\n_dumps = json.dumps\n"
            "def _forged(obj, *a, **k):\n"
            "    if isinstance(obj, dict) and 'score' in obj:\n"
            "        obj = dict(obj, score=1.0, detail='tests passed')\n"
            "    return _dumps(obj, *a, **k)\n"
            "json.dumps = _forged\n" + WRONG_ADD,
            ADD_TESTS,
        ),
        "tb_frame": (
            "code",
            _FORGE_FROM_FRAME + "try:\n    raise RuntimeError\nexcept RuntimeError as e:\n"
            "    _forge(e.__traceback__.tb_frame)\n" + WRONG_ADD,
            ADD_TESTS,
        ),
        "current_frames": (
            "code",
            _FORGE_FROM_FRAME
            + "import _thread\n_forge(sys._current_frames()[_thread.get_ident()])\n"
            + WRONG_ADD,
            ADD_TESTS,
        ),
        "always_equal": (
            "code",
            "class _Same:\n"
            "    def __eq__(self, other):\n        return True\n"
            "    def __ne__(self, other):\n        return False\n"
            "    __hash__ = object.__hash__\n"
            "def add(a, b):\n    return _Same()\n",
            ADD_TESTS,
        ),
        "dir_fd": (
            "code",
            "import os\n"
            f"_fd = os.open({str(w.outside)!r}, os.O_RDONLY)\n"
            "_w = os.open('escaped.txt', os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=_fd)\n"
            "os.write(_w, b'x')\n"
            "def add(a, b):\n    return a + b\n",
            ADD_TESTS,
        ),
        "file_in_verdict": (
            "code",
            f"raise RuntimeError(open({str(w.secret_file)!r}).read())\n",
            ADD_TESTS,
        ),
        "value_in_verdict": (
            "code",
            f"def add(a, b):\n    return open({str(w.secret_file)!r}).read()\n",
            ADD_TESTS,
        ),
        "parent_environ": (
            "code",
            "import os\n_found = []\n"
            "for _pid in [p for p in os.listdir('/proc') if p.isdigit()] + ['self']:\n"
            "    try:\n"
            "        _found.append(open(f'/proc/{_pid}/environ', 'rb').read().decode())\n"
            "    except OSError:\n        pass\n"
            "_found.append(repr(dict(os.environ)))\n"
            f"_hit = [t for t in _found if {SECRET_VAR!r} in t]\n"
            "if _hit:\n    raise RuntimeError(_hit[0][-400:])\n"
            "def add(a, b):\n    return a - b\n",
            ADD_TESTS,
        ),
        "other_processes": (
            "code",
            "import os\n_seen = ''\n"
            "for _pid in [p for p in os.listdir('/proc') if p.isdigit()]:\n"
            "    try:\n"
            "        _seen += open(f'/proc/{_pid}/cmdline', 'rb').read().decode(errors='replace')\n"
            "    except OSError:\n        pass\n"
            f"_sees = {w.marker!r} in _seen\n"
            "def add(a, b):\n    return a + b if _sees else a - b\n",
            ADD_TESTS,
        ),
        "reads_the_checkout": (
            "code",
            "import os\n"
            f"_sees = os.path.exists({str(REPO / 'manifests' / 'tasks')!r})\n"
            "def add(a, b):\n    return a + b if _sees else a - b\n",
            ADD_TESTS,
        ),
        "long_error": (
            "code",
            "raise RuntimeError('x' * 100000)\n",
            ADD_TESTS,
        ),
        "function_reads_environ": (
            "function",
            "",
            "import os\n"
            "def check(answer):\n"
            "    seen = ''\n"
            "    for pid in [p for p in os.listdir('/proc') if p.isdigit()]:\n"
            "        try:\n"
            "            seen += open(f'/proc/{pid}/environ', 'rb').read().decode()\n"
            "        except OSError:\n            pass\n"
            f"    return {SECRET_VAR!r} in seen\n",
        ),
    }


def _interpreter(user: str) -> tuple[list[str], dict[str, str]]:
    """The command prefix and extra environment that run a Python of this project as `user`."""
    if user == "self":
        return [sys.executable], {"PYTHONPATH": str(REPO)}
    # nobody cannot read root's home, where this project's interpreter may live: Debian's
    # Python of the same version, with the project's packages on its path, is the same.
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    python = shutil.which(version, path="/usr/bin:/usr/local/bin")
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or python is None or setpriv is None:
        pytest.skip("running as nobody needs root, setpriv and a system " + version)
    prefix = [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", python]
    paths = os.pathsep.join([str(REPO), sysconfig.get_paths()["purelib"]])
    return prefix, {"PYTHONPATH": paths}


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    root = Path(tempfile.mkdtemp(prefix="handoff-escapes-"))
    root.chmod(0o755)
    outside = root / "outside"
    outside.mkdir()
    outside.chmod(0o777)
    secret = secrets.token_hex(12)
    secret_file = root / "secret.txt"
    secret_file.write_text(f"the secret is {secret}\n")
    secret_file.chmod(0o644)
    yield World(root, outside, secret_file, secret, marker=f"marker-{secrets.token_hex(6)}")
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module", params=["self", "nobody"])
def verdicts(request: pytest.FixtureRequest, world: World) -> dict[str, tuple[float, str]]:
    """Every answer's verdict, scored by a process of `user` with the secret in its
    environment."""
    prefix, extra = _interpreter(request.param)
    for left in world.outside.iterdir():
        left.unlink()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", **extra}
    env[SECRET_VAR] = world.secret
    rows = [[name, *row] for name, row in _answers(world).items()]
    done = subprocess.run(
        [*prefix, "-c", RUNNER, world.marker],
        input=json.dumps(rows),
        capture_output=True,
        text=True,
        env=env,
        cwd=world.root,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    for name, (score, detail) in found.items():
        assert score >= 0, f"{name}: the gate raised {detail}"
    return {name: (score, detail) for name, (score, detail) in found.items()}


@pytest.mark.parametrize("escape", ["json_dumps", "tb_frame", "current_frames"])
def test_an_answer_cannot_forge_the_harness_verdict(
    verdicts: dict[str, tuple[float, str]], escape: str
) -> None:
    score, detail = verdicts[escape]
    assert score == 0.0, detail


def test_an_always_equal_object_does_not_pass(verdicts: dict[str, tuple[float, str]]) -> None:
    score, detail = verdicts["always_equal"]
    assert score == 0.0, detail


def test_a_relative_path_with_dir_fd_writes_nothing_outside(
    verdicts: dict[str, tuple[float, str]], world: World
) -> None:
    assert not (world.outside / "escaped.txt").exists(), verdicts["dir_fd"]


@pytest.mark.parametrize("escape", ["file_in_verdict", "value_in_verdict", "parent_environ"])
def test_no_secret_is_carried_out_in_the_verdict(
    verdicts: dict[str, tuple[float, str]], world: World, escape: str
) -> None:
    score, detail = verdicts[escape]
    assert score == 0.0 and world.secret not in detail, detail


def test_the_check_sees_no_other_process(verdicts: dict[str, tuple[float, str]]) -> None:
    score, detail = verdicts["other_processes"]
    assert score == 0.0, detail


def test_the_check_cannot_read_the_checkout(verdicts: dict[str, tuple[float, str]]) -> None:
    score, detail = verdicts["reads_the_checkout"]
    assert score == 0.0, detail


def test_a_function_checker_cannot_read_the_parents_environment(
    verdicts: dict[str, tuple[float, str]],
) -> None:
    score, detail = verdicts["function_reads_environ"]
    assert score == 0.0, detail


def test_the_verdict_text_is_short(verdicts: dict[str, tuple[float, str]]) -> None:
    score, detail = verdicts["long_error"]
    assert score == 0.0 and len(detail) <= 300, len(detail)
