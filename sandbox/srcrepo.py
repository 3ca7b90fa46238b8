"""The simulated ``candle-vllm`` source repository: a few commits, then the GDN conv fix.

History on ``main`` (dates fixed, so the commit ids are the same on every machine)::

    initial  import: causal_conv1d_fwd zeroes the key channel band (the bug)
    ci       CI workflow that builds and publishes :sm70 on every merge to main
    gptq     guard g_idx when sharding quantised weights
    fix      fix(gdn): causal_conv1d_fwd keeps the key channel band (#5)

The fix commit changes the kernel and the build file ``sim/server.json`` together, so a
tree has the fault exactly when it lacks the fix (see ``sandbox.simbuild``).
``cherry_pick`` puts the fix on a release branch under a new id, as a backport would.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import git
from pydantic import BaseModel

from sandbox.simbuild import BUILD_FILE, ZERO_KEY_BAND, SimBuild, build_file_text

_EPOCH = datetime(2026, 11, 1, tzinfo=UTC)
_IDENTITY = {"user.name": "candle-vllm CI", "user.email": "ci@candle-vllm.invalid"}

_CONV_BUGGY = """pub fn causal_conv1d_fwd(x: &Tensor, w: &Tensor, band: Range<usize>) -> Tensor {
    let mut y = conv1d(x, w);
    y.zero_channels(band); // wrong: the key channels are the delta rule's input
    y
}
"""
_CONV_FIXED = """pub fn causal_conv1d_fwd(x: &Tensor, w: &Tensor, _band: Range<usize>) -> Tensor {
    conv1d(x, w) // every channel, key band included, goes through the convolution
}
"""
_FILES = {
    "README.md": "# candle-vllm\n\nOpenAI-compatible LLM server on candle, built for sm70.\n",
    "Cargo.toml": '[package]\nname = "candle-vllm"\nversion = "0.4.0"\n',
    "src/ops/causal_conv1d.rs": _CONV_BUGGY,
    "src/openai/models/linear.rs": "pub fn shard(w: &QTensor) -> QTensor { w.split_cols() }\n",
    BUILD_FILE: build_file_text(SimBuild(server="candle-vllm", faults=(ZERO_KEY_BAND,))),
}
_CI = "on: {push: {branches: [main]}}\njobs: {build: {steps: [{run: make image TAG=sm70}]}}\n"
_GPTQ = (
    "pub fn shard(w: &QTensor) -> QTensor {\n"
    "    if w.g_idx().is_some() { w.split_groups() } else { w.split_cols() }\n}\n"
)
FIX_MESSAGE = "fix(gdn): causal_conv1d_fwd keeps the key channel band (#5)"


class SourceRepo(BaseModel):
    """Where the repository is and the ids of its named commits."""

    path: Path
    commits: dict[str, str]

    @property
    def url(self) -> str:
        return self.path.as_uri()


def create_candle_vllm_repo(path: Path, *, with_fix: bool = True) -> SourceRepo:
    """Create the repository at ``path`` (a new directory); the fix commit is optional."""
    repo = git.Repo.init(path, initial_branch="main")
    with repo.config_writer() as config:
        for key, value in _IDENTITY.items():
            config.set_value(*key.split("."), value)
    commits = {
        "initial": commit_files(repo, _FILES, "import candle-vllm with sm70 kernels"),
        "ci": commit_files(
            repo,
            {".gitea/workflows/candle-vllm-sm70.yaml": _CI},
            "ci: build and publish :sm70 on every merge to main",
        ),
        "gptq": commit_files(
            repo,
            {"src/openai/models/linear.rs": _GPTQ},
            "fix(gptq): guard g_idx when sharding quantised weights",
        ),
    }
    if with_fix:
        commits["fix"] = commit_gdn_fix(repo)
    return SourceRepo(path=path.resolve(), commits=commits)


def commit_gdn_fix(repo: git.Repo) -> str:
    """Commit the GDN conv fix on the checked-out branch; returns its id."""
    fixed = {
        "src/ops/causal_conv1d.rs": _CONV_FIXED,
        BUILD_FILE: build_file_text(SimBuild(server="candle-vllm")),
    }
    return commit_files(repo, fixed, FIX_MESSAGE)


def commit_files(repo: git.Repo, files: dict[str, str], message: str) -> str:
    """Write ``files`` and commit them an hour after the branch head; returns the id."""
    root = Path(repo.working_dir)
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    repo.git.add("--", *files)
    repo.git.commit("-m", message, env=_dates(repo))
    return repo.head.commit.hexsha


def cherry_pick(repo: git.Repo, commit: str, *, branch: str, onto: str) -> str:
    """Create ``branch`` at ``onto``, add a commit of its own, then cherry-pick ``commit``.

    The branch's own commit makes sure its head descends from neither the fix nor main.
    The branch checked out before is checked out again afterwards.
    """
    previous = repo.active_branch.name
    repo.git.checkout("-b", branch, onto)
    commit_files(repo, {"RELEASE": f"{branch}\n"}, f"release: open {branch}")
    repo.git.cherry_pick("-x", commit, env=_dates(repo))
    picked = repo.head.commit.hexsha
    repo.git.checkout(previous)
    return picked


def _dates(repo: git.Repo) -> dict[str, str]:
    try:
        last = repo.head.commit.committed_datetime
    except ValueError:  # no commit yet
        last = _EPOCH
    stamp = (last + timedelta(hours=1)).isoformat()
    return {"GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp}
