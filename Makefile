# The two commands a newcomer needs on a fresh Debian 12 machine (as root):
#   make demo   installs, starts a local Redis and the whole stack, shows results
#   make test   installs, runs lint (ruff, import contracts, mypy), builds the docs site and runs the whole suite
# Everything Python runs from a project virtual environment (.venv/), because
# Debian's python3 refuses `pip install` outside one (PEP 668). Afterwards:
#   . .venv/bin/activate     (or: export PATH="$PWD/.venv/bin:$PATH")  → `fleet` on the PATH
# PY=/other/venv/bin/python uses an existing environment instead; its bin/ holds the tools.
# The integration tests start (and stop) their own servers: redis-server,
# celery workers, beat, sshd/libvirtd — on loopback, in temporary directories.
# FLEET_TEST_KUBE_APISERVER=/path/to/kube-apiserver (etcd on PATH) adds the tests on
# a real API server (`pytest -m apiserver`); without it they skip. `make apiserver`
# installs one from ../shared/tools/kube-apiserver into .cache/ when that folder exists.

SYSTEM_PYTHON ?= python3
VENV ?= .venv
PY ?= $(VENV)/bin/python
BIN := $(dir $(PY))
PIP_EXTRAS ?= test,kvm,gcp,aws,hetzner,api,docs
CRAWLER_EXTRAS ?= scrapy,aiohttp,playwright
APT_PACKAGES := $(shell grep -v '^\#' ci/apt-packages.txt)

.PHONY: deps lock apt venv test unit lint docs demo bench apiserver

apt:
	@if ! dpkg -s $(APT_PACKAGES) >/dev/null 2>&1; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(APT_PACKAGES); \
	fi

venv: apt
	@[ -x "$(PY)" ] || $(SYSTEM_PYTHON) -m venv "$(VENV)"
	@[ -x "$(PY)" ] || { echo "make: $(PY) is not an executable Python (set PY= or VENV=)" >&2; exit 2; }

# Installs pin every package to constraints.txt (resolved from pyproject.toml's ranges by `make lock`), so an
# upstream release cannot change what CI tests. `make lock` keeps the pins that still fit and adds what is new;
# `make lock LOCK_FLAGS=--upgrade` takes the newest releases the ranges allow.
# Two distributions from this repository: the server (egress-fleet, the import package `fleet`) and the crawler's
# package (crawler/: fleet-crawler, `fleet_crawler`), which the tests use against the server.
deps: venv
	$(PY) -m pip install -q --disable-pip-version-check -c constraints.txt -e '.[$(PIP_EXTRAS)]' -e './crawler[$(CRAWLER_EXTRAS)]'

LOCK_FLAGS ?=
lock: venv
	$(PY) -m pip install -q --disable-pip-version-check -c constraints.txt uv
	$(BIN)uv pip compile pyproject.toml crawler/pyproject.toml --all-extras --universal --python-version 3.11 --quiet \
	  --custom-compile-command 'make lock' $(LOCK_FLAGS) -o constraints.txt

lint:
	$(PY) -m ruff check .
	$(BIN)lint-imports
	$(PY) -m mypy

# The documentation site: docs/generate.py's pages must be fresh (a test holds them), and mkdocs builds with
# --strict (a broken link or a page missing from the nav fails) into site/ (ignored by git).
docs: deps
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --quiet --site-dir site

test: deps lint docs
	$(PY) -m pytest -q -p no:cacheprovider

KUBE_INSTALL ?= $(abspath ..)/shared/tools/kube-apiserver/install
apiserver: deps
	@[ -x "$(KUBE_INSTALL)" ] || { echo "make: no $(KUBE_INSTALL); set FLEET_TEST_KUBE_APISERVER to a kube-apiserver" >&2; exit 2; }
	$(KUBE_INSTALL) $(CURDIR)/.cache/kube-apiserver
	FLEET_TEST_KUBE_APISERVER=$(CURDIR)/.cache/kube-apiserver/kube-apiserver $(PY) -m pytest -q -p no:cacheprovider -m apiserver

unit:
	$(PY) -m pytest -q -m 'not integration'

demo: deps
	$(PY) deploy/examples/demo.py

bench: deps
	$(PY) benchmarks/pipeline.py --quick
	$(PY) benchmarks/proxies.py
