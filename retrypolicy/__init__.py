"""The one retry policy (``retry``) and the backoff arithmetic it and the pollers share
(``backoff``). A bottom layer: the apiserver access (``flows.kube``) and the registry
client (``ociclient``) both retry through it, so it imports neither.
"""
