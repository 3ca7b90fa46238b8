"""The webhook relay: a forge's merge → one Prefect event per handoff it affects.

Prefect OSS has no incoming webhooks, so this small ASGI app stands between
Forgejo/Gitea/GitHub and the Prefect API: it checks the HMAC signature, drops
replayed deliveries, maps the merge's changed files to the handoff specs they
touch and emits a `handoff.merge` event for each; a deployment trigger in
`prefect.yaml` turns each event into a handoff flow run.

    signature.py   HMAC-SHA256 checks of the forge's signature headers
    payload.py     push / pull_request-merged payloads → one typed Merge
    source.py      which URL a merge is fetched from (configured, or a checked payload URL)
    gitcmd.py      git commands with a deadline, killed with their children when it passes
    mirrors.py     the bare git mirrors: one per URL, locked per delivery, pruned (LRU, size)
    mirror.py      changed files and specs of a merge, from its mirror
    specs.py       changed files → the handoff specs they affect
    events.py      the Prefect events: build, emit, read back
    deliveries.py  the replay guard (delivery ids and merges already relayed)
    app.py         the ASGI app tying these together
"""
