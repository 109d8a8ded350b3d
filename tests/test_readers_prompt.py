"""Reader prompt, image interleaving, answer extraction and the reader factory (no models)."""
from __future__ import annotations

import pytest

from mage_gym.readers import NOT_ANSWERABLE, PROMPT_VERSION, ReaderConfigError, get_reader
from mage_gym.readers.answer import extract, has_answer_block
from mage_gym.readers.base import RenderedImage, RenderedInput
from mage_gym.readers.generative import GenerativeReader
from mage_gym.readers.prompt import build_prompt, interleave


def _img(node_id: str, page: int = 0, kind: str = "page") -> RenderedImage:
    return RenderedImage(node_id=node_id, page=page, bbox=(0, 0, 1, 1), kind=kind, width=8, height=8,
                         _loader=lambda: None)


def _layout(parts) -> list[str]:
    """Parts as a readable list: text stays text, images become IMG:<node_id>."""
    return [p if isinstance(p, str) else f"IMG:{p.node_id}" for p in parts]


def test_prompt_has_all_sections_in_order_and_the_policy():
    rendered = RenderedInput(question="What was revenue in 2023?", xml="<evidence>x</evidence>", mode="text")
    prompt = build_prompt(rendered)
    text = prompt.user_text()
    heads = [text.index(h) for h in ("## Question", "## Evidence", "## Answer policy", "## Output")]
    assert heads == sorted(heads)
    assert "What was revenue in 2023?" in text.split("## Evidence")[0]
    assert "<evidence>x</evidence>" in text
    assert f"exactly: {NOT_ANSWERABLE}" in text
    assert "<answer>" in text and "</answer>" in text
    assert "careful reader" in prompt.system
    assert prompt.version == PROMPT_VERSION and PROMPT_VERSION


def test_images_follow_the_tags_that_reference_them_in_xml_order():
    xml = ('<evidence><page id="d:p1"><image ref="d:p1"/><element id="d:p1:e0">t</element></page>'
           '<page id="d:p0"><image ref="d:p0"/></page></evidence>')
    parts = interleave(xml, [_img("d:p0"), _img("d:p1", 1)])
    layout = _layout(parts)
    assert layout == ['<evidence><page id="d:p1"><image ref="d:p1"/>', "IMG:d:p1",
                      '<element id="d:p1:e0">t</element></page><page id="d:p0"><image ref="d:p0"/>',
                      "IMG:d:p0", "</page></evidence>"]
    assert "".join(p for p in parts if isinstance(p, str)) == xml  # the XML itself is untouched


def test_image_tag_preferred_over_other_tags_naming_the_node():
    xml = '<crop ref="d:p0:e1">caption</crop><x/><image ref="d:p0:e1" kind="crop"/><tail/>'
    assert _layout(interleave(xml, [_img("d:p0:e1", kind="crop")])) == [
        '<crop ref="d:p0:e1">caption</crop><x/><image ref="d:p0:e1" kind="crop"/>', "IMG:d:p0:e1", "<tail/>"]


def test_escaped_and_single_quoted_refs_match():
    xml = "<image ref='a&amp;b:p0'/><image ref=\"c:p2\"/>"
    assert _layout(interleave(xml, [_img("a&b:p0"), _img("c:p2", 2)])) == [
        "<image ref='a&amp;b:p0'/>", "IMG:a&b:p0", '<image ref="c:p2"/>', "IMG:c:p2"]


def test_unreferenced_images_are_appended_with_a_label_in_input_order():
    xml = '<evidence><image ref="d:p0"/></evidence>'
    parts = interleave(xml, [_img("d:p5", 5), _img("d:p0"), _img("d:p9", 9)])
    layout = _layout(parts)
    assert layout[:3] == ['<evidence><image ref="d:p0"/>', "IMG:d:p0", "</evidence>"
                          '\n<image ref="d:p5" page="6" kind="page"/>\n']
    assert layout[3:] == ["IMG:d:p5", '\n<image ref="d:p9" page="10" kind="page"/>\n', "IMG:d:p9"]


def test_two_images_of_one_node_use_successive_tags():
    xml = '<image ref="n"/>A<image ref="n"/>B'
    assert _layout(interleave(xml, [_img("n"), _img("n")])) == ['<image ref="n"/>', "IMG:n", 'A<image ref="n"/>',
                                                                "IMG:n", "B"]


def test_text_prompt_drops_images_but_keeps_placeholders():
    rendered = RenderedInput(question="q?", xml='<image ref="d:p0"/>', images=(_img("d:p0"),))
    assert build_prompt(rendered, include_images=False).images == ()
    assert len(build_prompt(rendered, include_images=True).images) == 1
    assert '<image ref="d:p0"/>' in build_prompt(rendered, include_images=False).user_text()


def test_bad_prompt_input_is_rejected():
    with pytest.raises(ValueError):
        build_prompt(RenderedInput(question="  ", xml="<e/>"))
    with pytest.raises(TypeError):
        build_prompt({"question": "q", "xml": ""})  # type: ignore[arg-type]


def test_answer_block_extraction():
    assert extract("Reasoning here.\n<answer>42</answer>") == "42"
    assert extract("<answer>first</answer> then <answer>Paris</answer>") == "Paris"
    assert has_answer_block("x <answer>y</answer>") and not has_answer_block("just text")
    assert isinstance(extract(""), str)


class _ScriptedReader(GenerativeReader):
    """Replies from a script; records prompts (to check what the model was shown)."""

    name = "scripted"
    model_id = "script"

    def __init__(self, replies: list[str], llm_extract: bool) -> None:
        self.replies = list(replies)
        self.prompts = []
        self.llm_extract = llm_extract

    def generate(self, prompt):
        self.prompts.append(prompt)
        return self.replies.pop(0)


def test_llm_extraction_only_when_the_block_is_missing_and_sees_question_and_reply_only():
    rendered = RenderedInput(question="Which city?", xml="<e>Paris is the capital.</e>")
    reader = _ScriptedReader(["The city is Paris, I think.", "<answer>Paris</answer>"], llm_extract=True)
    out = reader.read(rendered)
    assert out.answer == "Paris" and out.raw == "The city is Paris, I think."
    assert len(reader.prompts) == 2
    second = reader.prompts[1].user_text()
    assert "Which city?" in second and "The city is Paris, I think." in second
    assert "Paris is the capital." not in second  # evidence is not re-sent, and gold never exists here

    direct = _ScriptedReader(["<answer>Rome</answer>"], llm_extract=True)
    assert direct.read(rendered).answer == "Rome" and len(direct.prompts) == 1


def test_factory_rejects_unknown_names_missing_models_and_bad_options(tmp_path):
    with pytest.raises(ReaderConfigError, match="unknown reader"):
        get_reader("nope")
    with pytest.raises(ReaderConfigError, match="not a local directory"):
        get_reader("hf", model=str(tmp_path / "missing"))
    with pytest.raises(ReaderConfigError, match="no config.json"):
        get_reader("hf", model=str(tmp_path))
    with pytest.raises(ReaderConfigError, match="openai reader backend .*'no_such_option' is not an option"):
        get_reader("openai", model="m", no_such_option=1)
    with pytest.raises(ReaderConfigError, match="base_url"):
        get_reader("openai", model="m", base_url="ftp://x")


def test_factory_wraps_in_cache_when_asked(tmp_path):
    reader = get_reader("openai", model="m", base_url="http://127.0.0.1:9/v1", cache=tmp_path / "c.sqlite")
    assert type(reader).__name__ == "CachedReader" and reader.name == "openai" and reader.answers
