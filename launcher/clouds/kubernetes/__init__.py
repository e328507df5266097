"""The `kubernetes` cloud: gangs of pods on the user's own clusters (docs/kubernetes.md).
The `kubernetes` SDK is imported only inside this package, lazily."""
