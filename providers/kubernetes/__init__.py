"""kubernetes provider: Squid pods in a cluster (local dev, CI, quickstart)."""
