"""Who may see and act on what: a user their own clusters and managed jobs, an admin
all of them. Someone else's resource reads as not found (its existence is not told)."""

from __future__ import annotations

from fastapi import HTTPException

from launcher.api.server_store import User
from launcher.errors import ClusterNotFoundError
from launcher.jobs.store import ManagedJobNotFoundError
from launcher.server.store_pool import server_store


def want_all(user: User, all_users: bool) -> bool:
    """`--all-users` is for admins; anyone else asking is refused (403)."""
    if all_users and not user.is_admin:
        raise HTTPException(403, f"--all-users needs the admin role; {user.name!r} is a user.")
    return all_users


def visible_clusters(user: User, all_users: bool = False) -> set[str] | None:
    """Names `user` sees; None = every cluster (an admin with all_users)."""
    if want_all(user, all_users):
        return None
    with server_store() as store:
        return {n for n, who in store.cluster_owners().items() if who == user.name}


def require_cluster(user: User, name: str) -> None:
    """Raises ClusterNotFoundError, worded as `StateDB.require_cluster` words it but
    naming only the clusters `user` may see, unless `user` may act on `name`."""
    if user.is_admin:
        return
    with server_store() as store:
        owners = store.cluster_owners()
    if owners.get(name) != user.name:
        known = sorted(n for n, who in owners.items() if who == user.name)
        hint = f" Known clusters: {', '.join(known)}." if known else " There are no clusters."
        raise ClusterNotFoundError(f"Cluster {name!r} does not exist.{hint}")


def visible_jobs(user: User, all_users: bool = False) -> set[int] | None:
    if want_all(user, all_users):
        return None
    with server_store() as store:
        return {j for j, who in store.job_owners().items() if who == user.name}


def require_job(user: User, job_id: int) -> None:
    if user.is_admin:
        return
    with server_store() as store:
        if store.job_owners().get(job_id) != user.name:
            raise ManagedJobNotFoundError(job_id)
