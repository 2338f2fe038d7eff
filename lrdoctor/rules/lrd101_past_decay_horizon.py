"""LRD101 `past-decay-horizon`: scheduler is past its decay horizon before the planned end of training.

The rule, its check and its evidence live here; :mod:`lrdoctor.rules` registers it.
"""

from __future__ import annotations

from lrdoctor.core.findings import Rule, Severity

RULE = Rule(
    code="LRD101",
    name="past-decay-horizon",
    severity=Severity.ERROR,
    title="Scheduler is past its decay horizon before the planned end of training",
    explanation=("The scheduler's progress exceeds the horizon it decays over (Megatron "
                 "`lr_decay_steps`, HF `num_training_steps`, torch `T_max`/`total_steps`) while "
                 "the trainer's own counters say training is not over. Megatron silently clamps "
                 "the LR to `min_lr` from there on, so the rest of the run trains at the floor."),
    example=("ROLL checkpoint: `num_steps` 8429 vs `lr_decay_steps` 2400 at iteration 2400 of "
             "2400 planned updates: 72% of the progress happened at `min_lr`."),
    fix=("Make scheduler progress follow the nominal budget (`lrdoctor fix --policy nominal`) or"
         " move the horizon to the real update count (`--policy extend-horizon`, what `lrdoctor "
         "fix` does when LRD101 is alone); at the source, advance the scheduler by "
         "nominal/actual per update or compute the budget from the real micro-batch count. Next "
         "to LRD103/LRD104/LRD109 it follows from that finding and is repaired with it."),
)
