"""The sandbox registry and CI publisher: docker-registry runs with our own config (loopback,
storage in the run directory, deletes on, no auth), can be stopped from another process,
keeps old digests pullable when a tag moves, and images carry the build their revision
contains (the fault follows the source revision)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import git
import httpx
import pytest
import yaml

from ociclient.client import LABEL_REVISION, LABEL_SOURCE, RegistryClient
from sandbox import procs
from sandbox.publisher import publish, publish_detached
from sandbox.registry import Registry
from sandbox.simbuild import ZERO_KEY_BAND, SimBuild
from sandbox.srcrepo import SourceRepo, cherry_pick

SOURCE_URL = "https://git.example/candle-vllm"


def _listening_addresses(port: int) -> set[str]:
    """Local addresses with a TCP socket listening on ``port`` (from /proc/net/tcp)."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, hex_port = local.split(":")
        if state == "0A" and int(hex_port, 16) == port:
            found.add(".".join(str(int(address[i : i + 2], 16)) for i in (6, 4, 2, 0)))
    return found


def test_own_config_loopback_only_storage_in_run_dir(registry: Registry) -> None:
    config = yaml.safe_load((registry.directory / "config.yml").read_text())
    assert config["http"]["addr"] == registry.host
    assert config["storage"]["filesystem"]["rootdirectory"] == str(registry.directory / "data")
    assert config["storage"]["delete"] == {"enabled": True}
    assert "auth" not in config
    assert _listening_addresses(registry.port) == {"127.0.0.1"}
    assert httpx.get(f"{registry.url}/v2/").status_code == 200  # no htpasswd challenge


def test_stop_from_another_process_by_pid_file(tmp_path: Path) -> None:
    started = Registry.start(tmp_path)
    pid_file = started.directory / "registry.pid"
    assert int(pid_file.read_text()) == started.pid
    script = "import sys; from pathlib import Path; from sandbox.registry import Registry; "
    script += "print(Registry.attach(Path(sys.argv[1])).stop())"
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True,
                         text=True, check=True, timeout=60).stdout  # fmt: skip
    assert out.strip() == "True"
    assert not started.is_running() and not pid_file.exists()
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{started.url}/v2/", timeout=2)
    assert started.stop() is False  # a second stop is harmless


def test_repushing_a_tag_moves_it_and_old_digest_stays_pullable(
    registry: Registry, repository: str, source: SourceRepo
) -> None:
    old = publish(registry.url, repository, "sm70", git_repo=source.path,
                  commit=source.commits["gptq"])  # fmt: skip
    new = publish(registry.url, repository, "sm70", git_repo=source.path,
                  commit=source.commits["fix"])  # fmt: skip
    with RegistryClient(registry.url) as client:
        assert client.resolve(repository, "sm70") == new != old
        old_image = client.read_image(repository, old)
        assert old_image.labels[LABEL_REVISION] == source.commits["gptq"]
        assert client.read_image(repository, "sm70").labels[LABEL_REVISION] == source.commits["fix"]


def test_same_commit_builds_the_same_digest(
    registry: Registry, repository: str, source: SourceRepo
) -> None:
    digests = {publish(registry.url, repository, tag, git_repo=source.path,
                       commit=source.commits["fix"]) for tag in ("a", "b")}  # fmt: skip
    assert len(digests) == 1


def test_fault_follows_the_source_revision(
    registry: Registry, repository: str, source: SourceRepo
) -> None:
    repo = git.Repo(source.path)
    picked = cherry_pick(repo, source.commits["fix"], branch="release/sm70",
                         onto=source.commits["ci"])  # fmt: skip
    expected = {"ci": (ZERO_KEY_BAND,), "gptq": (ZERO_KEY_BAND,), "fix": ()}
    with RegistryClient(registry.url) as client:
        for name, faults in [*expected.items(), (picked, ())]:
            commit = source.commits.get(name, name)
            digest = publish(registry.url, repository, name[:12], git_repo=source.path,
                             commit=commit, source_url=SOURCE_URL)  # fmt: skip
            labels = client.read_image(repository, digest).labels
            assert labels[LABEL_REVISION] == commit
            assert labels[LABEL_SOURCE] == SOURCE_URL
            assert SimBuild.from_labels(labels) == SimBuild(server="candle-vllm", faults=faults)


def test_delete_is_enabled(registry: Registry, repository: str, source: SourceRepo) -> None:
    digest = publish(registry.url, repository, "gone", git_repo=source.path, commit="main")
    response = httpx.delete(f"{registry.url}/v2/{repository}/manifests/{digest}")
    assert response.status_code == 202
    with RegistryClient(registry.url) as client:
        assert client.resolve(repository, "gone") is None


def test_detached_publish_after_a_delay(
    registry: Registry, repository: str, source: SourceRepo, tmp_path: Path
) -> None:
    record = publish_detached(registry.url, repository, "later", git_repo=source.path,
                              commit=source.commits["fix"], delay_s=0.5,
                              log=tmp_path / "publisher.log")  # fmt: skip
    with RegistryClient(registry.url) as client:
        assert client.resolve(repository, "later") is None  # still "building"
        deadline = time.monotonic() + 60
        while procs.is_alive(record) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not procs.stop(record), "publisher still running after 60 s"
        assert "pushed" in (tmp_path / "publisher.log").read_text()
        labels = client.read_image(repository, "later").labels
        assert labels[LABEL_REVISION] == source.commits["fix"]
