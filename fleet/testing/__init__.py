"""Harnesses for fleet's tests and benchmarks, as kopf ships `kopf.testing`
and Celery `celery.contrib.testing`: real servers and fakes on loopback
(redis-server, Redis Sentinel, fleet's own processes, the lease API, an
HTTP-level fake of the Kubernetes API and a real kube-apiserver, fake cloud
APIs, the KVM lab) that tests/ and benchmarks/ both import. Never imported by
a runtime module (pyproject's import-linter contracts); `kubeserver` and
`crdschema` read deploy/crd from the checkout.
"""
