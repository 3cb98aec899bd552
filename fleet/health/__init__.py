"""The provider-health feature: each provider's checker runs on its worker
(`checking`), the result travels to the controller (`dispatch`, `messages`,
`results`), which stores it, logs transitions and writes ProviderHealth
(`recording`, by the pure decisions in `decide`), and sweeps for overdue
providers. Bounds on what it accepts are in `limits`; its /metrics
collector is `metrics`.

Imports infrastructure (`fleet.store`, `fleet.kube`, `fleet.serving`, ...) and
`providers`; never `fleet.cli` nor another feature package.
"""
