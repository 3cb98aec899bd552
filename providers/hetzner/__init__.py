"""hetzner provider: each proxy is a Hetzner Cloud server with a firewall of its own.

Built on `hcloud` (the `hetzner` extra). See docs/hetzner-provider.md.
"""
