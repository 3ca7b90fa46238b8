"""`handoff sandbox model-server`: one simulated model server in the foreground.

The command is defined next to the server (so `python -m sandbox.modelserver` runs it alone)
and re-exported here for the `handoff` CLI.
"""

from sandbox.modelserver.cli import model_server

__all__ = ["model_server"]
