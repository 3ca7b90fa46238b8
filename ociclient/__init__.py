"""A read-only client for OCI registries (distribution API v2): references, auth, manifests.

A bottom layer: it imports neither ``flows`` nor ``sandbox``; both use it. Its errors
(``ociclient.errors``) have a base of their own, which callers map to theirs.
"""
