"""The Proxy lifecycle: a forward proxy per `Proxy` object, created, polled,
replaced and deleted on its provider through provider-call tasks, its status
written by the controller (docs/architecture.md, "Proxies")."""
