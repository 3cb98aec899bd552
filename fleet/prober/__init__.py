"""The proxy health engine (issue 13): `fleet prober`, a process of its own
that sends a real CONNECT through every Running proxy every
`--probe-interval` and hands verdicts to the controller on transitions.

Modules: `target` (the probe target and the readings of answers, pure),
`probe` (one probe, asyncio I/O), `verdicts` (outcomes in a row → a
verdict, pure), `share` (endpoints, which replica probes which Proxy and at
what phase, pure), `series` (the prober's /metrics), `runtime` (the
scheduler, membership and the process).
"""
