# syntax=docker/dockerfile:1
# One image for every fleet process; the role is the command:
#   fleet worker -p NAME | fleet controller | fleet beat | fleet flower | fleet probe ...
# Runs as uid 10001 with a read-only root filesystem (only /tmp is written),
# as deploy/ and docker-compose.yml run it.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- build: compile libvirt-python against libvirt-dev, install into a venv ---
FROM ${PYTHON_IMAGE} AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev pkg-config libvirt-dev \
 && rm -rf /var/lib/apt/lists/*
RUN python -m venv /opt/fleet
ENV PATH=/opt/fleet/bin:$PATH PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md constraints.txt ./
COPY fleet ./fleet
COPY providers ./providers
COPY tasks ./tasks
COPY beat ./beat
RUN pip install -c constraints.txt '.[kvm,gcp,aws,hetzner,flower,api]' \
 && python -m compileall -q /opt/fleet

# --- run: the venv, libvirt's client library and Squid, nothing to build with ---
# Squid is the `local` provider's proxy (docs/local-provider.md): the binary
# alone (no helper: no auth, pinger off). As uid 10001 it runs as that user and
# writes only its instance directory under the state dir (in /tmp: HOME) and
# its shared memory in /dev/shm, so a read-only root suits it.
# /etc/fleet/tokens: the mount point of compose's `tokens` volume, owned by
# 10001 so a new volume (a copy of it) is writable by `fleet token init`.
FROM ${PYTHON_IMAGE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends libvirt0 squid \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 fleet \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin fleet \
 && install -d -o 10001 -g 10001 -m 0700 /etc/fleet/tokens
COPY --from=build /opt/fleet /opt/fleet
# HOME=/tmp: the only writable place. No .pyc writes on a read-only root.
# WORKDIR is read-only on purpose: `python -m celery` puts the working
# directory on sys.path, and it must not be a writable one.
ENV PATH=/opt/fleet/bin:$PATH \
    HOME=/tmp \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    FLEET_PROVIDERS_CONFIG=/etc/fleet/config/providers.yaml
WORKDIR /opt/fleet
USER 10001:10001
# controller /metrics, Flower, worker /metrics, prober /metrics, lease API
EXPOSE 8080 5555 9090 8081 8090 8888 8083
CMD ["fleet", "--help"]
