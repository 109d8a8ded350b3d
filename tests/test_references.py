"""Cross-reference mentions and their targets (the `reference` relation's rules)."""
from __future__ import annotations

from mage_gym.graph.references import MENTION_RE, find_references, reference_pairs
from mage_gym.graph.schema import Element, Page


def _page(i: int, footer: str = "") -> Page:
    return Page(node_id=f"d:p{i}", index=i, width=600, height=800, text="", summary="", footer_text=footer)


def _doc(specs: list[tuple[int, str, str]], footers: list[str]) -> tuple[list[Page], list[Element]]:
    pages = [_page(i, f) for i, f in enumerate(footers)]
    per_page: dict[int, int] = {}
    els = []
    for pos, (page, etype, text) in enumerate(specs):
        idx = per_page.get(page, 0)
        per_page[page] = idx + 1
        els.append(Element(node_id=f"d:p{page}:e{idx}", page=page, index=idx, type=etype, bbox=(0, 0, 1, 0.1),
                           text=text, summary=text[:40], reading_order=pos))
    return pages, els


def test_mention_pattern_finds_the_documented_forms() -> None:
    text = ("As Fig. 3 and Figure 4b show, Table 2 (see Section 4.1, Appendix B, Note 7 and Exhibit 10) "
            "is on page 12.")
    found = [(m["label"], m["num"]) for m in MENTION_RE.finditer(text)]
    assert found == [("Fig", "3"), ("Figure", "4b"), ("Table", "2"), ("Section", "4.1"), ("Appendix", "B"),
                     ("Note", "7"), ("Exhibit", "10"), ("page", "12")]
    assert not list(MENTION_RE.finditer("we note that tables were 12 pages long"))


def test_mentions_link_to_the_defining_caption_heading_and_printed_page() -> None:
    specs = [
        (0, "paragraph", "Revenue grew, see Figure 3 and Note 7; details in Section 2.1 and on page 14."),
        (0, "paragraph", "Table 9 is not defined anywhere."),
        (1, "title", "2.1 Regional results"),
        (1, "caption", "Figure 3: Revenue by region"),
        (1, "chart", "bars"),
        (2, "title", "NOTE 7 - DEBT"),
        (2, "paragraph", "Figure 3 repeats here as text mention."),
    ]
    pages, els = _doc(specs, footers=["12", "13", "14"])
    n = len(pages)
    ms = find_references(pages, els)
    by = {(m.source, m.label, m.number): m.target for m in ms}
    assert by[(n + 0, "figure", "3")] == n + 3
    assert by[(n + 0, "note", "7")] == n + 5
    assert by[(n + 0, "section", "2.1")] == n + 2
    assert by[(n + 0, "page", "14")] == 2  # the page whose footer prints 14
    assert by[(n + 1, "table", "9")] == -1  # found, not linked
    assert (n + 3, "figure", "3") not in by  # a caption's own label is a definition, not a mention
    assert by[(n + 6, "figure", "3")] == n + 3
    src, dst = reference_pairs(pages, els)
    assert len(src) == len(dst) == 5 and all(s != d for s, d in zip(src, dst))


def test_ambiguous_printed_labels_and_counts_are_not_links() -> None:
    pages, els = _doc([(0, "paragraph", "The report has 40 pages; see page 5.")], footers=["5", "5"])
    ms = find_references(pages, els)
    assert [(m.label, m.target) for m in ms] == [("page", -1)]  # two pages print 5: no unique target


def test_a_note_paragraph_defines_its_label_and_a_wrapped_line_does_not() -> None:
    specs = [
        (0, "paragraph", "Debt is described in Note 7; the limits are in Section 6.1."),
        (1, "paragraph", "Section 6.1 and shall end on the date specified in this subsection."),  # a wrapped line
        (1, "paragraph", "Note 7. Debt Obligations were refinanced in May."),  # a note opening with its label
    ]
    pages, els = _doc(specs, footers=["1", "2"])
    n = len(pages)
    by = {(m.source, m.label): m.target for m in find_references(pages, els)}
    assert by[(n + 0, "note")] == n + 2
    assert by[(n + 0, "section")] == -1
    assert (n + 2, "note") not in by  # the note's own label is its definition, not a mention
    assert (n + 1, "section") in by  # a line opening "Section 6.1 and ..." still mentions it


def test_mentions_of_other_documents_are_found_but_never_linked() -> None:
    specs = [
        (0, "paragraph", "Filed as Exhibit 10.3 to the Quarterly Report on Form 10-Q. See Note 2 of our 2020 Form "
                         "10-K and Note 2 of this Form 10-Q; see pages 8-32 of the 2020 Form 10-K; Code Section 409A."),
        (1, "caption", "Exhibit 10.3"),
        (1, "title", "Note 2 - Leases"),
    ]
    pages, els = _doc(specs, footers=["1", "2"])
    ms = find_references(pages, els)
    got = [(m.text, m.external, m.target) for m in ms]
    n = len(pages)
    assert got == [("Exhibit 10.3", True, -1), ("Note 2", True, -1), ("Note 2", False, n + 2),
                   ("pages 8", True, -1), ("Section 409A", True, -1)]
    assert [els[m.source - n].text[m.start:m.start + len(m.text)] for m in ms] == [m.text for m in ms]


def test_page_totals_are_not_labels_and_letters_must_be_capitals() -> None:
    pages, els = _doc([(0, "paragraph", "Details appear on page 3; in this section a plan is set out.")],
                      footers=["Page 1 of 3", "Page 2 of 3", "Page 3 of 3"])
    ms = find_references(pages, els)
    assert [(m.label, m.number, m.target) for m in ms] == [("page", "3", 2)]


def test_a_table_of_contents_line_loses_to_the_heading_it_lists() -> None:
    specs = [
        (0, "paragraph", "Note 9. Goodwill and Intangible Assets 63"),  # contents line, near the mention
        (0, "paragraph", "Impairments are discussed in Note 9."),
        (3, "paragraph", "Note 9. Goodwill and Intangible Assets were tested in the fourth quarter."),
    ]
    pages, els = _doc(specs, footers=["1", "2", "3", "4"])
    n = len(pages)
    assert [(m.source, m.target) for m in find_references(pages, els)] == [(n + 1, n + 2)]


def test_bare_numbered_headings_define_notes_and_sections_only_as_a_fallback() -> None:
    specs = [
        (0, "paragraph", "Charges are described in Note 4; service is defined in Section 3.3 and Note 5."),
        (0, "list", "4. The fourth priority is to build the capabilities necessary to deliver on our plans."),
        (1, "list", "4. Restructuring Charges"),
        (1, "paragraph", "3.3 Credited Service: The amount of a pension depends on service."),
        (2, "list", "5. Leases"),
        (2, "title", "Note 5 - Leases and Rentals"),
    ]
    pages, els = _doc(specs, footers=["1", "2", "3"])
    n = len(pages)
    by = {(m.label, m.number): m.target for m in find_references(pages, els)}
    assert by[("note", "4")] == n + 2  # the long numbered list item is no heading
    assert by[("section", "3.3")] == n + 3
    assert by[("note", "5")] == n + 5  # an explicit "Note 5" heading wins over the bare "5. Leases"


def test_statute_sections_and_titled_notes_of_other_filings_are_external() -> None:
    specs = [
        (0, "paragraph", "Exempt under Section 409A and section 162(m) of the Code; see Note 10, Goodwill, in our "
                         "Annual Report on Form 10-K, and Section 2.1."),
        (1, "paragraph", "Section 409A. For this purpose the plan is exempt."),
        (1, "title", "Note 10. Income Taxes"),
        (1, "title", "2.1 Definitions"),
    ]
    pages, els = _doc(specs, footers=["1", "2"])
    n = len(pages)
    got = [(m.text, m.external, m.target) for m in find_references(pages, els)]
    assert got == [("Section 409A", True, -1), ("section 162", True, -1), ("Note 10", True, -1),
                   ("Section 2.1", False, n + 3)]


def test_paper_conventions_fused_captions_panels_and_lettered_appendices() -> None:
    specs = [
        (0, "title", "A Study of Weak Supervision"),  # the paper's title: no appendix
        (0, "paragraph", "Results are in Table 3 and Figure 8c; details in Appendix B."),
        (1, "paragraph", "Accuracy 16.0 Table 3:Citation quality of the models"),  # a caption fused mid-text
        (1, "paragraph", "Figure 8:Strong models overfit to the weak labels."),
        (3, "title", "B Details of the Setup"),
    ]
    pages, els = _doc(specs, footers=["1", "2", "3", "4"])
    n = len(pages)
    got = [(m.source, m.label, m.target) for m in find_references(pages, els)]
    assert got == [(n + 1, "table", n + 2), (n + 1, "figure", n + 3), (n + 1, "appendix", n + 4)]
