"""The `lambda` cloud (Lambda Cloud API v1 over REST). See docs/lambda.md."""
