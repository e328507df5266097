"""Kubernetes fixtures: two contexts (`ctx-a`, `ctx-b`), each its own API server fake
(tests/k8s_fake.py) with GPU nodes, a kubeconfig naming both ($KUBECONFIG), and
config.yaml's `kubernetes:` section allowing them in that order. `k8s_bodies` adds an
sshd body (tests/cloud_bodies.py) per running pod, at the pod IP the fake assigned,
with the key of the pod's mounted Secret and the pod's NCCL_*/FI_* variables in its
sessions (what the pod's sshd passes on)."""

from __future__ import annotations

import base64
import ipaddress
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.k8s_fake import K8sFake, write_kubeconfig
from tests.k8s_store import make_node
from tests.rest_fake import lab_ip_net, lab_or_none, write_config

pytest.importorskip("kubernetes")

H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
_served: dict[str, K8sFake] = {}


@dataclass
class K8sEnv:
    fakes: dict[str, K8sFake]
    kubeconfig: Path
    home: Path

    def config(self, **section: Any) -> None:
        """Rewrite config.yaml's kubernetes section (allowed_contexts kept unless given)."""
        body = {"allowed_contexts": list(self.fakes), **section}
        write_config(self.home, "kubernetes", body)
        _forget()

    def pods(self) -> list[dict[str, Any]]:
        return [p for f in self.fakes.values() for p in f.store.items("pods")]

    def leftovers(self) -> list[str]:
        """Every object launcher labelled, in every fake."""
        out = []
        for name, f in self.fakes.items():
            for res in ("pods", "services", "secrets", "persistentvolumeclaims"):
                out += [f"{name}/{res}/{o['metadata']['name']}"
                        for o in f.store.items(res, None, "app.kubernetes.io/managed-by=launcher")]
        return out


def _forget() -> None:
    from launcher.clouds import registry
    from launcher.clouds.kubernetes import offers

    registry.get_cloud.cache_clear()
    offers.forget()


def default_nodes(fake: K8sFake, prefix: str, count: int = 3, gpus: int = 8) -> None:
    for i in range(count):
        fake.add_node(make_node(f"{prefix}-gpu-{i}", ip=f"172.30.{len(prefix)}.{i + 1}", cpu=96,
                                memory_gi=1024, gpus=gpus, labels=H100))
    for i in range(2):
        fake.add_node(make_node(f"{prefix}-cpu-{i}", ip=f"172.30.{len(prefix)}.{100 + i}", cpu=16,
                                memory_gi=64))


@pytest.fixture
def k8s(tmp_path: Path, launcher_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[K8sEnv]:
    fakes = {}
    for name in ("ctx-a", "ctx-b"):
        if name not in _served:
            _served[name] = K8sFake(name=name).serve()
        fake = _served[name]
        fake.reset()
        fakes[name] = fake
    default_nodes(fakes["ctx-a"], "a")
    default_nodes(fakes["ctx-b"], "b")
    kc = write_kubeconfig(tmp_path / "kubeconfig", fakes)
    monkeypatch.setenv("KUBECONFIG", str(kc))
    env = K8sEnv(fakes, kc, launcher_home)
    env.config()
    try:
        yield env
    finally:
        _forget()


def _key_of(fake: K8sFake, pod: dict[str, Any]) -> str | None:
    for vol in pod["spec"].get("volumes") or []:
        name = (vol.get("secret") or {}).get("secretName")
        if name:
            found = fake.store.items("secrets", pod["metadata"]["namespace"], None,
                                     f"metadata.name={name}")
            if found:
                return base64.b64decode(found[0]["data"]["authorized_keys"]).decode().strip()
    return None


def _image(lab: Any, pod: dict[str, Any]) -> dict[str, str]:
    """A body's session environment: the pod's NCCL_*/FI_* variables, and for a GPU pod
    fake GPU tools (tests/fakes) showing the H100s its limit asked for."""
    from tests.fakes import gpu_image

    container = pod["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container.get("env") or []
           if e["name"].startswith(("NCCL_", "FI_"))}
    gpus = int(((container.get("resources") or {}).get("limits") or {}).get("nvidia.com/gpu", 0))
    if gpus:
        if gpus not in _gpu_images:  # written once: a body may be reading it
            cfg = Path(lab.workdir) / f"gpu-image-k8s-{gpus}"
            cfg.mkdir(exist_ok=True)
            _gpu_images[gpus] = gpu_image(cfg, count=gpus, name="NVIDIA H100 80GB HBM3")
        env.update(_gpu_images[gpus])
    return env


_gpu_images: dict[int, dict[str, str]] = {}


@pytest.fixture
def k8s_bodies(k8s: K8sEnv, request: pytest.FixtureRequest) -> Iterator[K8sEnv]:
    from tests.aws_moto import ConnectGuard
    from tests.cloud_bodies import CloudBodies

    lab = lab_or_none(request)
    if lab is None:
        pytest.skip("Kubernetes pod bodies need network-namespace sshd nodes")
    ranges = {"ctx-a": ".64/27", "ctx-b": ".96/27"}
    for name, fake in k8s.fakes.items():
        fake.store.pod_net = ipaddress.ip_network(str(lab_ip_net(lab, ranges[name])))
    envs: dict[str, dict[str, str]] = {}

    def list_instances() -> list[tuple[str, str, str | None]]:
        out = []
        for fake in k8s.fakes.values():
            for pod in fake.live_pods():
                uid = pod["metadata"]["uid"]
                envs[uid] = _image(lab, pod)
                out.append((uid, pod["status"]["podIP"], _key_of(fake, pod)))
        return out

    bodies = CloudBodies(lab, list_instances, name="k8s", env_for=lambda uid: envs.get(uid, {})).start()
    k8s.bodies = bodies  # type: ignore[attr-defined]
    try:
        with ConnectGuard(lab.subnet) as guard:
            yield k8s
    finally:
        bodies.close()
        for fake in k8s.fakes.values():
            fake.store.pod_net = ipaddress.ip_network("10.123.255.0/24")
    assert not guard.violations, f"connected outside the lab: {sorted(set(guard.violations))}"
