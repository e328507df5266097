"""The `nebius` cloud (the `nebius` Python SDK over gRPC). Importing this package
imports no SDK; `cloud.NebiusCloud` loads it on first use."""
