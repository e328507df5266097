"""Import cost of the Azure path (fresh interpreter each, median of 5, wall seconds).

- `bare`: `python -c pass`
- `azure cloud, no SDK`: `import launcher.clouds.azure.cloud` (what `launcher check`
  without Azure credentials pays: the SDKs are not imported)
- `azure SDKs`: that plus azure.identity, azure.mgmt.compute/network/resource (what the
  first Azure call pays)
- `clients built`: plus the three management clients constructed (no network)

Run: python benchmarks/azure_import.py
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

CASES = {
    "bare": "pass",
    "azure cloud, no SDK": "import launcher.clouds.azure.cloud",
    "azure SDKs": "import launcher.clouds.azure.cloud, azure.identity, azure.mgmt.compute, "
                  "azure.mgmt.network, azure.mgmt.resource.resources",
    "clients built": (
        "from launcher.clouds.azure.session import Clients\n"
        "from launcher.config.azure import AzureSettings\n"
        "c = Clients(AzureSettings(subscription_id='s'), credential=object())\n"
        "c.compute(); c.network(); c.resource()"),
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
