# One image for every temper process: the HTTP API, temper workers, and the Dask scheduler and
# workers that build and measure candidates (they import temper's code to run its tasks).
FROM python:3.11-slim

# Compiled models are linked by the C compiler driver, with temper's parallel runtime (a C file it
# compiles) and libm.
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    TEMPER_DATA_DIR=/data

WORKDIR /app

# Dependencies first, in their own layer: a code change does not reinstall them.
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt

COPY README.md ./
COPY compiler ./compiler
COPY tuner ./tuner
COPY storage ./storage
COPY service ./service
RUN pip install --no-deps . \
    && useradd --create-home --uid 10001 temper \
    && mkdir -p /data \
    && chown temper:temper /data

USER temper
VOLUME ["/data"]
EXPOSE 8000

HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=5 \
    CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4)"

CMD ["temper", "serve", "--host", "0.0.0.0", "--port", "8000"]
