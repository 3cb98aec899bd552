"""Backends that run egress proxies, behind one contract (`providers.base`)."""
