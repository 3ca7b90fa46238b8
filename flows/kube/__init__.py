"""The only place that talks to the Kubernetes API.

`client` connects and maps API errors to `flows.errors`; `read` returns typed
snapshots; `write` makes single writes (server-side apply, scale, selector patch,
annotations, events), each with a server-side dry-run mode; `wait` watches;
`portforward` reaches pod ports from outside the cluster.
"""
