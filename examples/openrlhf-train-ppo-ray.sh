# OpenRLHF launch script (the shape of examples/scripts/train_reinforce_llama_ray.sh):
# `replay --config` reads the argument list (or an --args-file it names).
#   lrdoctor replay --config examples/openrlhf-train-ppo-ray.sh
# Expected: no step-accounting findings; dynamic batching replays OpenRLHF's first-fit
# count and Karmarkar-Karp partitions.
python3 -m openrlhf.cli.train_ppo_ray \
   --ref.num_nodes 1 \
   --ref.num_gpus_per_node 8 \
   --actor.num_nodes 1 \
   --actor.num_gpus_per_node 8 \
   --rollout.vllm_num_engines 4 \
   --actor.model_name_or_path OpenRLHF/Llama-3-8b-sft-mixture \
   --rollout.micro_batch_size 16 \
   --rollout.batch_size 128 \
   --rollout.n_samples_per_prompt 8 \
   --train.micro_batch_size 8 \
   --train.batch_size 256 \
   --train.max_epochs 1 \
   --train.num_episodes 1 \
   --train.dynamic_batch_enable \
   --train.max_tokens_per_gpu 16384 \
   --data.max_len 4096 \
   --data.max_samples 12800 \
   --actor.adam.lr 5e-7 \
   --actor.lr_scheduler cosine_with_min_lr \
   --actor.lr_warmup_ratio 0.03 \
   --actor.min_lr_ratio 0.1 \
   --algo.advantage.estimator reinforce
