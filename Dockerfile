# usher container image: slim, non-root, pinned base.
#   docker build -t usher:0.1.0 .                # from the public python image
#   make image                                   # here, without a registry: e2e/image/build.sh passes
#                                                # Debian bookworm root filesystems made by debootstrap
# PYTHON_IMAGE builds the virtualenv (needs python3 with venv and pip); RUNTIME_IMAGE runs it and
# only needs the same python3 at the same path (by default the same image).
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm
ARG RUNTIME_IMAGE=${PYTHON_IMAGE}

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
# Dependencies first, from pyproject.toml alone (an empty package stands in for usher's code), so
# that a change to the code reinstalls only usher itself.
COPY pyproject.toml ./
RUN python3 -m venv /opt/usher \
 && mkdir -p operator/usher && touch README.md operator/usher/__init__.py \
 && /opt/usher/bin/pip install --no-cache-dir . \
 && /opt/usher/bin/pip uninstall --yes --quiet usher \
 && rm -rf operator README.md build
COPY README.md ./
COPY operator ./operator
# pip stays out of the runtime: nothing installs anything there.
RUN /opt/usher/bin/pip install --no-cache-dir --no-deps . \
 && /opt/usher/bin/pip uninstall --yes --quiet pip \
 && find /opt/usher -name 'setuptools*' -path '*site-packages*' -prune -exec rm -rf {} +

FROM ${RUNTIME_IMAGE}
LABEL org.opencontainers.image.title="usher" \
      org.opencontainers.image.description="A secondary Kubernetes scheduler in Python"
COPY --from=build /opt/usher /opt/usher
ENV PATH=/opt/usher/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# 65532: the conventional "nonroot" uid; no shell login, no home writes needed. It has a passwd
# entry because kopf asks getpass.getuser() for its peering identity, which fails for a uid the
# image does not know (kubelets, unlike podman, add none).
RUN echo 'nonroot:x:65532:65532:nonroot:/nonexistent:/usr/sbin/nologin' >> /etc/passwd \
 && echo 'nonroot:x:65532:' >> /etc/group
USER 65532:65532
EXPOSE 10251
ENTRYPOINT ["usher"]
CMD ["run", "--metrics-bind-address", "0.0.0.0:10251"]
