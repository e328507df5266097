"""The `vast` cloud (Vast.ai marketplace, REST API v0). See docs/vast.md."""
