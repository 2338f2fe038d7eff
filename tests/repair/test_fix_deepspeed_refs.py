"""DeepSpeed's repair writes through the reader's refs (issue 18 item 2), honouring
``Counter.ref_offset``: DeepSpeed's own WarmupDecayLR saves ``last_batch_iteration``
(progress - 1), so the field the ref names becomes ``progress - ref_offset``.

Checkpoints from DeepSpeed's own engine (``save_checkpoint``; without ZeRO the LRs live in
the model states, with ZeRO-1 in the partition file), the engine's bug an extra scheduler
step per micro-batch; the fixed copy is resumed with ``engine.load_checkpoint`` (the
helpers of ``test_fix_deepspeed``). The repaired pickles differ from the input at exactly
the ref'd key paths, in every rank's copy of the file the ref names.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from lrdoctor.repair import plan_fix, write_fix
from lrdoctor.repair.engine import read_state
from tests.helpers.fix_support import diff, load
from tests.repair.test_fix_deepspeed import CONFIGS, STEPS, engine, healthy_lr

pytestmark = [pytest.mark.frameworks, pytest.mark.slow]


def test_fix_edits_exactly_the_refd_fields_with_the_offset_and_the_engine_resumes(tmp_path):
    runs, fixed = tmp_path / "runs", tmp_path / "fixed"
    engine(tmp_path, "train", runs)
    fixed.mkdir()
    for name in CONFIGS:
        src = runs / name
        _, st, _ = read_state(src)
        prog = st.scheduler_progress
        assert prog.ref.key == ("lr_scheduler", "last_batch_iteration") and prog.ref_offset == 1
        plan = plan_fix(src)
        tag = Path(st.path)
        rel = {str(f): f"{tag.name}/{f.name}" for f in tag.iterdir()}
        edits = {(c.file, c.key): c for c in plan.changes}
        p = edits[(rel[prog.ref.file], prog.ref.key)]
        assert (p.before, p.after) == (prog.value - 1, plan.target.progress - 1)
        named = {(rel[prog.ref.file], prog.ref.key)}
        named |= {(rel[r.file], r.key) for r in st.optimizer_lr_refs}
        assert st.optimizer_lr_refs and set(edits) == named, (set(edits), named)
        write_fix(plan, fixed / name)
        for f in tag.iterdir():  # the pickles differ at exactly the ref'd key paths
            got = {(rel[str(f)], k) for k in diff(load(f), load(fixed / name / rel[str(f)]))}
            assert got == {e for e in named if e[0] == rel[str(f)]}, (f.name, got)

    resumed = engine(tmp_path, "resume", fixed)
    for name in CONFIGS:
        r = resumed[name]
        assert r["lbi"] == STEPS - 1
        assert math.isclose(r["first_lr"][0], healthy_lr(STEPS), rel_tol=1e-12)
        assert math.isclose(r["lr_after"][0], healthy_lr(STEPS + 1), rel_tol=1e-12)
