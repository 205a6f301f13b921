# The cmk-deviceplugin image: the `cmk` package (device-plugin daemon, describe, host-config, probe,
# install) in a venv, and the static pinner that `cmk install` copies to the host. Nothing else.
#
# BASE_IMAGE must be a Debian-based image with python3 >= 3.11 and its venv module (CI builds one
# with debootstrap: .ci/build-image). Both stages use it, so the venv's interpreter path matches.
ARG BASE_IMAGE=python:3.11-slim

FROM ${BASE_IMAGE} AS builder
# The release this build is (deviceplugin.__version__): .ci/build-image passes it; the build fails
# when it is missing or is not what the package says, so the tag and labels cannot name another.
ARG VERSION
# musl-gcc links the pinner into a small static executable that runs in any workload image
# (no Python, no libc needed there); gcc is its backend. Only the builder carries a toolchain.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends gcc musl-tools \
 && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/cmk
COPY . /src
# The package build compiles the pinner into pinner/bin/cmk (setup.py's build hook); building it
# again from the source tree is the guard for a build that skipped it. The pinner must run here.
RUN /opt/cmk/bin/pip install --no-cache-dir --disable-pip-version-check -q /src \
 && pinner="$(cd / && /opt/cmk/bin/python -c 'from pinner.build import DEFAULT_OUTPUT; print(DEFAULT_OUTPUT)')" \
 && if [ ! -x "$pinner" ]; then cd /src && /opt/cmk/bin/python -m pinner.build --output "$pinner"; fi \
 && "$pinner" isolate --help >/dev/null \
 && if [ "$(/opt/cmk/bin/cmk --version)" != "cmk ${VERSION}" ]; then \
      echo "build with --build-arg VERSION=$(/opt/cmk/bin/cmk --version | cut -d' ' -f2) (got '${VERSION}')" >&2; exit 1; fi \
 && /opt/cmk/bin/pip uninstall -q -y pip setuptools \
 && /opt/cmk/bin/python -m compileall -q /opt/cmk/lib >/dev/null

FROM ${BASE_IMAGE}
ARG VERSION
ARG REVISION=unknown
LABEL org.opencontainers.image.title="cmk-deviceplugin" \
      org.opencontainers.image.description="CPU pools as kubelet device plugins, with a CMK-compatible pinner" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=builder /opt/cmk /opt/cmk
# Read-only root filesystem at run time: bytecode is compiled at build, never written later.
ENV PATH=/opt/cmk/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# Non-root by default (describe, host-config and isolate need nothing more). The DaemonSet runs the
# daemon and `cmk install` as uid 0 with every capability dropped: the kubelet's device-plugin
# directory, the CDI directory and the install directory on the host are root-owned, and uid 0
# writes them through the owner's permission bits without CAP_DAC_OVERRIDE.
USER 65532:65532
ENTRYPOINT ["cmk"]
CMD ["--help"]
