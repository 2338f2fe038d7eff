"""The finding codes are a public contract: docs/findings.md must match the rule table."""


from lrdoctor.findings import RULES, catalog_markdown
from tests.helpers.paths import REPO


def test_docs_catalog_in_sync():
    doc = REPO / "docs" / "findings.md"
    assert doc.read_text() == catalog_markdown() + "\n", (
        "regenerate with: python -m lrdoctor.findings > docs/findings.md")


def test_codes_are_stable_shape():
    for code, rule in RULES.items():
        assert code == rule.code and code.startswith("LRD") and len(code) == 6
        assert rule.title and rule.fix and rule.example
    assert len({r.name for r in RULES.values()}) == len(RULES)


def test_catalog_fix_commands_run_as_printed_once_path_is_filled():
    """The page shows the command inspect prints (torch: the torch-microstep sample's
    LRD119-style text), with PATH for the checkpoint: never the bare, failing
    `lrdoctor fix --policy X`, and the same shape as the runtime's command."""
    import re

    from lrdoctor.core.findings import Finding, FreeEvidence, Severity
    from lrdoctor.diagnose import _runnable
    from lrdoctor.inspect_api import read_state

    page = catalog_markdown()
    assert "`lrdoctor fix --policy" not in page
    shown = set(re.findall(r"`(lrdoctor fix PATH [^`]+)`", page))
    assert "lrdoctor fix PATH --out PATH-fixed --policy extend-horizon" in shown, shown
    src = REPO / "sample_checkpoints" / "torch-microstep" / "checkpoint_60.pt"
    f = Finding("LRD119", Severity.ERROR, "t", "m", FreeEvidence({}),
                fix=RULES["LRD119"].fix)
    _runnable([f], read_state(src, "torchsave"))
    printed = re.findall(r"`(lrdoctor fix [^`]+)`", f.fix)
    assert printed, f.fix
    generic = {c.replace(str(src.with_name("checkpoint_60-fixed.pt")), "PATH-fixed")
               .replace(str(src), "PATH") for c in printed}
    assert generic <= shown, (generic, shown)
