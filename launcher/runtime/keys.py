"""SSH keys: the user's launcher key and per-cluster internal keys.

- The user key (`$LAUNCHER_HOME/keys/id_ed25519`) is how this machine logs in
  to nodes. Generated once (race-safe: a file lock plus an atomic rename),
  private key 0600 in a 0700 directory. It never leaves this machine.
- A cluster-internal key (`$LAUNCHER_HOME/keys/clusters/<cluster>/id_ed25519`)
  lets the head node reach the workers. Its private half is copied to the head
  node only; every node authorizes its public half. Deleted when the cluster is.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from launcher.config.settings import launcher_home
from launcher.errors import LauncherError

_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")


@dataclass(frozen=True)
class KeyPair:
    private_path: str
    public_path: str

    def public_key(self) -> str:
        """The one-line OpenSSH public key (`ssh-ed25519 AAAA... comment`)."""
        return Path(self.public_path).read_text(encoding="utf-8").strip()

    def private_key(self) -> str:
        return Path(self.private_path).read_text(encoding="utf-8")


def keys_dir() -> Path:
    return launcher_home() / "keys"


def _private_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path, 0o700)


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    _private_dir(directory)
    fd = os.open(directory / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def generate_keypair(private_path: str | os.PathLike[str], comment: str = "launcher") -> KeyPair:
    """Write a new ed25519 key pair (OpenSSH format) atomically; private 0600. Overwrites."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    priv = Path(private_path)
    pub = Path(f"{priv}.pub")
    _private_dir(priv.parent)
    tmp = priv.with_name(f".{priv.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(private)
    tmp_pub = pub.with_name(f".{pub.name}.{os.getpid()}.tmp")
    tmp_pub.write_bytes(public + f" {comment}\n".encode())
    os.chmod(tmp_pub, 0o600)  # not secret, but nothing under LAUNCHER_HOME is shared
    # public first: a private key visible on disk always has its public half
    os.replace(tmp_pub, pub)
    os.replace(tmp, priv)
    return KeyPair(str(priv), str(pub))


def ensure_user_key() -> KeyPair:
    """The user's launcher key pair, generated on first use. Safe to call concurrently."""
    directory = keys_dir()
    pair = KeyPair(str(directory / "id_ed25519"), str(directory / "id_ed25519.pub"))
    if os.path.exists(pair.private_path) and os.path.exists(pair.public_path):
        return pair
    with _locked(directory):
        if not (os.path.exists(pair.private_path) and os.path.exists(pair.public_path)):
            generate_keypair(pair.private_path, comment="launcher-user")
    return pair


def _cluster_dir(cluster_name: str) -> Path:
    if not _SAFE_NAME.match(cluster_name):
        raise LauncherError(
            f"Invalid cluster name {cluster_name!r}: use letters, digits, '.', '_' and '-'."
        )
    return keys_dir() / "clusters" / cluster_name


def cluster_key_comment(cluster_name: str) -> str:
    """The comment that marks a cluster's key in authorized_keys files."""
    return f"launcher-cluster:{cluster_name}"


def ensure_cluster_key(cluster_name: str) -> KeyPair:
    """The cluster-internal key pair for head->worker SSH, generated once per cluster."""
    directory = _cluster_dir(cluster_name)
    pair = KeyPair(str(directory / "id_ed25519"), str(directory / "id_ed25519.pub"))
    if os.path.exists(pair.private_path) and os.path.exists(pair.public_path):
        return pair
    _private_dir(keys_dir())
    with _locked(keys_dir()):
        if not (os.path.exists(pair.private_path) and os.path.exists(pair.public_path)):
            generate_keypair(pair.private_path, comment=cluster_key_comment(cluster_name))
    return pair


def remove_cluster_key(cluster_name: str) -> None:
    """Delete a cluster's internal key pair on this machine. Idempotent."""
    shutil.rmtree(_cluster_dir(cluster_name), ignore_errors=True)


# Where a cluster's internal key lives on its head node (relative to the node's home).
def head_cluster_dir(cluster_name: str) -> str:
    """`~/.launcher/clusters/<cluster>` on the head node: the internal key and known_hosts."""
    _cluster_dir(cluster_name)  # validates the name
    return f"~/.launcher/clusters/{cluster_name}"


def head_internal_key_path(cluster_name: str) -> str:
    """Path (on the head node) of the private key the head uses to reach the workers."""
    return f"{head_cluster_dir(cluster_name)}/id_ed25519"


def head_known_hosts_path(cluster_name: str) -> str:
    """Path (on the head node) of a known_hosts file pinning every node's host key."""
    return f"{head_cluster_dir(cluster_name)}/known_hosts"
