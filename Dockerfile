# GPU image for step 1 of the pipeline: DDP pretraining of GPT-2 / BERT with Chakra trace capture.
#
#   docker build -t chakra-profile .
#   docker run --gpus all --ipc=host -v "$PWD/outputs:/workspace/outputs" chakra-profile \
#       chakra-profile --model gpt2 --nproc 4 --convert
#
# --ipc=host gives NCCL the shared memory it needs between ranks; the traces, the .et files and
# the summary land in ./outputs on the host. The base image's torch must equal the profiler
# extra's pin (torch==2.13.0) so that pip keeps the image's CUDA build instead of replacing it.
#
# A second image simulates the .et files (no GPU, no torch): ASTRA-sim built from source at the
# pinned commits by astra-sim/build.sh (docs/getting-astra-sim.md), and this package:
#
#   docker build --target simulate -t chakra-simulate .
#   docker run -v "$PWD/outputs:/workspace/outputs" chakra-simulate \
#       chakra-convert-fast simulate outputs/gpt2_small_np4
#
# (BuildKit, Docker's default builder, builds only the stages the target needs.)
ARG BASE_IMAGE=pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime

# -- ASTRA-sim, built at the pinned commits with the feeder patch -----------------------------------
FROM debian:bookworm AS astra-sim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates git cmake make g++ \
        protobuf-compiler libprotobuf-dev && rm -rf /var/lib/apt/lists/*
COPY astra-sim/ /opt/astra-sim-build/
RUN /opt/astra-sim-build/build.sh /opt/astra-sim && rm -rf /opt/astra-sim/src

# -- simulate: the converter and ASTRA-sim (docker build --target simulate) -------------------------
FROM debian:bookworm-slim AS simulate
RUN apt-get update && apt-get install -y --no-install-recommends libprotobuf32 python3 python3-venv \
        && rm -rf /var/lib/apt/lists/*
COPY --from=astra-sim /opt/astra-sim/bin /opt/astra-sim/bin
ENV ASTRA_SIM_HOME=/opt/astra-sim \
    PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1
WORKDIR /opt/chakra-convert-fast
COPY . .
RUN python3 -m venv /opt/venv && pip install ".[plot]" && chakra-convert-fast simulate --help > /dev/null
WORKDIR /workspace
CMD ["chakra-convert-fast", "simulate", "--help"]

# -- the profiler (the default target) --------------------------------------------------------------
FROM ${BASE_IMAGE}

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /opt/chakra-convert-fast
COPY . .
RUN pip install ".[profiler]" && chakra-profile --help > /dev/null

WORKDIR /workspace
CMD ["chakra-profile", "--help"]
