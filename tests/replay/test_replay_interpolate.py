"""``${...}`` interpolation resolves as OmegaConf resolves it.

lrdoctor does not depend on OmegaConf at run time; this compares its resolver with
OmegaConf's own (the ``test`` extra) on configs in the frameworks' shapes (NeMo-RL's
``${mul:...}`` registered as NeMo-RL registers it, verl's ``${oc.select:...}``,
relative ``${..x}``) and on random reference graphs.
"""

from __future__ import annotations

import math
import random
import warnings

import pytest

from lrdoctor.replay.translate.interpolate import resolve

omegaconf = pytest.importorskip("omegaconf")
OmegaConf = omegaconf.OmegaConf
if not OmegaConf.has_resolver("mul"):  # nemo_rl/utils/config.py register_omegaconf_resolvers
    with warnings.catch_warnings():  # omegaconf 2.4 renames it; NeMo-RL calls this one
        warnings.simplefilter("ignore", UserWarning)
        OmegaConf.register_new_resolver("mul", lambda *a: math.prod(a))


def _omegaconf(data: dict) -> dict:
    return OmegaConf.to_container(OmegaConf.create(data), resolve=True)


CASES = [
    {"policy": {"max_total_sequence_length": 4096, "train_micro_batch_size": 4,
                "logprob_batch_size": "${policy.train_micro_batch_size}",
                "sequence_packing": {"train_mb_tokens":
                                     "${mul:${policy.max_total_sequence_length}, "
                                     "${policy.train_micro_batch_size}}"}}},
    {"actor": {"ppo_mini_batch_size": 256, "micro": "${oc.select:actor.missing,8}",
               "mini": "${oc.select:actor.ppo_mini_batch_size,1}"}},
    {"a": {"b": {"c": 3, "d": "${.c}", "e": "${..f}"}, "f": 7}, "g": "x-${a.b.c}-y"},
    {"n": 8, "args": {"gens": "${n}", "name": "run_${n}_${args.gens}"}},
]


@pytest.mark.parametrize("data", CASES)
def test_resolves_like_omegaconf(data):
    assert resolve(data) == _omegaconf(data)


def test_random_reference_graphs_resolve_like_omegaconf():
    rng = random.Random(21)
    for _ in range(200):
        keys = [f"k{i}" for i in range(8)]
        data: dict = {"sec": {}}
        for i, k in enumerate(keys):
            if i and rng.random() < 0.6:  # refer only backwards: no cycles
                ref = rng.choice(keys[:i])
                form = rng.choice(["${sec.%s}", "${.%s}", "v-${sec.%s}"])
                data["sec"][k] = form % ref
            else:
                data["sec"][k] = rng.choice([rng.randint(0, 99), rng.random(), True, "t"])
        assert resolve(data) == _omegaconf(data)
