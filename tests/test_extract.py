"""Answer extraction from a reader's raw reply (mage_gym/readers/extract.py)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mage_gym.readers.extract import NOT_ANSWERABLE, extract_answer
from mage_gym.scoring import is_not_answerable, score

NA = NOT_ANSWERABLE


@pytest.mark.parametrize("raw, expected", [
    # the <answer> block the reader prompt asks for
    ("<answer>42</answer>", "42"),
    ("Reasoning about page 3.\n<answer> Paris </answer>", "Paris"),
    ("<ANSWER>y</ANSWER>", "y"),  # tags in any case
    ("<answer>x</answer> on reflection <answer>y</answer>", "y"),  # the last block wins
    ("<answer>your final answer</answer> ... <answer>7</answer>", "7"),  # prompt echo ignored
    ("<think>maybe <answer>1</answer></think><answer>2</answer>", "2"),  # reasoning dropped
    ("Looking at the table <answer>The answer", "The answer"),  # cut off before </answer>
    ("I think it is 5.\n<answer></answer>", "I think it is 5."),  # empty block: fall back
    ("<answer>Answer: 42</answer>", "42"),  # inner label dropped
    ("<answer>**42**</answer>", "42"),  # markdown emphasis dropped
    ('<answer>["a", "b"]</answer>', '["a", "b"]'),  # list literal kept as is
    ("<answer>\n- apples\n- pears\n</answer>", '["apples", "pears"]'),  # bullets -> list
    # normalisation
    ("<answer>  New\n  York  </answer>", "New York"),  # whitespace collapsed
    ("<answer>12.</answer>", "12"),  # full stop after a bare number
    ("<answer>U.S.</answer>", "U.S."),  # other full stops kept
    # fallbacks without a block
    ("Some reasoning.\nAnswer: 17", "17"),
    ("**Final Answer:** 3.5", "3.5"),
    ("So the answer is 12.", "12"),
    ("line one\n\nthe colour is red\n", "the colour is red"),  # last non-empty line
    ("", ""),
    (None, ""),
])
def test_extract_answer(raw, expected):
    assert extract_answer(raw) == expected


@pytest.mark.parametrize("raw", [
    "<answer>Not answerable</answer>",
    "<answer>Not answerable.</answer>",
    "**Not answerable**",
    "<answer>not answerable</answer>",
    "<answer>Unanswerable</answer>",
    "<answer>This question is unanswerable.</answer>",
    "<answer>Cannot be determined from the document.</answer>",
    "<answer>The answer cannot be determined from the provided pages.</answer>",
    "<answer>The document does not mention the revenue.</answer>",
    "<answer>The provided pages don't contain this information.</answer>",
    "<answer>It's not possible to determine the value.</answer>",
    "<answer>Insufficient information.</answer>",
    "<answer>There is not enough information to answer.</answer>",
    "<answer>Not mentioned in the document.</answer>",
    "<answer>I cannot find this in the evidence.</answer>",
    "<answer>Information not available.</answer>",
    "Answer: The text does not specify it.",
])
def test_not_answerable_variants_map_to_one_string(raw):
    assert extract_answer(raw) == NA


@pytest.mark.parametrize("raw, expected", [
    ("<answer>No</answer>", "No"),  # a yes/no answer, not a refusal
    ("<answer>None</answer>", "None"),
    ("<answer>N/A</answer>", "N/A"),  # a real MMLongBench gold value
    ("<answer>Not applicable</answer>", "Not applicable"),
    ("<answer>Approximately 5, cannot be determined exactly</answer>",
     "Approximately 5, cannot be determined exactly"),  # a value first: kept
    ("<answer>No entities found</answer>", "No entities found"),
])
def test_values_that_look_negative_are_kept(raw, expected):
    assert extract_answer(raw) == expected


def test_extracted_answers_score_as_the_benchmark_expects():
    # extraction + scoring together: what the env does at stop
    assert score(extract_answer("... <answer>Unanswerable</answer>"), NA, "None") == 1.0
    assert score(extract_answer("<answer>\n- gray\n- red\n</answer>"), "['red', 'gray']", "List") == 1.0
    assert score(extract_answer("The answer is 12."), "12", "Int") == 1.0


def test_is_not_answerable_is_shared_with_scoring():
    assert is_not_answerable("The document does not say.")
    assert not is_not_answerable("Yes")
    assert not is_not_answerable(None)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_extract_never_raises_and_is_normalised(raw):
    out = extract_answer(raw)
    assert isinstance(out, str)
    assert out == out.strip()
    assert "  " not in out and "\n" not in out or out.startswith("[")
