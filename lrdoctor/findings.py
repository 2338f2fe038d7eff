"""Findings with stable codes, like a linter's rules.

One :class:`Rule` per code, registered in :data:`RULES`; ``docs/findings.md``
is generated from this table (``python -m lrdoctor.findings > docs/findings.md``)
and a test keeps the two in sync. Codes never change meaning once released.

LRD1xx: checkpoint state (``inspect``); LRD2xx: replayed loop (``replay``);
LRD3xx: configuration of lrdoctor itself (``check``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any


class Severity(IntEnum):
    INFO = 1
    WARNING = 2
    ERROR = 3

    def __str__(self) -> str:
        return self.name.lower()


@dataclass(frozen=True)
class Rule:
    code: str
    name: str
    severity: Severity
    title: str
    explanation: str
    example: str
    fix: str


@dataclass
class Finding:
    code: str
    severity: Severity
    title: str
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)
    fix: str = ""
    # The file (or config key) the finding is about, for SARIF/GitHub output.
    location: str | None = None

    @property
    def rule(self) -> Rule:
        return RULES[self.code]

    def to_dict(self) -> dict[str, Any]:
        from lrdoctor.model import _jsonable

        d = {
            "code": self.code,
            "severity": str(self.severity),
            "title": self.title,
            "message": self.message,
            "evidence": _jsonable(self.evidence),
            "fix": self.fix,
        }
        if self.location:
            d["location"] = self.location
        return d


def finding(code: str, message: str, evidence: dict[str, Any] | None = None, *,
            fix: str | None = None, severity: Severity | None = None,
            location: str | None = None) -> Finding:
    """Build a finding from its rule; ``fix``/``severity`` override the rule's defaults."""
    rule = RULES[code]
    return Finding(
        code=code,
        severity=severity if severity is not None else rule.severity,
        title=rule.title,
        message=message,
        evidence=evidence or {},
        fix=fix if fix is not None else rule.fix,
        location=location,
    )


FAIL_ON = {"info": Severity.INFO, "warning": Severity.WARNING, "error": Severity.ERROR,
           "never": None}


def exit_code(findings: list[Finding], fail_on: str) -> int:
    """0 when nothing reaches the threshold, 1 otherwise (2 is for unusable input)."""
    threshold = FAIL_ON[fail_on]
    if threshold is None:
        return 0
    return 1 if any(f.severity >= threshold for f in findings) else 0


_E, _W, _I = Severity.ERROR, Severity.WARNING, Severity.INFO

_RULES = [
    # ---- checkpoint state (inspect) ------------------------------------
    Rule("LRD101", "past-decay-horizon", _E,
         "Scheduler is past its decay horizon before the planned end of training",
         "The scheduler's progress exceeds the horizon it decays over (Megatron "
         "`lr_decay_steps`, HF `num_training_steps`, torch `T_max`/`total_steps`) while "
         "the trainer's own counters say training is not over. Megatron silently clamps "
         "the LR to `min_lr` from there on, so the rest of the run trains at the floor.",
         "ROLL checkpoint: `num_steps` 8429 vs `lr_decay_steps` 2400 at iteration 2400 "
         "of 2400 planned updates: 72% of the progress happened at `min_lr`.",
         "Make scheduler progress follow the nominal budget (`lrdoctor fix --policy "
         "nominal`) or move the horizon to the real update count (`--policy "
         "extend-horizon`, what `lrdoctor fix` does when LRD101 is alone); at the source, "
         "advance the scheduler by nominal/actual per update or compute the budget from the "
         "real micro-batch count. Next to LRD103/LRD104/LRD109 it follows from that finding "
         "and is repaired with it."),
    Rule("LRD102", "min-lr-tail", _I,
         "A min-LR tail is configured",
         "The decay horizon ends before the planned end of training on purpose "
         "(Megatron `lr_decay_iters` < `train_iters`): the remaining steps run at `min_lr`.",
         "`lr_decay_iters` 800, `train_iters` 1000: the last 20% runs at `min_lr`.",
         "Nothing to do if this is intended."),
    Rule("LRD103", "scheduler-k-times-fast", _E,
         "Scheduler progress is k times what the trainer's counters imply",
         "The scheduler advanced k times as far as the trainer's own counters (optimizer "
         "updates, global_step, nominal budget) say it should: it is stepped on every "
         "micro-batch of a gradient-accumulation window, wrapped by accelerate's "
         "`AcceleratedScheduler` (which steps `num_processes` times per call), or stepped "
         "per dynamic micro-batch window while its budget came from nominal batches.",
         "`scheduler.last_epoch` 400 while AdamW `step` is 100 and `global_step` 100: k = 4.",
         "Step the scheduler only when the optimizer steps (inside the accumulation "
         "branch), or divide the budget by k; repair the checkpoint with `lrdoctor fix "
         "--policy rescale`."),
    Rule("LRD104", "megatron-samples-mismatch", _E,
         "Megatron scheduler `num_steps` differs from consumed minus skipped samples",
         "Megatron increments `num_steps` by the global batch size per iteration, so it "
         "must equal `consumed_train_samples - skipped_train_samples`.",
         "`num_steps` 96000 but `consumed_train_samples` 48000, `skipped` 0.",
         "Resume with `--override-opt_param-scheduler` after fixing the counter, or run "
         "`lrdoctor fix --policy nominal`."),
    Rule("LRD105", "optimizer-lr-mismatch", _W,
         "Optimizer param-group `lr` disagrees with the schedule at the saved progress",
         "The learning rate stored in the optimizer's param groups is not the LR the "
         "schedule gives at the scheduler's saved progress: the schedule was changed, "
         "the LR was set by hand, or a different scheduler drove the optimizer.",
         "param group lr 1.0e-4, schedule says 3.0e-5 at `num_steps` 1200.",
         "`lrdoctor fix` rewrites the param-group `lr` to the schedule's value."),
    Rule("LRD106", "impossible-config", _E,
         "The schedule's configuration is impossible",
         "Warmup at or past the decay horizon, `min_lr` above `max_lr`, a non-positive "
         "horizon or negative LRs: the schedule cannot do what was meant.",
         "`lr_warmup_steps` 3000 >= `lr_decay_steps` 2400.",
         "Correct the configuration."),
    Rule("LRD107", "schedule-not-recoverable", _I,
         "The intended schedule could not be recovered fully",
         "The checkpoint does not save everything needed to rebuild the schedule "
         "(LambdaLR saves no lambdas; HF keeps warmup in training_args.bin). lrdoctor "
         "says where what it used came from.",
         "LambdaLR in a plain torch checkpoint with no budget saved.",
         "Give the schedule in a run config or on the command line."),
    Rule("LRD108", "scheduler-behind", _W,
         "Scheduler progress is behind the optimizer's update count",
         "The scheduler advanced fewer times than the optimizer updated: steps skipped "
         "on overflow or stepped once per rollout/epoch. By design in verl and NeMo-RL "
         "(once per rollout step); a bug elsewhere.",
         "DeepSpeed: `last_batch_iteration`+1 = 90, `global_steps` 100, `skipped_steps` 0.",
         "Step the scheduler on every successful optimizer update."),
    Rule("LRD109", "deepspeed-skip-mismatch", _E,
         "DeepSpeed scheduler and step counters disagree",
         "DeepSpeed's invariant `last_batch_iteration + 1 == global_steps - skipped_steps` "
         "does not hold.",
         "`last_batch_iteration` 119, `global_steps` 100, `skipped_steps` 0.",
         "Repair the scheduler state with `lrdoctor fix --policy nominal`."),
    Rule("LRD110", "lr-at-floor", _I,
         "The learning rate is at its floor",
         "The scheduler is at or past its horizon at the end of planned training.",
         "Healthy run that finished its schedule.",
         "Nothing to do."),
    Rule("LRD111", "not-judged", _W,
         "Scheduler progress or the optimizer's LR could not be judged",
         "lrdoctor found no LR scheduler state in the files it scanned, or found one with "
         "nothing to compare it with (no optimizer step, loop counter or budget), or the "
         "checkpoint shows that the optimizer's param-group LRs were saved (Megatron's "
         "distributed optimizer) but they could not be read, so the LR check (LRD105) was "
         "not done, or a metrics log beside a LambdaLR checkpoint (Lightning's "
         "`metrics.csv` or a TensorBoard event file) was unreadable or held no logged LR, so the schedule was not "
         "fitted from it. Rather than stay silent it names what it scanned, at a severity a CI "
         "gate sees.",
         "`model.pt` and `optimizer.pt` only: no scheduler state among 2 files.",
         "Save the scheduler's `state_dict()` (and the optimizer's) in the checkpoint, or "
         "point lrdoctor at the file or folder that holds it."),
    # ---- the run across its checkpoints (inspect on a run) -------------
    Rule("LRD112", "scheduler-restarted-on-resume", _E,
         "Scheduler progress went backwards or restarted while updates continued",
         "Between two checkpoints of one run the trainer's counters kept growing while the "
         "scheduler's progress fell back, or counts only the updates since a resume: the "
         "scheduler state was not saved or not restored, so the resumed run repeats warmup "
         "and the early, high-LR part of the schedule. Reported by users of DeepSpeed "
         "(issues 3875, 5788), Lightning (11188), transformers (27710) and torchtitan (PR 275).",
         "checkpoint-20 -> checkpoint-40: global_step 20 -> 40 (+20) but scheduler.last_epoch "
         "20 -> 20 (+0): the scheduler counts only the updates since checkpoint-20.",
         "Save and restore the scheduler's state_dict with the optimizer's (HF: keep "
         "scheduler.pt; DeepSpeed: pass the scheduler to deepspeed.initialize or save it in "
         "client_state); repair the checkpoint with `lrdoctor fix --policy nominal`, which "
         "sets scheduler progress to the trainer's counters."),
    Rule("LRD113", "progress-double-counted-on-resume", _E,
         "Scheduler progress jumped by more than the updates between two checkpoints",
         "The scheduler advanced more between two checkpoints than the updates in between, "
         "by the progress it had at the resume: the loop steps the restored scheduler by "
         "its own progress again after `load_state_dict` (an extra "
         "`scheduler.step(iteration * global_batch_size)`, THUDM/slime PR 1547, "
         "radixark/miles PR 1627), so every resume moves the LR ahead.",
         "iter_0000010 -> iter_0000020: consumed samples 160 -> 320 (+160) but num_steps "
         "160 -> 480 (+320): the excess 160 is the progress saved at iter_0000010.",
         "Do not step the scheduler after loading its state (the state already holds the "
         "progress); repair the checkpoint with `lrdoctor fix --policy nominal`."),
    Rule("LRD114", "schedule-changed-between-checkpoints", _E,
         "The horizon, planned end or a schedule parameter changed between checkpoints",
         "Two checkpoints of one run disagree on the schedule: the horizon or planned end was "
         "recomputed on resume with another batch size, accumulation or epoch count "
         "(transformers PR 43718 and `auto_find_batch_size`, NeMo PRs 7518/8744), so the LR "
         "jumps at the resume and the decay ends somewhere else than planned.",
         "checkpoint-4 -> checkpoint-8: decay horizon 12 -> 48, planned end (max_steps) "
         "12 -> 48; at step 4 the LR jumps from 7.5e-4 to 9.9e-4.",
         "Resume with the batch size, accumulation and epoch count the run started with, or "
         "fix the horizon in updates (`max_steps`) so it does not depend on them; `lrdoctor "
         "fix --policy extend-horizon` rewrites a checkpoint's horizon."),
    Rule("LRD115", "scheduler-state-missing", _W,
         "A checkpoint saves no scheduler state while its optimizer LR shows a schedule",
         "The optimizer's param-group `lr` is not the peak LR, so a scheduler was moving it, "
         "but the checkpoint holds no scheduler state: a resume from it builds a fresh "
         "scheduler that starts from step 0 (warmup again, the peak LR again). DeepSpeed "
         "issues 3875/5788 (a client scheduler not passed to `deepspeed.initialize`), "
         "Lightning 11188, transformers 27710.",
         "global_step2: optimizer lr 6.9e-4 is 0.69x the initial_lr 1e-3, no lr_scheduler "
         "state saved.",
         "Save the scheduler with the checkpoint (pass it to `deepspeed.initialize`, return "
         "it from `configure_optimizers`, keep `scheduler.pt`), or rebuild it on resume with "
         "`last_epoch` set to the restored step."),
    Rule("LRD116", "progress-ratio-changes", _W,
         "Scheduler progress per update changes over the run",
         "Between some checkpoints the scheduler advances at a different rate per update "
         "than before: its step count depends on something that changed during the run "
         "(dynamic batch composition, the accumulation or world size after a resume, a "
         "stepping rule that changed).",
         "checkpoint-10 -> checkpoint-20: the scheduler advanced 2 per update where the run "
         "so far advanced 1.",
         "Drive the scheduler by the nominal progress (samples or planned updates) so its "
         "rate does not depend on batching; repair with `lrdoctor fix --policy nominal`."),
    Rule("LRD117", "epoch-end-arithmetic", _E,
         "The horizon differs from the updates an epoch-based loop really takes",
         "The horizon was computed from len(dataloader) and the accumulation with floor or "
         "ceil, while the loop steps (or skips) the short window at the end of each epoch, or "
         "carries windows across epochs: the schedule ends before or after training does. "
         "transformers issues 37777 and 31677, Lightning 19684, OpenRLHF PR 1351 (21 "
         "scheduled vs 23 real updates, the cosine rising again at the end). When neither the "
         "config nor the checkpoint's counters tell which the loop does, the finding is info "
         "and names what each would take.",
         "`max_train_steps` 21 = 3 x floor(30 / 4) but windows carried across epochs give "
         "floor(3 x 30 / 4) = 22 updates.",
         "Compute the horizon the way the loop steps: epochs x ceil(L / GA) when the short "
         "window of each epoch is stepped, floor(epochs x L / GA) when windows run across "
         "epochs; or count the real updates once (a dry pass over the dataloader)."),
    Rule("LRD118", "decay-unfinished-at-planned-end", _W,
         "The decay horizon lies past the planned end of training",
         "Training ends before the schedule finishes its decay, so the last updates run at a "
         "higher LR than planned. Megatron with `--rampup-batch-size` and iteration-based "
         "training sizes the horizon as `lr_decay_iters x global_batch_size` (the final "
         "batch) while the ramp's early iterations consume fewer samples "
         "(Megatron-Bridge issue 2609); lrdoctor computes the samples along the ramp as "
         "megatron-core's ramp-up calculator does.",
         "train_iters 40, global batch 16, ramp-up 4 -> 16 over 96 samples: 544 samples "
         "consumed, horizon 640: training ends at 34% of the decay left.",
         "Size the horizon from the real progress at the planned end (Megatron: train by "
         "samples with `--train-samples`/`--lr-decay-samples` under a ramp-up); `lrdoctor "
         "fix --policy extend-horizon` rewrites a checkpoint's horizon."),
    # ---- replayed loop (replay) ----------------------------------------
    Rule("LRD201", "overshoot", _E,
         "The loop takes more optimizer updates than the scheduler's budget",
         "Dynamic micro-batching (or per-micro-step stepping) consumes more scheduler "
         "progress per train step than the budget assumed: the LR reaches its floor early.",
         "ROLL: budget 1024 updates, 2 updates per pipeline step: floor at step 512 of 1024.",
         "Advance the scheduler by nominal/actual per update, or make the budget follow "
         "the replayed update count."),
    Rule("LRD202", "undershoot", _W,
         "The loop takes fewer optimizer updates than the scheduler's budget",
         "Short, densely packed sequences give fewer micro-batches than nominal: the "
         "schedule never finishes its decay.",
         "budget 1024 updates, 512 taken: the LR ends mid-curve.",
         "Make the budget follow the replayed update count."),
    Rule("LRD203", "progress-depends-on-memory-knob", _W,
         "Scheduler progress depends on a memory knob",
         "Changing a memory setting such as `max_tokens_per_microbatch` changes how many "
         "optimizer updates a train step takes, and so the LR curve.",
         "max_tokens 8192 -> 2 updates per step; 16384 -> 1 update per step.",
         "Drive the scheduler by samples or nominal progress, not by update count."),
    Rule("LRD204", "short-first-window", _E,
         "The first accumulation window is short (off-by-one)",
         "`global_step % k != 0` with `global_step` from 0 closes the first window after "
         "one micro-batch and shifts every later window.",
         "k=4: window sizes 1, 4, 4, ...",
         "Use `(global_step + 1) % k == 0` as the optimizer-step condition."),
    Rule("LRD205", "lr-changes-inside-window", _E,
         "The LR changes inside an accumulation window",
         "The scheduler is stepped per micro-batch, so micro-batches of one window see "
         "different LRs and the schedule runs k times too fast.",
         "k=4: LR changes 3 times inside each window.",
         "Step the scheduler only when the optimizer steps; divide a micro-step budget by k."),
    Rule("LRD206", "variable-updates-per-train-step", _W,
         "The number of optimizer updates varies between train steps",
         "Each train batch takes a different number of updates, so scheduler progress "
         "per train step is data-dependent.",
         "updates per pipeline step range 1..3.",
         "Advance the scheduler by nominal/actual per update."),
    Rule("LRD207", "inconsistent-loss-divisor", _E,
         "The loss divisor is not the step's global document total",
         "With a document target, each micro-batch must divide by the global document "
         "count of the whole step; a per-micro-batch or per-rank divisor weights "
         "documents unequally.",
         "divisor 8 on one micro-batch, 32 on the step.",
         "All-reduce the step's document count and broadcast it to every micro-batch."),
    Rule("LRD208", "short-padding", _E,
         "Padding to dp size comes up short",
         "`tensor[:pad_size]` returns fewer rows than `pad_size` when `pad_size > "
         "mb_size`, so the mini-batch is still not divisible by dp.",
         "mb_size 2, dp 8: pad_size 6 but only 2 rows added.",
         "Repeat rows until the pad is full (or pad with whole prompts)."),
    Rule("LRD209", "token-cap-exceeded", _W,
         "A micro-batch exceeds the token cap",
         "Balanced partitioning (Karmarkar-Karp) keeps the partition count but can put "
         "more tokens in one micro-batch than the cap (a warning). A single sequence "
         "longer than the cap is an error where the framework asserts on it, because the "
         "real run stops there: ROLL's `dynamic_batching_shard` and NeMo-RL's dynamic "
         "batching assert, verl's `rearrange_micro_batches` asserts `max_token_len >= "
         "max_seq_len`, OpenRLHF raises `ValueError`; SkyRL's balanced packer puts it "
         "alone in a micro-batch (a warning).",
         "max_token_len 8192, micro-batch of 9500 tokens; ROLL: a 9000-token sequence "
         "with `max_tokens_per_microbatch_in_train` 8192.",
         "Raise the cap (at least to the longest sequence) or let the partition count "
         "grow."),
    Rule("LRD210", "progress-depends-on-dp", _E,
         "Scheduler progress depends on the data-parallel size",
         "After a world-size change the scheduler advances a different amount per global "
         "batch: its increment counts micro-batches per rank rather than samples.",
         "dp 4 -> 8: scheduler advance per step halves.",
         "Increment the scheduler by the global batch (samples) or once per update."),
    Rule("LRD211", "stepped-on-failed-update", _W,
         "The scheduler is stepped when an update fails",
         "Skipped or failed updates (overflow, NaN) still advance the scheduler.",
         "10 skipped updates advanced the scheduler 10 times.",
         "Step the scheduler only after a successful optimizer step."),
    Rule("LRD212", "budget-divisibility", _E,
         "Mini-batch boundaries do not divide the train batch",
         "With a variable number of sequences per prompt, fixed-size sequence mini-batches "
         "crash on divisibility or take extra optimizer steps.",
         "SkyRL step-wise: 37 sequences, mini-batch 16: 3 updates instead of 2.",
         "Cut mini-batches at prompt boundaries."),
    Rule("LRD213", "config-key-not-modelled", _W,
         "A framework config key changes step accounting but is not replayed",
         "replay translated the framework's own config; this key (dynamic sampling, critic "
         "warmup, a launcher-set world size, ...) changes how many samples or updates a step "
         "has, and the replay does not model it, so its numbers hold only without it.",
         "verl trainer.critic_warmup: 10: the actor and its LR do not move for 10 steps.",
         "Check the key's effect by hand, or replay a batch log recorded from the run."),
    Rule("LRD214", "replay-engines-disagree", _W,
         "The real torch loop disagrees with the fast replay",
         "By default on a CPU, `replay` runs the fast path over the whole run and the real "
         "torch loop (optimizer, scheduler, probe model) over a sample: the first train "
         "steps and a segment at each dp change or failed update. Every sampled "
         "micro-batch's window, update, scheduler progress, LR and loss weight must agree; "
         "where they do not, the fast path's numbers are not backed by a real execution.",
         "lr at trace row 96: fast 0.000412, torch 0.000398.",
         "Replay the whole run with `--torch` and report the config to lrdoctor."),
    Rule("LRD215", "loss-divisor-lr-scale", _W,
         "The loss divisor changes the effective LR of updates",
         "Under gradient accumulation and data parallelism the loss must be divided by the "
         "tokens of the whole update (every micro-batch, every rank). Dividing each "
         "micro-batch by its own tokens (then by k), or each rank by its own window, makes a "
         "short window train at a fraction of the LR and weighs tokens unequally: "
         "transformers PR 34191 (`num_items_in_batch`) and issue 37766. `replay` reports the "
         "effective LR scale per update the configured divisor implies.",
         "per_micro_batch_tokens, k 4: the last window of each epoch holds 1 micro-batch "
         "and trains at 0.25x; tokens weigh 0.4..2.6x inside one update.",
         "Divide by the update's global token count (all-reduce it across ranks, multiply "
         "the loss by dp to undo DDP's mean), as `num_items_in_batch` does."),
    # ---- lrdoctor configuration (check) --------------------------------
    Rule("LRD301", "unused-ignore", _W,
         "An ignore in the lrdoctor configuration matched nothing",
         "An ignored code produced no finding: the ignore is stale.",
         "ignore LRD103 for ckpt/ but no LRD103 found there.",
         "Remove the ignore."),
    Rule("LRD302", "progress-ratio-exceeded", _E,
         "Scheduler progress ratio exceeds the tolerated maximum",
         "actual/nominal scheduler progress is above `max-progress-ratio`.",
         "ratio 3.51 > 1.05.",
         "Fix the step accounting, or raise the tolerance with a reason."),
    Rule("LRD303", "check-input-unusable", _E,
         "A checked input could not be used",
         "A checkpoint or config named in the check configuration (or given to `inspect` "
         "with a machine output format) could not be read; the message is the one line "
         "printed on stderr, the evidence says what was scanned.",
         "ckpt/missing: no such file.",
         "Correct the path."),
]

RULES: dict[str, Rule] = {r.code: r for r in _RULES}


def catalog_markdown() -> str:
    """The findings catalog page (docs/findings.md)."""
    out = ["# Findings catalog", "",
           "Every finding lrdoctor reports has a stable code. Severity is the default; "
           "`--fail-on` picks the threshold for exit code 1.", ""]
    for r in _RULES:
        out += [f"## {r.code} `{r.name}` ({r.severity})", "", f"**{r.title}**", "",
                r.explanation, "", f"*Example:* {r.example}", "", f"*Fix:* {r.fix}", ""]
    return "\n".join(out)


if __name__ == "__main__":  # pragma: no cover
    print(catalog_markdown())
