"""The webhook relay: a forge's merge → one Prefect event per handoff it affects.

Prefect OSS has no incoming webhooks, so this small ASGI app stands between
Forgejo/Gitea/GitHub and the Prefect API: it checks the HMAC signature, stores the
delivery and answers 202 at once; its worker then reads the merge's changed files
from git, maps them to the handoff specs they touch and emits a `handoff.merge`
event for each (once per spec and merge); a deployment trigger in `prefect.yaml`
turns each event into a handoff flow run.

    signature.py   HMAC-SHA256 checks of the forge's signature headers
    payload.py     push / pull_request-merged payloads → one typed Merge
    source.py      which URL a merge is fetched from (configured, or a checked payload URL)
    gitcmd.py      git commands with a deadline, killed with their children when it passes
    mirrors.py     the bare git mirrors: one per URL, locked per delivery, pruned (LRU, size)
    mirror.py      changed files and specs of a merge, from its mirror
    specs.py       changed files → the handoff specs they affect
    events.py      the Prefect events: build, emit, read back
    repository.py  is a delivery's repository the one the relay serves
    deliveries.py  the store: the inbox of deliveries and the merges emitted
    worker.py      the worker giving each stored delivery its outcome, with retries
    intake.py      a body read within the byte budgets (all peers, each peer)
    app.py         the ASGI app: intake, GET /deliveries/<id>, the worker's lifespan
    server.py      uvicorn with header deadlines and connection caps (all, per peer)
"""
