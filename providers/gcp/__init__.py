"""gcp provider: each proxy is a Compute Engine VM with an ephemeral external IP.

Built on `google-cloud-compute` (REST transport). See docs/gcp-provider.md.
"""
