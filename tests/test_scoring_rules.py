"""The scorers' helpers and rules at their edges, written out by hand (mutation survivors of mage_gym.scoring).

Each case is a rule a reported accuracy rests on: how a list answer is split, which gold strings need an exact
match, how a number is read, what counts as "not answerable", and the per-benchmark rules built on them.
"""
from __future__ import annotations

import functools
import random

import pytest

from mage_gym.scoring import text as T


# --- edit distance and ANLS ------------------------------------------------------------------------------------


def _edit_distance(a: str, b: str) -> int:
    """The textbook recursion, written independently of the module's two-row table."""
    @functools.lru_cache(maxsize=None)
    def d(i: int, j: int) -> int:
        if i == 0 or j == 0:
            return i + j
        return min(d(i - 1, j) + 1, d(i, j - 1) + 1, d(i - 1, j - 1) + (a[i - 1] != b[j - 1]))
    return d(len(a), len(b))


def test_levenshtein_is_the_edit_distance_on_every_pair_of_short_strings() -> None:
    rng = random.Random(0)
    words = ["", "a", "b", "ab", "ba", "abc", "cab", "bab", "abcb", "xaxbx"]
    words += ["".join(rng.choice("abc") for _ in range(rng.randint(1, 7))) for _ in range(30)]
    for a in words:
        for b in words:
            assert T.levenshtein(a, b) == _edit_distance(a, b), (a, b)
    assert T.levenshtein("b", "ab") == 1 and T.levenshtein("ab", "b") == 1


def test_decimals_read_pythons_float_repr() -> None:
    assert T._decimals(0.054) == 3 and T._decimals(12.0) == 1 and T._decimals(1e-05) == 3 and T._decimals(100) == 3


def test_float_match_percent_forms_and_the_coarser_precision() -> None:
    assert T.float_match(50.0, 0.50495)  # gold 50 (%) as a fraction, within 1 % of 0.5
    assert T.float_match(0.5, 49.51)  # gold 0.5 as a percent, within 1 % of 50
    assert not T.float_match(50.0, 0.52) and not T.float_match(0.5, 48.0)
    assert T.float_match(0.054, 0.05)  # both rounded to 2 decimals (the coarser precision)
    assert T.float_match(0.05, 0.054) and not T.float_match(0.05, 0.056)


# --- exact-match categories --------------------------------------------------------------------------------------


@pytest.mark.parametrize("gold", ["https://a.org/x", "train.py", "notebook.ipynb", "page 12", "12", "3-4",
                                  "01983 873655", "9 a.m.", "5 p.m.", "2021-05-06", "2021 05", "2021-05",
                                  "someone@example.com"])
def test_each_exact_match_category_on_its_own(gold: str) -> None:
    assert T.needs_exact_match(gold)


@pytest.mark.parametrize("gold", ["python", "a page", "12.5", "ipynb notes", "am", "someone at example"])
def test_strings_outside_the_exact_match_categories(gold: str) -> None:
    assert not T.needs_exact_match(gold)


# --- numbers -------------------------------------------------------------------------------------------------------


def test_read_number_values_and_refusals() -> None:
    assert T.read_number(3) == 3.0 and T.read_number(2.5) == 2.5 and T.read_number(True) is None
    assert T.read_number(float("inf")) is None and T.read_number(float("nan")) is None
    assert T.read_number("1e999") is None and T.read_number("about 1e999 people") is None  # not finite
    assert T.read_number("\u22125") == -5.0 and T.read_number("a loss of \u22125 units") == -5.0  # the minus sign
    assert T.read_number("12 M2") == 12.0  # a unit written in capitals (m2 holds a digit)
    assert T.read_number("$1,577,000") == 1577000.0 and T.read_number("5.2 million") == 5.2
    assert T.read_number("12%") == 12.0 and T.read_number("3 and 4") is None and T.read_number("none") is None
    # a sentence stop after the number goes; a leading decimal point is the number's own (".5" was read as 5.0)
    assert T.read_number(".5") == 0.5 and T.read_number("-.5;") == -0.5 and T.read_number("5.") == 5.0


# --- lists -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("body, items", [
    ("a, 'b, c', d", ["a", "b, c", "d"]),
    ("'Iran's oil', gas", ["Iran's oil", "gas"]),  # an apostrophe inside an item does not close it
    ("'abc, d", ["abc, d"]),  # unterminated: the rest is the item
    (" a ,, b , ", ["a", "b"]),
    ("a, 'b'", ["a", "b"]),
    ('"x, y", z', ["x, y", "z"]),
    ("'b' , c", ["b", "c"]),  # spaces between the closing quote and the comma
    ("'b'  ,  'c' ,d", ["b", "c", "d"]),
    ("''", []),
    ("'a'b, c", ["a'b, c"]),  # a quote not followed by a comma or the end does not close
    ("x, 'y", ["x", "y"]),
    ("'a', 'b', 'c'", ["a", "b", "c"]),
    ("'a,b','c,d'", ["a,b", "c,d"]),
    ("   ", []),
    ("a", ["a"]),
    ("a,b,c", ["a", "b", "c"]),
    ("X-ray, MRI", ["X-ray", "MRI"]),  # only a quote opens a quoted item
    ("'James'', x", ["James'", "x"]),  # a quote right after a quote that does not close
])
def test_split_items(body: str, items: list[str]) -> None:
    assert T.split_items(body) == items


def test_literal_lists_bracket_items_and_item_text() -> None:
    assert T.bracket_items("[1, 'a, b']") == [1, "a, b"]  # a literal keeps its types
    assert T.bracket_items("[red, gray]") == ["red", "gray"]
    assert T.literal_list("5") is None and T.literal_list("'ab'") is None and T.literal_list("(1, 2)") == [1, 2]
    at_limit = "[" + ",".join(["1"] * 9999) + " ]"  # 20,000 characters: still read as a literal
    assert len(at_limit) == T._MAX_LITERAL_CHARS and T.literal_list(at_limit) == [1] * 9999
    assert T.literal_list(at_limit[:-1] + " ]") is None  # one character more: left to the splitter
    assert T.item_text({"a": 1, "b": "x"}) == "1-x" and T.item_text(3) == "3"


@pytest.mark.parametrize("text, expected, items", [
    ("- a\n- b", 2, ["a", "b"]),  # one item a line, bullets stripped
    ("- X-ray\n- MRI", 2, ["X-ray", "MRI"]),
    ("a\n-\nb", 2, ["a", "b"]),  # a bullet alone is no item
    ("X\nY", 2, ["X", "Y"]),
    ("a\nb", 2, ["a", "b"]),
    ("a, b; c", 2, ["a, b", "c"]),  # the semicolon split gives the expected count first
    ("a; b, c and d", 3, ["a; b", "c", "d"]),  # "and" in the last comma item
    ("a;x, b, c and d", 4, ["a;x", "b", "c", "d"]),
    ("a, b; c", 3, ["a", "b", "c"]),  # every separator at once
    ("a; b and c", 3, ["a", "b", "c"]),
    ("a, b", 5, ["a", "b"]),  # no split gives 5: the comma split
    ("a and b", 1, ["a and b"]),
])
def test_split_unbracketed(text: str, expected: int, items: list[str]) -> None:
    assert T.split_unbracketed(text, expected) == items


# --- not answerable ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("answer", ["**Not answerable**", "It can\u2019t be determined from the document.",
                                    "\u2018Not answerable\u2019", "'Not answerable'", "Answer: 'Not answerable'",
                                    "Answer: Not answerable", "It can  not be determined.",
                                    "'Answer: Not answerable'"])
def test_not_answerable_through_markup_quotes_labels_and_spacing(answer: str) -> None:
    assert T.is_not_answerable(answer)


@pytest.mark.parametrize("answer", ["", "  ", '""', "**", "None", "No", "12"])
def test_empty_or_valued_answers_are_not_refusals(answer: str) -> None:
    assert not T.is_not_answerable(answer)


# --- MMLongBench-Doc -------------------------------------------------------------------------------------------------


def test_mmlongbench_rules_at_their_edges() -> None:
    from mage_gym.scoring.mmlongbench import best_pairing, pred_items_lenient, score_mmlongbench as s

    assert s("14:04 CET", "14:04 CET", "float", "lenient") == 1.0  # a Float gold that is no number: as text
    assert s("5", "abc", "float", "official") == 0.0  # an unscoreable gold scores 0 (the official code raises)
    assert s("[]", "[]", "list", "official") == 1.0 and s("[]", "[]", "list", "lenient") == 1.0
    assert best_pairing(["a"], ["a", "b"]) == [1.0, 0.0]  # a gold item no prediction is left for scores 0
    assert best_pairing(["paris", "rome", "pari"], ["paris", "rome"]) == [1.0, 1.0]  # a paired gold keeps its best
    assert best_pairing(["paris"], ["paris", "paris"]) == [1.0, 0.0]  # a prediction pairs once
    assert pred_items_lenient("  ", 2) == [] and pred_items_lenient("[a, b].", 2) == ["a", "b"]
    # only sentence punctuation goes after a "[...]" answer, not the last item's own letters (here unclosed)
    assert pred_items_lenient("[Windows, Mac OS X", 2) == ["Windows", "Mac OS X"]
    # gold format None: any refusal is right, whatever the gold text; a refusal of an answerable gold scores 0
    assert s("The document does not say", "", "none", "lenient") == 1.0
    assert s("Not answerable", "Not applicable", "str", "lenient") == 0.0


@pytest.mark.parametrize("pred, gold", [
    ("\u2018Paris\u2019", "Paris"), ("\u201cParis\u201d", "Paris"), ("Iran\u2019s", "Iran's"),
    ("'Paris'.", "Paris"),  # a sentence stop after the closing quote
    ("FOX.", "fox"), ("Paris. (the capital)", "Paris"),  # a stop before an aside the cleaning removes
])
def test_mmlongbench_lenient_cleaning(pred: str, gold: str) -> None:
    from mage_gym.scoring.mmlongbench import score_mmlongbench

    assert score_mmlongbench(pred, gold, "str", "lenient") == 1.0


# --- LongDocURL ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("pred, gold, fmt, mode, expected", [
    ("12", "12 kg", "str", "lenient", 1.0),  # a unit after a number goes
    ("5", "\u00a35", "str", "lenient", 1.0), ("5", "$5", "str", "official", 1.0), ("5", "\u00a35", "str", "official", 1.0),
    ("Smith John", "Smith, John", "str", "lenient", 1.0),  # commas go, as in the official cleaning
    ("5", "5.0", "float", "lenient", 1.0), ("5.0", "5", "float", "lenient", 1.0),
    ("14:04 CET", "14:04 CET", "float", "lenient", 1.0), ("14:04 CET", "14:04 CET", "int", "lenient", 1.0),
    ("abc", "5", "float", "official", 0.0), ("many", "5", "int", "lenient", 0.0), ("6", "5", "int", "lenient", 0.0),
    ("abc", "abc", "list", "lenient", 1.0),  # a List gold that is no list: one item
    ("abc", "", "int", "official", 1.0),  # the official code: unparseable on both sides compares "" with ""
    ("a and b", "['a', 'b']", "list", "lenient", 1.0), ("", "['a']", "list", "lenient", 0.0),
    ("[]", "[]", "list", "lenient", 1.0),
    ("['2022-06', '2021-05']", "['2021-05', '2022-06']", "list", "official", 0.0),  # exact items: in order
    ("['2.5', '1.5']", "['1.5', '2.5']", "list", "official", 0.0), ("['1.5', '2.5']", "['1.5', '2.5']", "list",
                                                                      "official", 1.0),
    ("5", 5, "list", "official", 1.0), ("[red, gray]", "[red, gray]", "list", "official", 1.0),
    ("2021-05", "2021-05", "str", "official", 1.0), ("2021-06", "2021-05", "str", "official", 0.0),
    ("2021-05", "2021-05", "str", "lenient", 1.0), ("2021-06", "2021-05", "str", "lenient", 0.0),
    ("Paris", "Paris (France)", "str", "official", 1.0), ("Paris", "'Paris'", "str", "official", 1.0),
    ("The document does not say", "", "none", "lenient", 1.0), ("Not answerable", "Paris", "str", "lenient", 0.0),
    ("Not answerable", "Not applicable", "str", "lenient", 0.0),
])
def test_longdocurl_rules_at_their_edges(pred: str, gold, fmt: str, mode: str, expected: float) -> None:
    from mage_gym.scoring.longdocurl import score_longdocurl

    assert score_longdocurl(pred, gold, fmt, mode) == expected


# --- FinanceBench --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("pred, gold, expected", [
    ("The figure is 2021", "2021", 1.0), ("The figure is 2021", "2021 USD", 1.0),  # a bare (year-like) number
    ("The figure is 2021", "2021 $", 1.0),
    ("about 12", "12 units", 1.0), ("about 5000", "5000 units", 1.0),  # text golds: every number other than years
    ("5", "5 staff in 1900", 1.0), ("5", "5 staff in 2100", 1.0), ("2101", "2101 units", 1.0),
    ("$1,800 million", "$1.8 bn", 1.0), ("1.8 BN", "1800 million", 1.0),  # scale words on either side
    ("10", "5", 0.0), ("500", "5", 0.0),  # no percent: no x100
    ("277.3", "2.8%", 1.0),  # a percent: x100 within 1 %
    ("\u2018Corporate\u2019", "Corporate", 1.0), ("\u201cCorporate\u201d", "Corporate", 1.0),
    ("Not answerable", "Not answerable.", 1.0), ("The document does not say", "Not answerable", 1.0),
    ("The document does not say", "Not answerable.", 1.0),
    ("2019", "Founded in 2019", 0.0),  # a year in a text gold is no key: the bare year does not match the sentence
])
def test_financebench_rules_at_their_edges(pred: str, gold: str, expected: float) -> None:
    from mage_gym.scoring.financebench import score_financebench

    assert score_financebench(pred, gold) == expected


def test_financebench_tolerance_is_one_percent_of_the_gold_inclusive() -> None:
    from mage_gym.scoring.financebench import _close

    assert _close(100.0, 101.0) and not _close(100.0, 101.01) and _close(0.0, 1e-12) and not _close(0.0, 1e-11)


# --- the entry points ----------------------------------------------------------------------------------------------


def test_a_missing_gold_is_the_empty_answer() -> None:
    from mage_gym.scoring import score

    for bench in ("financebench", "mmlongbench", "longdocurl"):
        for pred in ("None", "XXXX", "anything"):
            assert score(pred, None, "Str", bench) == 0.0, (bench, pred)


def test_run_metrics_none_format_golds_precision_without_predictions_and_per_benchmark_mode() -> None:
    from mage_gym.scoring import ScoringError, canonical_format, run_metrics

    m = run_metrics([{"gold": "n/a", "answer_format": "None", "pred": "Not answerable"},
                     {"gold": "Paris", "answer_format": "Str", "pred": "Not answerable"}])
    assert m["n_answerable"] == 1 and m["n_predicted_answerable"] == 0 and m["precision"] == 0.0
    paraphrase = run_metrics([{"gold": "Paris", "answer_format": "Str", "pred": "The document does not say"}])
    assert paraphrase["n_predicted_answerable"] == 1  # official mode: only the exact phrase abstains
    assert paraphrase["by_benchmark"]["mmlongbench"]["n_predicted_answerable"] == 1
    with pytest.raises(ScoringError, match=r"expected one of Int/Integer, Float, Str/String, List, None$"):
        canonical_format("Date")
