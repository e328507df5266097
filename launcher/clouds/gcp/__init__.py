"""Google Compute Engine: the provisioner, its error mapping, firewall/image/placement
helpers, one small module each (docs/gcp.md).

google-cloud-compute is imported only inside this package, and only when GCP is used
(importing `google.cloud.compute_v1` costs ~1-2 s): `launcher --help`, `launcher gpus`,
dry runs and `launcher check` without GCP credentials never import it.
"""
