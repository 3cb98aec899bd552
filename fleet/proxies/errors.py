"""The errors an `Objects` store raises to the Proxy reconciler, apart from it so
that the stores (and `fleet get px`, which reads the standalone one) need not
import the reconciler and the Celery client it brings."""

from __future__ import annotations


class Conflict(Exception):
    """The object changed under a write (resourceVersion); read it again."""


class CloudInitUnavailable(Exception):
    """The Proxy's cloud-init cannot be read (a Secret or key missing); the message says which, never the text."""
