"""Contexts and API clients of the `kubernetes` cloud (the official `kubernetes` SDK,
imported here lazily), and the mapping of its errors onto CloudErrors.

Contexts come from the kubeconfig the SDK reads (`$KUBECONFIG`, else ~/.kube/config)
or, with none and `KUBERNETES_SERVICE_HOST` set, the in-cluster service account
(context name `in-cluster`). The contexts used are config.yaml's
`kubernetes.allowed_contexts` (in that order), else the kubeconfig's current context.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any

from launcher.clouds.base import AuthError, CloudError, InvalidRequestError
from launcher.config.kubernetes import ContextSettings, KubernetesSettings

CLOUD = "kubernetes"
IN_CLUSTER = "in-cluster"
# (connect, read) seconds for one API call; watches set their own read timeout
TIMEOUT = (5.0, 30.0)
_lock = threading.Lock()
_clients: dict[tuple[str, str, float], Any] = {}


def settings() -> KubernetesSettings:
    from launcher.config.settings import load_config

    return load_config().kubernetes


def kubeconfig_path() -> str:
    return os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or os.path.expanduser("~/.kube/config")


@dataclass(frozen=True)
class KubeContext:
    name: str
    namespace: str  # the pods' namespace (config.yaml's, else the kubeconfig's, else default)
    settings: ContextSettings


def kubeconfig_contexts() -> tuple[dict[str, dict[str, Any]], str | None]:
    """{context name: its kubeconfig `context` mapping}, current context name. In a pod
    with no kubeconfig: {"in-cluster": {}}, "in-cluster". ({}, None) when there is
    neither. Raises AuthError for an unreadable kubeconfig."""
    from kubernetes import config

    if not os.path.exists(kubeconfig_path()):
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            return {IN_CLUSTER: {}}, IN_CLUSTER
        return {}, None
    try:
        ctxs, current = config.list_kube_config_contexts(config_file=kubeconfig_path())
    except config.ConfigException as exc:
        raise AuthError(f"kubeconfig {kubeconfig_path()}: {exc}", cloud=CLOUD) from None
    out = {c["name"]: dict(c.get("context") or {}) for c in ctxs or []}
    return out, (current or {}).get("name")


def contexts() -> list[KubeContext]:
    """The contexts launches may use, in order (see the module docstring). Raises
    AuthError for an unreadable kubeconfig or an allowed context it lacks."""
    conf = settings()
    known, current = kubeconfig_contexts()
    names = list(conf.allowed_contexts) or ([current] if current else [])
    missing = [n for n in names if n not in known]
    if missing:
        raise AuthError(f"kubernetes.allowed_contexts names {', '.join(missing)}, which "
                        f"{kubeconfig_path()} lacks (it has: {', '.join(sorted(known)) or 'none'}).",
                        cloud=CLOUD)
    out = []
    for n in names:
        s = conf.for_context(n)
        out.append(KubeContext(n, s.namespace or known[n].get("namespace") or "default", s))
    return out


def context(name: str) -> KubeContext:
    for c in contexts():
        if c.name == name:
            return c
    raise InvalidRequestError(f"Kubernetes context '{name}' is not one launcher may use "
                              "(kubernetes.allowed_contexts, or the kubeconfig's current "
                              "context).", cloud=CLOUD, region=name)


def api_client(name: str) -> Any:
    """The SDK's ApiClient for context `name` (one per kubeconfig version and process)."""
    from kubernetes import client, config

    path = kubeconfig_path()
    mtime = os.path.getmtime(path) if os.path.exists(path) else 0.0
    key = (name, path, mtime)
    with _lock:
        if key in _clients:
            return _clients[key]
        conf = client.Configuration()
        if name == IN_CLUSTER:
            config.load_incluster_config(client_configuration=conf)
        else:
            try:
                config.load_kube_config(config_file=path, context=name, client_configuration=conf,
                                        persist_config=False)
            except config.ConfigException as exc:
                raise AuthError(f"context '{name}': {exc}", cloud=CLOUD, region=name) from None
        # one retry, not urllib3's three: an API server that does not answer costs
        # 2 x the connect timeout, not 4 x (planning asks every context)
        conf.retries = 1
        cl = client.ApiClient(conf)
        _clients[key] = cl
        return cl


def core(name: str) -> Any:
    from kubernetes import client

    return client.CoreV1Api(api_client(name))


def can_create_pods(ctx: KubeContext) -> tuple[bool, str]:
    """Whether this context's credentials may create pods in its namespace (a
    SelfSubjectAccessReview). Never raises."""
    from kubernetes import client

    try:
        authz = client.AuthorizationV1Api(api_client(ctx.name))
        review = authz.create_self_subject_access_review(
            {"spec": {"resourceAttributes": {"namespace": ctx.namespace, "verb": "create",
                                             "resource": "pods"}}}, _request_timeout=TIMEOUT)
        allowed = bool(review.status.allowed)
        why = "" if allowed else (review.status.reason or "denied by RBAC")
        return allowed, why
    except Exception as exc:  # unreachable, bad credentials: say which
        return False, str(as_cloud_error(exc, ctx.name))


def as_cloud_error(exc: BaseException, region: str, what: str = "") -> CloudError:
    """The CloudError for an SDK or transport error (401/403: AuthError; 400/422:
    InvalidRequestError; others, 5xx, 429 and no answer: CloudError)."""
    import json

    from kubernetes.client import ApiException

    prefix = f"Kubernetes context '{region}'" + (f" ({what})" if what else "")
    if isinstance(exc, ApiException):
        msg = exc.reason or ""
        try:
            body = json.loads(exc.body or "{}")
            msg = body.get("message") or msg
        except (ValueError, TypeError):
            pass
        text = f"{prefix}: HTTP {exc.status}: {msg}"
        if exc.status in (401, 403):
            return AuthError(text, cloud=CLOUD, region=region)
        if exc.status in (400, 422):
            return InvalidRequestError(text, cloud=CLOUD, region=region)
        return CloudError(text, cloud=CLOUD, region=region)
    if isinstance(exc, CloudError):
        return exc
    return CloudError(f"{prefix}: the API server does not answer: {type(exc).__name__}: {exc}",
                      cloud=CLOUD, region=region)


def status_code(exc: BaseException) -> int | None:
    from kubernetes.client import ApiException

    return exc.status if isinstance(exc, ApiException) else None
