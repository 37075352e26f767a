# usher container image: slim, non-root, pinned base.
# Build: docker build -t usher:0.1.0 .
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
RUN python -m venv /opt/usher \
 && /opt/usher/bin/pip install --no-cache-dir --upgrade pip \
 && /opt/usher/bin/pip install --no-cache-dir .

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="usher" \
      org.opencontainers.image.description="A secondary Kubernetes scheduler in Python"
COPY --from=build /opt/usher /opt/usher
ENV PATH=/opt/usher/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# 65532: the conventional "nonroot" uid; no shell login, no home writes needed.
USER 65532:65532
EXPOSE 10251
ENTRYPOINT ["usher"]
CMD ["run", "--metrics-bind-address", "0.0.0.0:10251"]
