"""``lrdoctor replay``: replay a training loop's step accounting before it burns GPU-days.

Modules: :mod:`.config` (the run config), :mod:`.batchlog` (batch logs and
synthetic lengths), :mod:`.packing` (the frameworks' micro-batching),
:mod:`.roll_yaml` (ROLL's own YAML), :mod:`.engine` (fast numpy path),
:mod:`.torch_exec` (real optimizer/scheduler path), :mod:`.analysis`
(summary, findings, sweeps) and :mod:`.plots`.

Nothing here is imported on the ``lrdoctor --help`` path.
"""
