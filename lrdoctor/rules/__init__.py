"""The finding rules, one file per code, and their registry.

Each ``lrdoctor/rules/lrdNNN_<name>.py`` holds the :class:`~lrdoctor.core.findings.Rule`
(its docstring: code, name, title and the sections Explanation, Example, Fix that make
the catalog page, read by :meth:`~lrdoctor.core.findings.Rule.from_module`), its evidence
dataclass and, where lrdoctor checks it in one place, its ``check``.
Adding a finding is one new file and, in the function of its kind below, its import and
its entry; a module that does not fit its kind's protocol is a mypy error, not a silent
skip. Each kind is imported when first asked for (:func:`__getattr__`).

Kinds, by what a check looks at:

- :data:`CHECKPOINT`: one checkpoint's :class:`~lrdoctor.core.state.RunState`, run by
  :func:`lrdoctor.diagnose.diagnose` in this order (the order findings are listed in);
  ``found`` holds what the checks before it reported (LRD111 says "not judged" only
  when nothing else judged).
- :data:`REPLAY`: one replay's :class:`~lrdoctor.rules.replay_context.ReplayContext`
  (built by :mod:`lrdoctor.replay`, which imports the rules; never the other way round),
  run by :func:`lrdoctor.replay.analysis.findings` in this order.
- :data:`RAISED`: rules raised where their evidence is at hand (the run across its
  checkpoints, the live guard, ``check``); their files hold the rule and its evidence
  (and the function that builds the finding).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from lrdoctor.core.findings import Finding, Rule

if TYPE_CHECKING:
    from lrdoctor.core.state import RunState
    from lrdoctor.rules.replay_context import ReplayContext


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


def _checkpoint() -> tuple[CheckpointRule, ...]:
    """Judged on one checkpoint, in this order."""
    from lrdoctor.rules import lrd101_past_decay_horizon as lrd101
    from lrdoctor.rules import lrd102_min_lr_tail as lrd102
    from lrdoctor.rules import lrd103_scheduler_k_times_fast as lrd103
    from lrdoctor.rules import lrd104_megatron_samples_mismatch as lrd104
    from lrdoctor.rules import lrd105_optimizer_lr_mismatch as lrd105
    from lrdoctor.rules import lrd106_impossible_config as lrd106
    from lrdoctor.rules import lrd107_schedule_not_recoverable as lrd107
    from lrdoctor.rules import lrd108_scheduler_behind as lrd108
    from lrdoctor.rules import lrd109_deepspeed_skip_mismatch as lrd109
    from lrdoctor.rules import lrd110_lr_at_floor as lrd110
    from lrdoctor.rules import lrd111_not_judged as lrd111
    from lrdoctor.rules import lrd117_epoch_end_arithmetic as lrd117
    from lrdoctor.rules import lrd118_decay_unfinished_at_planned_end as lrd118
    from lrdoctor.rules import lrd119_horizon_in_another_unit as lrd119
    from lrdoctor.rules import lrd120_horizon_unset as lrd120
    from lrdoctor.rules import lrd130_resume_file_unreadable as lrd130
    from lrdoctor.rules import lrd131_lr_zero_while_training as lrd131
    from lrdoctor.rules import lrd132_lr_contradicts_schedule_type as lrd132
    from lrdoctor.rules import lrd133_stateless_schedule_mismatch as lrd133

    return (
        lrd106,
        lrd107,
        lrd104,
        lrd109,
        lrd103,
        lrd108,
        lrd102,
        lrd110,
        lrd101,
        lrd118,
        lrd105,
        lrd117,
        lrd119,
        lrd120,
        lrd130,
        lrd131,
        lrd132,
        lrd133,
        lrd111,
    )


def _replay() -> tuple[ReplayRule, ...]:
    """Judged on one replay (``lrdoctor replay``), in this order."""
    from lrdoctor.rules import lrd201_overshoot as lrd201
    from lrdoctor.rules import lrd202_undershoot as lrd202
    from lrdoctor.rules import lrd203_progress_depends_on_memory_knob as lrd203
    from lrdoctor.rules import lrd204_short_first_window as lrd204
    from lrdoctor.rules import lrd205_lr_changes_inside_window as lrd205
    from lrdoctor.rules import lrd206_variable_updates_per_train_step as lrd206
    from lrdoctor.rules import lrd207_inconsistent_loss_divisor as lrd207
    from lrdoctor.rules import lrd208_short_padding as lrd208
    from lrdoctor.rules import lrd209_token_cap_exceeded as lrd209
    from lrdoctor.rules import lrd210_progress_depends_on_dp as lrd210
    from lrdoctor.rules import lrd211_stepped_on_failed_update as lrd211
    from lrdoctor.rules import lrd212_budget_divisibility as lrd212
    from lrdoctor.rules import lrd215_loss_divisor_lr_scale as lrd215
    from lrdoctor.rules import lrd216_scheduler_before_optimizer as lrd216

    return (
        lrd201,
        lrd202,
        lrd203,
        lrd204,
        lrd205,
        lrd206,
        lrd207,
        lrd208,
        lrd209,
        lrd210,
        lrd211,
        lrd212,
        lrd215,
        lrd216,
    )


def _raised() -> tuple[Documented, ...]:
    """Raised where their evidence is (the run, the replay, the live guard, ``check``)."""
    from lrdoctor.rules import lrd112_scheduler_restarted_on_resume as lrd112
    from lrdoctor.rules import lrd113_progress_double_counted_on_resume as lrd113
    from lrdoctor.rules import lrd114_schedule_changed_between_checkpoints as lrd114
    from lrdoctor.rules import lrd115_scheduler_state_missing as lrd115
    from lrdoctor.rules import lrd116_progress_ratio_changes as lrd116
    from lrdoctor.rules import lrd213_config_key_not_modelled as lrd213
    from lrdoctor.rules import lrd214_replay_engines_disagree as lrd214
    from lrdoctor.rules import lrd217_unknown_config_key as lrd217
    from lrdoctor.rules import lrd301_unused_ignore as lrd301
    from lrdoctor.rules import lrd302_progress_ratio_exceeded as lrd302
    from lrdoctor.rules import lrd303_check_input_unusable as lrd303

    return (
        lrd112,
        lrd113,
        lrd114,
        lrd115,
        lrd116,
        lrd213,
        lrd214,
        lrd217,
        lrd301,
        lrd302,
        lrd303,
    )


#: Each group, imported when it is first asked for (:func:`__getattr__`).
_GROUPS: dict[str, Callable[[], tuple[Documented, ...]]] = {
    "CHECKPOINT": _checkpoint, "REPLAY": _replay, "RAISED": _raised}

if TYPE_CHECKING:
    #: Judged on one checkpoint, in this order.
    CHECKPOINT: tuple[CheckpointRule, ...]
    #: Judged on one replay (``lrdoctor replay``), in this order.
    REPLAY: tuple[ReplayRule, ...]
    #: Raised where their evidence is (the run, the replay, the live guard, ``check``).
    RAISED: tuple[Documented, ...]
    #: Every rule, in code order (the catalog's order).
    RULES: tuple[Rule, ...]
    BY_CODE: Mapping[str, Rule]


def __getattr__(name: str) -> Any:
    """``CHECKPOINT``, ``REPLAY``, ``RAISED``, ``RULES`` and ``BY_CODE``, each made on first
    use and kept. Why lazily: a rule file is a few dataclasses, and the 44 of them were a
    third of ``inspect``'s start-up; ``inspect`` imports the checkpoint rules, ``replay``
    the replay rules, and only the catalog, SARIF and ``[tool.lrdoctor]``'s ``ignore``
    (every code) import them all."""
    if name in _GROUPS:
        value: Any = _GROUPS[name]()
    elif name == "RULES":
        value = tuple(sorted((m.RULE for g in _GROUPS.values() for m in g()),
                             key=lambda r: r.code))
    elif name == "BY_CODE":
        value = {r.code: r for r in __getattr__("RULES")}
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value
