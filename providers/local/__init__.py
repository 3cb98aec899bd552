"""The local provider: one squid process per instance on the worker's host (docs/local-provider.md)."""
