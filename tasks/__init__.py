"""Celery task definitions: thin wrappers around `fleet` and `providers`."""
