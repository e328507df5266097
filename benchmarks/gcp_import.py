"""Import cost of the GCP path (fresh interpreter each, median of 5, wall seconds).

- `bare`: `python -c pass`
- `gcp cloud, no SDK`: `import launcher.clouds.gcp.cloud` (what `launcher check` and a
  dry run without GCP credentials pay: google-cloud-compute is not imported)
- `compute_v1`: that plus `google.cloud.compute_v1` (what the first GCP call pays)
- `clients built`: plus the instances and zone-operations clients constructed with
  anonymous credentials (no network)

Run: python benchmarks/gcp_import.py
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

CASES = {
    "bare": "pass",
    "gcp cloud, no SDK": "import launcher.clouds.gcp.cloud",
    "compute_v1": "import launcher.clouds.gcp.cloud\nfrom google.cloud import compute_v1",
    "clients built": (
        "from google.auth.credentials import AnonymousCredentials\n"
        "from launcher.clouds.gcp.session import Clients\n"
        "from launcher.config import GCPSettings\n"
        "c = Clients(GCPSettings(project='p'), credentials=AnonymousCredentials(),\n"
        "            endpoint='http://127.0.0.1:9')\n"
        "c.instances(); c.zone_operations()"),
}


def wall(code: str) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return time.perf_counter() - t


def main() -> None:
    for name, code in CASES.items():
        runs = [wall(code) for _ in range(5)]
        print(f"{name:22s} {statistics.median(runs) * 1000:7.0f} ms (median of 5)")


if __name__ == "__main__":
    main()
