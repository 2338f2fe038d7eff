"""The finding rules, one file per code, and their registry.

Each ``lrdoctor/rules/lrdNNN_<name>.py`` holds the :class:`~lrdoctor.core.findings.Rule`
(code, title, severity, explanation, example, fix: the catalog page is made from it),
its evidence dataclass and, where lrdoctor checks it in one place, its ``check``.
Adding a finding is one new file and one line in the tuple of its kind below; a
module that does not fit its kind's protocol is a mypy error, not a silent skip.

Kinds, by what a check looks at:

- :data:`CHECKPOINT`: one checkpoint's :class:`~lrdoctor.core.state.RunState`, run by
  :func:`lrdoctor.diagnose.diagnose` in this order (the order findings are listed in);
  ``found`` holds what the checks before it reported (LRD111 says "not judged" only
  when nothing else judged).
- :data:`REPLAY`: one replay's :class:`~lrdoctor.replay.analysis.ReplayContext`, run by
  :func:`lrdoctor.replay.analysis.findings` in this order.
- :data:`RAISED`: rules raised where their evidence is at hand (the run across its
  checkpoints, the live guard, ``check``); their files hold the rule and its evidence
  (and the function that builds the finding).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from lrdoctor.core.findings import Finding, Rule
from lrdoctor.rules import (
    lrd101_past_decay_horizon,
    lrd102_min_lr_tail,
    lrd103_scheduler_k_times_fast,
    lrd104_megatron_samples_mismatch,
    lrd105_optimizer_lr_mismatch,
    lrd106_impossible_config,
    lrd107_schedule_not_recoverable,
    lrd108_scheduler_behind,
    lrd109_deepspeed_skip_mismatch,
    lrd110_lr_at_floor,
    lrd111_not_judged,
    lrd112_scheduler_restarted_on_resume,
    lrd113_progress_double_counted_on_resume,
    lrd114_schedule_changed_between_checkpoints,
    lrd115_scheduler_state_missing,
    lrd116_progress_ratio_changes,
    lrd117_epoch_end_arithmetic,
    lrd118_decay_unfinished_at_planned_end,
    lrd130_resume_file_unreadable,
    lrd131_lr_zero_while_training,
    lrd132_lr_contradicts_schedule_type,
    lrd133_stateless_schedule_mismatch,
    lrd201_overshoot,
    lrd202_undershoot,
    lrd203_progress_depends_on_memory_knob,
    lrd204_short_first_window,
    lrd205_lr_changes_inside_window,
    lrd206_variable_updates_per_train_step,
    lrd207_inconsistent_loss_divisor,
    lrd208_short_padding,
    lrd209_token_cap_exceeded,
    lrd210_progress_depends_on_dp,
    lrd211_stepped_on_failed_update,
    lrd212_budget_divisibility,
    lrd213_config_key_not_modelled,
    lrd214_replay_engines_disagree,
    lrd215_loss_divisor_lr_scale,
    lrd216_scheduler_before_optimizer,
    lrd301_unused_ignore,
    lrd302_progress_ratio_exceeded,
    lrd303_check_input_unusable,
)

if TYPE_CHECKING:
    from lrdoctor.core.state import RunState
    from lrdoctor.replay.analysis import ReplayContext


class Documented(Protocol):
    """A rule file: the rule and nothing checked here."""

    @property
    def RULE(self) -> Rule: ...  # noqa: N802 - the module constant


class CheckpointRule(Documented, Protocol):
    """A rule file whose check judges one checkpoint's state."""

    def check(self, state: RunState, found: Sequence[Finding]) -> list[Finding]: ...


class ReplayRule(Documented, Protocol):
    """A rule file whose check judges one replay (its trace, summary and notes)."""

    def check(self, c: ReplayContext) -> list[Finding]: ...


#: Judged on one checkpoint, in this order.
CHECKPOINT: tuple[CheckpointRule, ...] = (
    lrd106_impossible_config,
    lrd107_schedule_not_recoverable,
    lrd104_megatron_samples_mismatch,
    lrd109_deepspeed_skip_mismatch,
    lrd103_scheduler_k_times_fast,
    lrd108_scheduler_behind,
    lrd102_min_lr_tail,
    lrd110_lr_at_floor,
    lrd101_past_decay_horizon,
    lrd118_decay_unfinished_at_planned_end,
    lrd105_optimizer_lr_mismatch,
    lrd117_epoch_end_arithmetic,
    lrd130_resume_file_unreadable,
    lrd131_lr_zero_while_training,
    lrd132_lr_contradicts_schedule_type,
    lrd133_stateless_schedule_mismatch,
    lrd111_not_judged,
)

#: Judged on one replay (``lrdoctor replay``), in this order.
REPLAY: tuple[ReplayRule, ...] = (
    lrd201_overshoot,
    lrd202_undershoot,
    lrd203_progress_depends_on_memory_knob,
    lrd204_short_first_window,
    lrd205_lr_changes_inside_window,
    lrd206_variable_updates_per_train_step,
    lrd207_inconsistent_loss_divisor,
    lrd208_short_padding,
    lrd209_token_cap_exceeded,
    lrd210_progress_depends_on_dp,
    lrd211_stepped_on_failed_update,
    lrd212_budget_divisibility,
    lrd215_loss_divisor_lr_scale,
    lrd216_scheduler_before_optimizer,
)

#: Raised where their evidence is (the run, the replay, the live guard, ``check``).
RAISED: tuple[Documented, ...] = (
    lrd112_scheduler_restarted_on_resume,
    lrd113_progress_double_counted_on_resume,
    lrd114_schedule_changed_between_checkpoints,
    lrd115_scheduler_state_missing,
    lrd116_progress_ratio_changes,
    lrd213_config_key_not_modelled,
    lrd214_replay_engines_disagree,
    lrd301_unused_ignore,
    lrd302_progress_ratio_exceeded,
    lrd303_check_input_unusable,
)

#: Every rule, in code order (the catalog's order).
RULES: tuple[Rule, ...] = tuple(sorted((m.RULE for m in (*CHECKPOINT, *REPLAY, *RAISED)),
                                       key=lambda r: r.code))
BY_CODE: Mapping[str, Rule] = {r.code: r for r in RULES}
