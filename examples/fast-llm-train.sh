#!/bin/bash
# Fast-LLM launch (the shape of its docs' quick start: torchrun ... fast-llm train gpt
# --config FILE); the YAML is the current schema.
#   lrdoctor replay --config examples/fast-llm-train.sh
torchrun --standalone --nnodes 1 --nproc_per_node=8 --no_python \
    fast-llm train gpt --config examples/fast-llm-current.yaml
