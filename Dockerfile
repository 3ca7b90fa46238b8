# The handoff flow's image: what prefect.yaml's `handoff-on-merge-kubernetes` deployment
# runs as a Kubernetes Job. Build it with your own tools, from the repository root:
#
#   docker build -t registry.example/org/handoff:main .     # or podman / buildah bud
#   docker push registry.example/org/handoff:main
#
# The Prefect Kubernetes worker gives the Job's container the args
# `prefect flow-run execute` and no command, so the image has no ENTRYPOINT. The
# image holds the locked dependencies and the pull step's code: the deployment's pull
# step clones each run's merge commit under /tmp and runs that (prefect.yaml).
FROM python:3.11-slim-bookworm

# The sandbox's kubelet runs a container of an image with this label as a local process
# of the checkout, mounted at the label's directory (sandbox/kubelet/flowrun.py).
LABEL dev.handoff.flow.root=/opt/handoff

# git: the flow reads the history of the repository an image is built from.
RUN apt-get update \
    && apt-get install -y --no-install-recommends git bubblewrap \
    && rm -rf /var/lib/apt/lists/*
RUN pip install --no-cache-dir uv==0.13.9

WORKDIR /opt/handoff
ENV UV_PYTHON_PREFERENCE=only-system UV_LINK_MODE=copy UV_COMPILE_BYTECODE=1
# The locked dependencies first: a layer that changes only with uv.lock.
COPY pyproject.toml uv.lock README.md ./
RUN uv sync --frozen --no-dev --no-install-project
COPY cli cli
COPY flows flows
COPY gates gates
COPY ociclient ociclient
COPY retrypolicy retrypolicy
COPY sandbox sandbox
COPY yamlfile yamlfile
COPY manifests manifests
COPY prefect.yaml ./
RUN uv sync --frozen --no-dev

RUN useradd --uid 1001 --create-home handoff
USER 1001
ENV PATH=/opt/handoff/.venv/bin:$PATH PYTHONUNBUFFERED=1 DO_NOT_TRACK=1
CMD ["prefect", "flow-run", "execute"]
