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
