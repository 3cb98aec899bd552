"""fleet: an egress-proxy fleet manager on Celery (see docs/architecture.md)."""

__version__ = "0.1.0"
