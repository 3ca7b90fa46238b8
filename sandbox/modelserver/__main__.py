"""`python -m sandbox.modelserver --profile NAME --port N`."""

import typer

from sandbox.modelserver.cli import model_server

if __name__ == "__main__":
    typer.run(model_server)
