"""Reading a YAML file that must hold a mapping, with errors that name the file.

A bottom layer: the handoff spec (flows.spec) and the task suite (gates.task.suite) both
read through it, so it imports neither and each passes its own error type.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def read_mapping(path: Path, what: str, error: type[Exception]) -> dict[str, Any]:
    """The mapping at the top of `path` (`what` names it in messages); else `error`."""
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise error(f"{what} {path} is not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise error(f"{what} {path}: expected a mapping at the top level, got {type(raw).__name__}")
    return raw
