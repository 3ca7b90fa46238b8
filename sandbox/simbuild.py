"""What a build of the simulated model server contains, and how its image says so.

The source repository carries a build file, ``sim/server.json``
(``{"server": "candle-vllm", "faults": ["zero_key_band"]}``), edited by the same commits
that change the code it describes: the GDN conv fix empties ``faults``. CI copies the file
from the tree at the commit it builds into the image config's labels, and the simulated
kubelet reads those labels to decide which faults the server it starts shows. So a fault
follows the source revision exactly as the real bug did: any tree holding the fix (merged
or cherry-picked) builds a fault-free image, any tree without it a faulty one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import git
from pydantic import BaseModel, ConfigDict

BUILD_FILE = "sim/server.json"
LABEL_SERVER = "dev.handoff.sim.server"
LABEL_FAULTS = "dev.handoff.sim.faults"
ZERO_KEY_BAND = "zero_key_band"  # causal_conv1d_fwd zeroes the key channel band


class SimBuild(BaseModel):
    """The simulated server an image runs and the faults built into it."""

    model_config = ConfigDict(frozen=True)

    server: str
    faults: tuple[str, ...] = ()

    def labels(self) -> dict[str, str]:
        """Config labels: faults comma-separated, empty when the build has none."""
        return {LABEL_SERVER: self.server, LABEL_FAULTS: ",".join(self.faults)}

    @classmethod
    def from_labels(cls, labels: Mapping[str, str]) -> SimBuild | None:
        """The build an image's labels describe; None for an image CI did not build."""
        server = labels.get(LABEL_SERVER)
        if not server:
            return None
        faults = tuple(f for f in labels.get(LABEL_FAULTS, "").split(",") if f)
        return cls(server=server, faults=faults)


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
    return json.dumps({"server": build.server, "faults": list(build.faults)}) + "\n"
