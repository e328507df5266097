"""What to suggest when a cloud name is not one launcher knows.

People write a provider's company or product name (`amazon`, `ec2`, `google`,
`microsoft`) where launcher wants its short cloud name (`aws`, `gcp`, `azure`).
`cloud_suggestions` answers with those names first, then the close spellings
(difflib), for the "did you mean" of every unknown-cloud error: a task's `cloud:` /
`infra:`, `launcher gpus --cloud`, `launcher catalog refresh --cloud`. Nothing here
accepts a nickname: a task still has to name the cloud.
"""

from __future__ import annotations

from collections.abc import Collection

__all__ = ["CLOUD_NICKNAMES", "cloud_did_you_mean", "cloud_suggestions"]

# nickname (lower case, '-' for any separator) -> cloud name
CLOUD_NICKNAMES: dict[str, str] = {
    "amazon": "aws", "amazon-web-services": "aws", "ec2": "aws", "amazon-ec2": "aws",
    "google": "gcp", "google-cloud": "gcp", "googlecloud": "gcp", "gce": "gcp",
    "google-compute-engine": "gcp",
    "microsoft": "azure", "microsoft-azure": "azure", "az": "azure",
    "lambdalabs": "lambda", "lambda-labs": "lambda", "lambda-cloud": "lambda",
    "digitalocean": "do", "digital-ocean": "do",
    "oracle": "oci", "oracle-cloud": "oci",
    "k8s": "kubernetes", "kube": "kubernetes",
    "vastai": "vast", "vast-ai": "vast",
    "datacrunch": "verda",
}  # fmt: skip


def _fold(name: str) -> str:
    return "-".join(name.strip().lower().replace("_", " ").replace(".", " ").replace("-", " ").split())


def cloud_suggestions(word: str, known: Collection[str], limit: int = 3) -> list[str]:
    """Clouds of `known` that `word` may mean, best first: its nickname's cloud, then
    close spellings."""
    folded = _fold(word)
    out: list[str] = []
    nick = CLOUD_NICKNAMES.get(folded)
    if nick is not None and nick in known:
        out.append(nick)
    import difflib  # only on the error path

    for hit in difflib.get_close_matches(folded, list(known), n=limit, cutoff=0.6):
        if hit not in out:
            out.append(hit)
    return out[:limit]


def cloud_did_you_mean(word: str, known: Collection[str]) -> str:
    """ " — did you mean 'aws'?" or an empty string when nothing fits."""
    hits = cloud_suggestions(word, known)
    if not hits:
        return ""
    return " — did you mean " + " or ".join(f"'{h}'" for h in hits) + "?"
