# The platform's image: web server and workers (docker-compose.yml). CPU by default; the GPU
# worker's image is built with EXTRA_REQUIREMENTS=requirements-gpu.txt (vLLM and the CUDA torch
# it brings, instead of the CPU torch pin).
FROM python:3.11-slim

ARG EXTRA_REQUIREMENTS=""
ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    CHECKPOINT_ROOT=/data/checkpoints \
    TRAINER_BUILTIN_MODEL_DIR=/data/models/tiny

WORKDIR /app
COPY requirements.txt requirements-gpu.txt ./
COPY scripts/package_clashes.py scripts/
RUN if [ -n "$EXTRA_REQUIREMENTS" ]; then \
        grep -v '^torch==' requirements.txt > /tmp/requirements-base.txt \
        && pip install -r /tmp/requirements-base.txt \
        && pip install $(grep -v -e '^#' -e '^-r' -e '^$' "$EXTRA_REQUIREMENTS") \
        && python scripts/package_clashes.py; \
    else \
        pip install -r requirements.txt; \
    fi

COPY . .
RUN useradd --create-home --uid 1000 rada \
    && mkdir -p /data/checkpoints /data/models /app/var/staticfiles \
    && chown -R rada /data /app/var
USER rada

# gunicorn on the container's network only: docker-compose.yml publishes nginx (the `proxy`
# service) and never this port, since gunicorn's threads read requests as they arrive and slow
# clients would hold them.
EXPOSE 8000
CMD ["gunicorn", "webapp.wsgi", "--pythonpath", "/app,/app/platform", "--bind", "0.0.0.0:8000", "--workers", "3", "--worker-class", "gthread", "--threads", "4", "--timeout", "120"]
