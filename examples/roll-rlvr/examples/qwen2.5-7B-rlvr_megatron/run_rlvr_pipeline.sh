#!/bin/bash
# ROLL's launch script, as in examples/qwen2.5-7B-rlvr_megatron/run_rlvr_pipeline.sh
# (run from the ROLL repository root; the config folder is this script's folder).
#   lrdoctor replay --config examples/roll-rlvr/examples/qwen2.5-7B-rlvr_megatron/run_rlvr_pipeline.sh
# Sequence packing (megatron, load_balance): each rank's 64-row update is packed into
# ceil(tokens / 8192) micro-batches (17-18 with these lengths), not 64 static ones.
set +x

CONFIG_PATH=$(basename $(dirname $0))
python examples/start_rlvr_pipeline.py --config_path $CONFIG_PATH  --config_name rlvr_config
