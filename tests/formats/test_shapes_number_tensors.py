"""``shapes.number`` of a one-element tensor is a real number or None, as for a plain value.

Bug found by typing ``safeload.read_values`` honestly (mypy strict: it decodes bools,
ints, floats and complex numbers): ``number`` is declared ``float | None`` and every
layout that reads a learning rate or a counter through it (``_common.number``) trusts
that, but a one-element bool or complex tensor came back as ``True`` or ``(3+0j)``:
a bool tensor named ``step`` became a progress count of 1, a complex one a counter.
Plain Python bools and complex numbers were already refused. Tensors written by
torch.save (a torch loop with AdamW + LinearLR).
"""

from __future__ import annotations

import pytest

from lrdoctor.read.bytes import safeload
from lrdoctor.read.scan.shapes import COUNTER, classify, number

torch = pytest.importorskip("torch")


def test_one_element_tensors(tmp_path):
    path = tmp_path / "ckpt.pt"
    torch.save({"step": torch.tensor(3, dtype=torch.int64),
                "epoch": torch.tensor(2.5, dtype=torch.float32),
                "global_step": torch.tensor(True),
                "consumed_samples": torch.tensor(3 + 0j, dtype=torch.complex64)}, path)
    obj = safeload.load(path)
    assert number(obj["step"]) == 3 and type(number(obj["step"])) is int
    assert number(obj["epoch"]) == 2.5
    assert number(obj["global_step"]) is None  # was True
    assert number(obj["consumed_samples"]) is None  # was (3+0j)
    assert number(True) is None and number(3 + 0j) is None  # as plain values always were
    counters = {f.key: f.value for f in classify(obj, str(path)) if f.kind == COUNTER}
    assert counters == {"step": 3, "epoch": 2.5}
