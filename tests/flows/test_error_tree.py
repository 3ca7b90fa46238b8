"""The tree drawn in flows/errors.py's docstring lists every error class of the flows
package, under its real parent and in the module it names."""

from __future__ import annotations

import importlib
import pkgutil
import re

import flows
from flows import errors

# "    │   ├── Conflict      (kube.client) 409: ..." -> indent, name, module
_NODE = re.compile(
    r"^(?P<indent>[ │]*)(?:[├└]── )?(?P<name>[A-Z]\w+)\s+(?:\((?P<module>[\w.]+)\))?"
)


def documented(doc: str) -> dict[str, tuple[str | None, str]]:
    """Each class of the drawn tree: (its parent, its module)."""
    tree: dict[str, tuple[str | None, str]] = {}
    parents: list[str] = []  # parents[depth] = the last class seen at that depth
    lines = doc.splitlines()
    first = next(i for i, line in enumerate(lines) if line.strip() == "HandoffError")
    base = len(lines[first]) - len(lines[first].lstrip())
    for line in lines[first:]:
        if not line.strip():
            break
        node = _NODE.match(line[base:] + " ")
        assert node, f"unreadable line in the tree: {line!r}"
        indent = len(node["indent"]) + (4 if "──" in line else 0)
        depth = indent // 4
        name = node["name"]
        del parents[depth:]
        tree[name] = (parents[-1] if parents else None, f"flows.{node['module'] or 'errors'}")
        parents.append(name)
    return tree


def actual() -> dict[str, tuple[str | None, str]]:
    """Every subclass of HandoffError once every module of flows is imported."""
    for module in pkgutil.walk_packages(flows.__path__, "flows."):
        if not module.name.endswith("__main__"):  # running it would start a program
            importlib.import_module(module.name)
    found: dict[str, tuple[str | None, str]] = {"HandoffError": (None, "flows.errors")}
    pending = [errors.HandoffError]
    while pending:
        cls = pending.pop()
        for sub in cls.__subclasses__():
            found[sub.__name__] = (cls.__name__, sub.__module__)
            pending.append(sub)
    return found


def test_the_tree_parses_parents_and_modules() -> None:
    tree = documented(
        """
    HandoffError
    ├── TransientError     may clear
    │   └── Conflict       (kube.client) 409
    └── PermanentError     will not
        ├── KubeError      (kube.client) refused
        │   └── NotFound   (kube.client) absent
        └── GateFailed     said no
"""
    )
    assert tree == {
        "HandoffError": (None, "flows.errors"),
        "TransientError": ("HandoffError", "flows.errors"),
        "Conflict": ("TransientError", "flows.kube.client"),
        "PermanentError": ("HandoffError", "flows.errors"),
        "KubeError": ("PermanentError", "flows.kube.client"),
        "NotFound": ("KubeError", "flows.kube.client"),
        "GateFailed": ("PermanentError", "flows.errors"),
    }


def test_every_error_class_is_in_the_documented_tree() -> None:
    tree, found = documented(errors.__doc__ or ""), actual()
    missing = {name: where for name, where in found.items() if name not in tree}
    assert not missing, (
        f"error classes missing from the tree in flows/errors.py's docstring: {missing}; "
        "draw them under their parent, naming their module"
    )
    stale = sorted(set(tree) - set(found))
    assert not stale, f"the tree in flows/errors.py names classes that do not exist: {stale}"
    wrong = {name: (tree[name], found[name]) for name in found if tree[name] != found[name]}
    assert not wrong, f"(documented parent, module) vs (actual): {wrong}"
