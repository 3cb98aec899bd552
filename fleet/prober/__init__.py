"""The proxy health engine (issue 13): `fleet prober`, a process of its own
that sends a real CONNECT through every Running proxy every
`--probe-interval` and hands verdicts to the controller on transitions.

Modules: `target` (the probe target and the readings of answers, pure),
`probe` (one probe, asyncio I/O), `decide` (outcomes in a row → a
verdict, pure), `share` (endpoints, which replica probes which Proxy and at
what phase, pure), `metrics` (the prober's /metrics), `process` (the
scheduler, membership and the process).
"""
