# The two commands a newcomer needs on a fresh Debian 12 machine (as root):
#   make demo   installs, starts a local Redis and the whole stack, shows results
#   make test   installs, runs lint, import contracts and the whole suite
# The integration tests start (and stop) their own servers: redis-server,
# celery workers, beat, sshd/libvirtd — on loopback, in temporary directories.

PY ?= python3
PIP_EXTRAS ?= test,kvm,gcp
APT_PACKAGES := $(shell grep -v '^\#' ci/apt-packages.txt)

.PHONY: deps test unit lint demo bench

deps:
	@if ! dpkg -s $(APT_PACKAGES) >/dev/null 2>&1; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(APT_PACKAGES); \
	fi
	$(PY) -m pip install -q --disable-pip-version-check -e '.[$(PIP_EXTRAS)]'

lint:
	$(PY) -m ruff check .
	lint-imports

test: deps lint
	$(PY) -m pytest -q -p no:cacheprovider

unit:
	$(PY) -m pytest -q -m 'not integration'

demo: deps
	$(PY) deploy/examples/demo.py

bench: deps
	$(PY) benchmarks/round.py
