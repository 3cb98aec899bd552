"""The upstream provider: proxies fleet did not create (a bought list, or a vendor's one gateway) (docs/upstream-provider.md)."""
