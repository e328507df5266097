"""The `runpod` cloud: pods through RunPod's GraphQL API (`requests`, imported lazily).

Modules: credentials (API key), api (GraphQL client, retries), errors (messages -> typed
errors), instance_types (catalog names -> gpuTypeId, cloud type), records (what was
asked for before it exists), cloud (RunPodCloud).
"""
