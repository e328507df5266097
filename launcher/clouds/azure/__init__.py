"""The `azure` cloud (Azure Resource Manager through azure-mgmt-*): see cloud.py.

Importing this package imports no Azure SDK; the SDKs are imported inside the functions
that call Azure, and only when Azure is used (docs/azure.md)."""
