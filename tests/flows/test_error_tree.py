"""The trees drawn in flows/errors.py's and ociclient/errors.py's docstrings list every
error class of their package, under its real parent and in the module it names."""

from __future__ import annotations

import importlib
import pkgutil
import re
from types import ModuleType

import pytest

import flows
import ociclient
from flows import errors
from ociclient import errors as registry_errors

# "    │   ├── Conflict      (kube.client) 409: ..." -> indent, name, module
_NODE = re.compile(
    r"^(?P<indent>[ │]*)(?:[├└]── )?(?P<name>[A-Z]\w+)\s+(?:\((?P<module>[\w.]+)\))?"
)


def documented(
    doc: str, root: str = "HandoffError", package: str = "flows"
) -> dict[str, tuple[str | None, str]]:
    """Each class of the drawn tree: (its parent, its module)."""
    tree: dict[str, tuple[str | None, str]] = {}
    parents: list[str] = []  # parents[depth] = the last class seen at that depth
    lines = doc.splitlines()
    first = next(i for i, line in enumerate(lines) if line.split()[0:1] == [root])
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
        tree[name] = (parents[-1] if parents else None, f"{package}.{node['module'] or 'errors'}")
        parents.append(name)
    return tree


def actual(package: ModuleType, base: type[Exception]) -> dict[str, tuple[str | None, str]]:
    """Every subclass of base once every module of the package is imported."""
    for module in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
        if not module.name.endswith("__main__"):  # running it would start a program
            importlib.import_module(module.name)
    found: dict[str, tuple[str | None, str]] = {base.__name__: (None, base.__module__)}
    pending = [base]
    while pending:
        cls = pending.pop()
        for sub in cls.__subclasses__():
            pending.append(sub)
            # The package's own classes: a test's stand-ins (a model of the cluster's
            # errors) are not part of the tree the package documents.
            if sub.__module__.split(".")[0] == package.__name__:
                found[sub.__name__] = (cls.__name__, sub.__module__)
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


@pytest.mark.parametrize(
    ("package", "tree_module", "base"),
    [
        (flows, errors, errors.HandoffError),
        (ociclient, registry_errors, registry_errors.RegistryError),
    ],
    ids=["flows", "ociclient"],
)
def test_every_error_class_is_in_the_documented_tree(
    package: ModuleType, tree_module: ModuleType, base: type[Exception]
) -> None:
    where = f"{tree_module.__name__.replace('.', '/')}.py"
    tree = documented(tree_module.__doc__ or "", base.__name__, package.__name__)
    found = actual(package, base)
    missing = {name: at for name, at in found.items() if name not in tree}
    assert not missing, (
        f"error classes missing from the tree in {where}'s docstring: {missing}; "
        "draw them under their parent, naming their module"
    )
    stale = sorted(set(tree) - set(found))
    assert not stale, f"the tree in {where} names classes that do not exist: {stale}"
    wrong = {name: (tree[name], found[name]) for name in found if tree[name] != found[name]}
    assert not wrong, f"(documented parent, module) vs (actual): {wrong}"
