"""Crawler-side integrations. They run in the crawler's process and speak to fleet only over its HTTP
API (docs/leases.md): nothing here imports the rest of fleet (an import contract in pyproject.toml)."""
