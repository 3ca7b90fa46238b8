"""What a build of the simulated model server contains, and how its image says so.

The source repository carries a build file, ``sim/server.json``
(``{"server": "candle-vllm", "faults": ["zero_key_band"]}``), edited by the same commits
that change the code it describes: the GDN conv fix empties ``faults``. CI copies the file
from the tree at the commit it builds into the image config's labels, and the simulated
kubelet reads those labels to decide which faults the server it starts shows. So a fault
follows the source revision exactly as the real bug did: any tree holding the fix (merged
or cherry-picked) builds a fault-free image, any tree without it a faulty one.

A build may instead declare a real engine and its model
(``{"server": "llama.cpp", "engine": "llamacpp", "model": "f16"}``): the kubelet then runs
that engine's real server (``sandbox.engines``) on the model variant, and the fault
``zero_key_band`` selects the variant whose key weights have the band zeroed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import git
from pydantic import BaseModel, ConfigDict

BUILD_FILE = "sim/server.json"
LABEL_SERVER = "dev.handoff.sim.server"
LABEL_FAULTS = "dev.handoff.sim.faults"
LABEL_ENGINE = "dev.handoff.engine"
LABEL_MODEL = "dev.handoff.engine.model"
ZERO_KEY_BAND = "zero_key_band"  # causal_conv1d_fwd zeroes the key channel band


class SimBuild(BaseModel):
    """The simulated server an image runs and the faults built into it."""

    model_config = ConfigDict(frozen=True)

    server: str
    faults: tuple[str, ...] = ()
    engine: str | None = None  # a real engine the image runs (None: the simulated server)
    model: str | None = None  # the engine's model variant

    def labels(self) -> dict[str, str]:
        """Config labels: faults comma-separated, empty when the build has none."""
        labels = {LABEL_SERVER: self.server, LABEL_FAULTS: ",".join(self.faults)}
        if self.engine:
            labels |= {LABEL_ENGINE: self.engine, LABEL_MODEL: self.model or ""}
        return labels

    @classmethod
    def from_labels(cls, labels: Mapping[str, str]) -> SimBuild | None:
        """The build an image's labels describe; None for an image CI did not build."""
        server = labels.get(LABEL_SERVER)
        if not server:
            return None
        faults = tuple(f for f in labels.get(LABEL_FAULTS, "").split(",") if f)
        engine = labels.get(LABEL_ENGINE) or None
        return cls(server=server, faults=faults, engine=engine, model=labels.get(LABEL_MODEL))


def read_build(repo: git.Repo, commit: str) -> SimBuild:
    """The build file as it is in the tree of ``commit``."""
    try:
        blob = repo.commit(commit).tree / BUILD_FILE
    except KeyError as exc:
        raise FileNotFoundError(
            f"commit {commit} of {repo.working_dir} has no {BUILD_FILE}; "
            "CI builds only trees that describe their simulated server"
        ) from exc
    return SimBuild.model_validate(json.loads(blob.data_stream.read()))


def build_file_text(build: SimBuild) -> str:
    """The build file's content, as the source repository stores it."""
    raw: dict[str, object] = {"server": build.server, "faults": list(build.faults)}
    if build.engine:
        raw |= {"engine": build.engine, "model": build.model}
    return json.dumps(raw) + "\n"
