# GPU image for step 1 of the pipeline: DDP pretraining of GPT-2 / BERT with Chakra trace capture.
#
#   docker build -t chakra-profile .
#   docker run --gpus all --ipc=host -v "$PWD/outputs:/workspace/outputs" chakra-profile \
#       chakra-profile --model gpt2 --nproc 4 --convert
#
# --ipc=host gives NCCL the shared memory it needs between ranks; the traces, the .et files and
# the summary land in ./outputs on the host. The base image's torch must equal the profiler
# extra's pin (torch==2.13.0) so that pip keeps the image's CUDA build instead of replacing it.
ARG BASE_IMAGE=pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime
FROM ${BASE_IMAGE}

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /opt/chakra-convert-fast
COPY . .
RUN pip install ".[profiler]" && chakra-profile --help > /dev/null

WORKDIR /workspace
CMD ["chakra-profile", "--help"]
