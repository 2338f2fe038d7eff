"""The replay's registries are the one place: config choices, docs and dispatch come from them."""

from __future__ import annotations

import typing

import pytest

from lrdoctor.core.errors import UnusableInput
from lrdoctor.replay import ReplayOptions, packing
from lrdoctor.replay.config import BatchingCfg, config_from_dict
from lrdoctor.replay.packing.registry import PACKERS, docs_table
from lrdoctor.replay.translate import TRANSLATORS
from tests.helpers.paths import REPO


def test_strategy_literal_and_docs_come_from_the_packer_registry():
    field = BatchingCfg.model_fields["strategy"]
    assert typing.get_args(field.annotation) == tuple(PACKERS)
    doc = (REPO / "docs" / "replay.md").read_text()
    block = doc.split("<!-- packers:begin -->\n", 1)[1].split("<!-- packers:end -->", 1)[0]
    assert block == docs_table(), "regenerate the table from registry.docs_table()"


@pytest.mark.parametrize("name", sorted(PACKERS))
def test_every_packer_names_what_it_is_missing(name):
    required = [k for k, f in PACKERS[name].params.model_fields.items() if f.is_required()]
    for key in required:
        with pytest.raises(UnusableInput, match=f"strategy {name} needs batching.{key}"):
            packing.plan_step({"strategy": name}, {}, {"tokens": [5, 6]}, 1)


def test_unknown_strategy_lists_the_registry():
    with pytest.raises(UnusableInput, match="is not one of static, token_budget"):
        packing.plan_step({"strategy": "magic"}, {}, {"tokens": [5]}, 1)
    with pytest.raises(UnusableInput, match="batching.strategy"):
        config_from_dict({"train": {"steps": 1}, "batching": {"strategy": "magic"}})


def test_translators_have_unique_names_and_formats():
    names = [t.name for t in TRANSLATORS]
    assert len(set(names)) == len(names)
    assert {t.format_name for t in TRANSLATORS} >= {"roll-yaml", "verl-config"}


def test_replay_options_from_a_mapping_reject_unknown_names_and_types():
    assert ReplayOptions.from_mapping({"engine": "fast", "knob_check": False}).knob_check is False
    with pytest.raises(UnusableInput, match="unknown bogus"):
        ReplayOptions.from_mapping({"bogus": 1})
    with pytest.raises(UnusableInput, match="knob_check is 'no'"):
        ReplayOptions.from_mapping({"knob_check": "no"})
