#!/bin/bash
# NeMo-RL launch (the shape of tests/test_suites/llm/*.sh, run from the repository
# root): the recipe inherits examples/configs/grpo_math_1B.yaml through `defaults:`.
#   lrdoctor replay --config examples/nemo-rl/run_grpo_math_seqpack.sh
# 32 prompts x 16 generations = 512 samples per GRPO step in 4 global batches of 128;
# the scheduler steps once per GRPO step (LinearLR warmup over 13 steps).
EXP_NAME=grpo-qwen2.5-7b-instruct-4n8g-fsdp2tp4-seqpack
NUM_NODES=4

uv run examples/run_grpo_math.py \
    --config examples/configs/recipes/llm/$EXP_NAME.yaml \
    cluster.num_nodes=$NUM_NODES \
    logger.wandb_enabled=True \
    logger.wandb.project=nemo-rl \
    logger.wandb.name=$EXP_NAME \
    checkpointing.enabled=True \
    $@
