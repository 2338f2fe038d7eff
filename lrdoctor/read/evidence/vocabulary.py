"""Which saved names mean progress, a horizon, a planned end, a warmup, an LR or a factor.

Read by content: the *key* a number is saved under and the shape of the object around
it (an optimizer's ``param_groups``, a scheduler's ``last_epoch``), never the file's
name. One table per role, so a trainer that saves its counters under a new name is one
line here. Names are matched lower-cased, with leading underscores and dashes removed
(``_step_count``, ``max-steps`` and ``MaxSteps`` are not told apart from their plain
forms except by case).
"""

from __future__ import annotations

from lrdoctor.core.evidence import Quantity as Q
from lrdoctor.core.evidence import Role as R

#: Counters: how far the run is (outside a config).
PROGRESS: dict[str, Q] = {
    **dict.fromkeys(("optimizer_step", "optimizer_steps", "num_updates", "updates", "update",
                     "num_optimizer_steps", "opt_step", "optim_step", "updates_done",
                     "num_updates_done", "optimizer_steps_done", "step_count"),
                    Q.OPTIMIZER_STEPS),
    **dict.fromkeys(("global_step", "global_steps", "globalstep", "iteration", "iterations",
                     "iter", "iters", "step", "steps", "current_step", "train_step",
                     "trainer_step", "steps_run", "completed_steps", "curr_step", "cur_step",
                     "total_steps_done", "global_iteration", "it", "iter_num"), Q.ITERATIONS),
    **dict.fromkeys(("consumed_samples", "consumed_train_samples", "global_samples",
                     "samples", "samples_seen", "num_samples_seen", "examples_seen",
                     "seen_samples", "num_examples_seen", "sample_count"), Q.SAMPLES),
    **dict.fromkeys(("tokens", "consumed_tokens", "ntokens_seen", "tokens_seen", "num_tokens",
                     "num_tokens_seen", "total_tokens", "consumed_train_tokens",
                     "token_count"), Q.TOKENS),
    **dict.fromkeys(("epoch", "epochs_run", "current_epoch", "epoch_idx", "cur_epoch",
                     "curr_epoch", "epochs_done", "completed_epochs"), Q.EPOCHS),
    **dict.fromkeys(("batches", "batches_seen", "total_batch_idx", "num_batches_seen",
                     "batch_count"), Q.BATCHES),
    **dict.fromkeys(("micro_step", "micro_steps", "micro_batches", "microbatches",
                     "num_micro_batches_seen", "micro_batches_seen",
                     "micro_step_count"), Q.MICRO_BATCHES),
    **dict.fromkeys(("rollout_step", "rollout_steps", "pipeline_step", "rollouts",
                     "num_rollouts", "episodes", "trajectories", "ppo_step"), Q.ROLLOUTS),
}

#: Where the schedule's decay ends, in the unit of the scheduler's own counter.
HORIZON: dict[str, Q] = dict.fromkeys(
    ("num_training_steps", "lr_decay_steps", "lr_decay_iters", "decay_steps", "t_max",
     "total_iters", "total_num_steps", "decay_iters", "lr_decay_samples", "t_initial",
     "num_decay_steps", "cosine_steps", "cycle_steps", "max_decay_steps",
     "scheduler_total_steps", "lr_total_steps", "num_scheduler_steps",
     "total_training_steps"), Q.SCHEDULER_CALLS)

#: Where training is meant to end (configs, trainer state).
PLANNED_END: dict[str, Q] = {
    **dict.fromkeys(("max_train_steps", "total_steps", "max_steps", "train_steps",
                     "train_iters", "num_steps", "total_updates", "max_updates",
                     "max_iters", "max_iterations", "num_iterations", "total_iters_planned",
                     "training_steps", "num_train_steps", "total_train_steps"), Q.ITERATIONS),
    **dict.fromkeys(("num_train_epochs", "epochs", "num_epochs", "max_epochs",
                     "total_epochs", "n_epochs", "train_epochs"), Q.EPOCHS),
    **dict.fromkeys(("train_samples", "max_samples", "total_samples",
                     "num_train_samples_planned"), Q.SAMPLES),
    **dict.fromkeys(("train_tokens", "max_tokens_to_train", "total_tokens_planned",
                     "token_budget"), Q.TOKENS),
    **dict.fromkeys(("max_rollout_steps", "total_rollouts", "rollout_steps_total",
                     "num_rollout_steps"), Q.ROLLOUTS),
}

#: Where warmup ends.
WARMUP: dict[str, Q] = {
    **dict.fromkeys(("warmup_steps", "num_warmup_steps", "lr_warmup_steps", "lr_warmup_iters",
                     "warmup_iters", "warmup_num_steps", "warmup_t", "warmup",
                     "lr_warmup_samples", "warmup_updates", "n_warmup_steps"),
                    Q.SCHEDULER_CALLS),
    **dict.fromkeys(("warmup_epochs", "lr_warmup_epochs"), Q.EPOCHS),
    **dict.fromkeys(("warmup_ratio", "lr_warmup_fraction", "warmup_fraction",
                     "pct_start", "warmup_proportion", "warmup_steps_proportion"), Q.FRACTION),
}

#: Learning rates.
LR: frozenset[str] = frozenset({
    "lr", "learning_rate", "base_lr", "max_lr", "min_lr", "initial_lr", "last_lr", "peak_lr",
    "lr_min", "eta_min", "end_lr", "final_lr", "init_lr", "start_lr", "warmup_lr_init"})

#: Conversions between the units.
FACTOR: dict[str, Q] = {
    **dict.fromkeys(("gradient_accumulation_steps", "accumulate_grad_batches", "grad_accum",
                     "gradient_accumulation", "accumulation_steps", "grad_accum_steps",
                     "grad_accumulation_steps", "accum_steps", "accum_iter",
                     "num_microbatches", "num_micro_batches", "micro_batches_per_step",
                     "update_freq"), Q.GRAD_ACCUM),
    **dict.fromkeys(("world_size", "num_processes", "data_parallel_size", "dp_size",
                     "num_gpus", "n_gpus", "ngpus", "nprocs", "num_devices", "devices"),
                    Q.PROCESSES),
    **dict.fromkeys(("global_batch_size", "train_batch_size", "total_batch_size",
                     "effective_batch_size"), Q.GLOBAL_BATCH),
    **dict.fromkeys(("train_global_batch_size",), Q.GLOBAL_BATCH),  # NeMo-RL's policy
    **dict.fromkeys(("per_device_train_batch_size", "train_micro_batch_size_per_gpu",
                     "micro_batch_size", "batch_size", "micro_batch",
                     "per_gpu_train_batch_size"), Q.MICRO_BATCH),
    **dict.fromkeys(("len_dataloader", "len_train_dataloader", "num_batches_per_epoch",
                     "batches_per_epoch", "steps_per_epoch_batches", "loader_len",
                     "num_batches", "iters_per_epoch_micro", "epoch_length"), Q.BATCHES_PER_EPOCH),
    **dict.fromkeys(("steps_per_epoch", "updates_per_epoch", "num_update_steps_per_epoch",
                     "iters_per_epoch", "optimizer_steps_per_epoch"), Q.UPDATES_PER_EPOCH),
    **dict.fromkeys(("num_train_samples", "train_dataset_size", "dataset_size", "dataset_len",
                     "len_train_dataset", "num_train_examples", "num_examples", "train_size",
                     "n_train_samples"), Q.DATASET),
    # RL trainers: a rollout step samples responses for a batch of prompts, then splits the
    # batch into mini-batches, each one optimizer update, for some passes (PPO epochs).
    **dict.fromkeys(("rollout_batch_size", "num_prompts_per_step", "prompts_per_step",
                     "num_prompts_per_rollout", "prompt_batch_size"), Q.PROMPTS_PER_STEP),
    **dict.fromkeys(("n_samples_per_prompt", "num_samples_per_prompt", "samples_per_prompt",
                     "number_samples_per_prompt", "num_return_sequences",
                     "num_return_sequences_in_group", "num_generations", "rollout_n",
                     "num_generations_per_prompt", "responses_per_prompt",
                     "n_responses_per_prompt"), Q.RESPONSES_PER_PROMPT),
    **dict.fromkeys(("ppo_mini_batch_size", "policy_mini_batch_size", "ppo_mini_batch"),
                    Q.PPO_MINI_BATCH),
    **dict.fromkeys(("ppo_epochs", "ppo_epoch", "num_ppo_epochs", "update_epochs_per_batch",
                     "ppo_update_epochs"), Q.PPO_EPOCHS),
    **dict.fromkeys(("num_mini_batches", "ppo_num_mini_batches", "mini_batches_per_rollout"),
                    Q.MINI_BATCHES),
}

#: Names whose meaning depends on the section they sit in (``parent.key``): verl's
#: ``actor_rollout_ref.rollout.n`` is the responses per prompt, its ``trainer``'s
#: ``total_training_steps`` the planned rollout steps (the optimizer's section holds the
#: horizon under the same name), NeMo-RL's ``grpo.max_num_steps`` the planned GRPO steps.
QUALIFIED: dict[tuple[str, str], tuple[R, Q]] = {
    ("rollout", "n"): (R.FACTOR, Q.RESPONSES_PER_PROMPT),
    ("trainer", "total_training_steps"): (R.PLANNED_END, Q.ROLLOUTS),
    ("grpo", "max_num_steps"): (R.PLANNED_END, Q.ROLLOUTS),
}

#: Horizons that span the whole run, warmup included (HF's ``num_training_steps``,
#: DeepSpeed's ``total_num_steps``): the length a loop sized in optimizer updates. The other
#: HORIZON names may count the decay only (``lr_decay_steps`` = total - warmup) or another
#: unit (timm's ``t_initial`` in epochs).
WHOLE_RUN_HORIZON: frozenset[str] = frozenset({
    "num_training_steps", "total_training_steps", "total_num_steps", "scheduler_total_steps",
    "lr_total_steps", "num_scheduler_steps"})

#: Knobs that are no number: whether a loader drops its short last batch, and how a loop
#: treats the short accumulation window at an epoch's end (flush / drop / carry).
DROP_LAST: tuple[str, ...] = ("dataloader_drop_last", "drop_last")
WINDOW_POLICY: tuple[str, ...] = ("accumulation_window", "window_policy")


def _names(table: dict[str, Q], q: Q) -> tuple[str, ...]:
    return tuple(k for k, v in table.items() if v is q)


def epoch_knobs() -> dict[str, tuple[str, ...]]:
    """The names of each knob an epoch-based loop sizes its horizon from, read by
    :mod:`lrdoctor.epochs` (the first name a config holds wins, in table order). Each is a
    meaning of the tables above, built when asked, so a name added there is seen there too:
    the loader length, the epochs planned, the micro-batch, the accumulation, the processes,
    and the horizon in updates (the planned ends in updates, then the whole-run horizons)."""
    return {
        "dataset_len": _names(FACTOR, Q.DATASET),
        "batches_per_epoch": _names(FACTOR, Q.BATCHES_PER_EPOCH),
        "epochs": _names(PLANNED_END, Q.EPOCHS),
        "batch_size": _names(FACTOR, Q.MICRO_BATCH),
        "ga": _names(FACTOR, Q.GRAD_ACCUM),
        "world_size": _names(FACTOR, Q.PROCESSES),
        "drop_last": DROP_LAST,
        "horizon": _names(PLANNED_END, Q.ITERATIONS)
        + tuple(k for k in HORIZON if k in WHOLE_RUN_HORIZON),
        "window": WINDOW_POLICY,
    }


#: Keys below which numbers are never progress (random states, per-parameter knobs).
NEVER_UNDER = frozenset({"rng", "rng_state", "rng_states", "rng_tracker_states",
                         "random_state", "cuda_rng_state", "np_rng_state", "python_rng_state",
                         "grad_scaler", "scaler", "ema", "model", "state_dict", "module",
                         "model_state_dict", "weights", "params", "log_history",
                         "stateful_callbacks", "trial_params"})

#: Composer-style durations in a string: "10ep", "2000ba", "500sp", "1e6tok", "0.1dur".
DURATION_UNITS: dict[str, Q] = {"ep": Q.EPOCHS, "ba": Q.ITERATIONS, "sp": Q.SAMPLES,
                                "tok": Q.TOKENS, "dur": Q.FRACTION, "iter": Q.ITERATIONS}


def norm(key: str) -> str:
    """A key as the tables spell it."""
    return key.strip().lstrip("_").replace("-", "_").lower()


def meaning(key: str, in_config: bool) -> tuple[R, Q] | None:
    """What a number saved under ``key`` says: in a config, budgets and knobs; in state,
    counters as well (a config holds no progress)."""
    k = norm(key)
    if k in HORIZON:
        return R.HORIZON, HORIZON[k]
    if k in WARMUP:
        return R.WARMUP, WARMUP[k]
    if k in FACTOR:
        return R.FACTOR, FACTOR[k]
    if k in LR:
        return R.LR, Q.LR
    if k in PLANNED_END:
        # "epochs" and "num_steps" are counters in some trainers' state: only a config's
        # are budgets.
        if in_config or k not in ("epochs", "num_steps"):
            return R.PLANNED_END, PLANNED_END[k]
    if not in_config and k in PROGRESS:
        return R.PROGRESS, PROGRESS[k]
    return None


def qualified(parent: str | None, key: str) -> tuple[R, Q] | None:
    """What ``key`` means inside a section named ``parent`` (None: the plain tables decide)."""
    return QUALIFIED.get((norm(parent), norm(key))) if parent else None
