"""The persistent reader-response cache: hits, key sensitivity, processes, resume."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from PIL import Image

from mage_gym.readers.base import RenderedImage, RenderedInput, ReaderOutput
from mage_gym.readers.cache import CachedReader, ResponseCache
from mage_gym.readers.errors import ReaderError
from mage_gym.readers.prompt import PROMPT_VERSION

REPO = Path(__file__).resolve().parents[1]

# The same fake reader is defined in child processes (cross-process tests), so
# it lives in a source string executed here and there.
FAKE_READER_SRC = textwrap.dedent('''
    from mage_gym.readers.base import ReaderOutput

    class CountingReader:
        """Deterministic fake backend: answers from the question; counts calls."""
        name = "fake"
        answers = True

        def __init__(self, model_id="m1", prompt_version=None, uses_images=True, fail_on=()):
            from mage_gym.readers.prompt import PROMPT_VERSION
            self.model_id = model_id
            self.prompt_version = prompt_version or PROMPT_VERSION
            self.uses_images = uses_images
            self.fail_on = set(fail_on)
            self.calls = []

        def cache_identity(self):
            return {"backend": self.name, "model": self.model_id, "prompt_version": self.prompt_version}

        def read(self, rendered):
            self.calls.append(rendered.question)
            if rendered.question in self.fail_on:
                from mage_gym.readers.errors import ReaderError
                raise ReaderError("backend went away: " + rendered.question)
            for img in rendered.images:
                img.load()
            return ReaderOutput(answer="ans:" + rendered.question, raw="<answer>ans</answer>", seconds=0.5)
''')
_ns: dict = {}
exec(FAKE_READER_SRC, _ns)
CountingReader = _ns["CountingReader"]


def _image(color: tuple[int, int, int], counter: list | None = None) -> RenderedImage:
    def load():
        if counter is not None:
            counter.append(1)
        return Image.new("RGB", (16, 12), color)

    return RenderedImage(node_id="d:p0", page=0, bbox=(0, 0, 1, 1), kind="page", width=16, height=12,
                         _loader=load)


def _input(question: str = "q1", color=(255, 255, 255), counter=None, **kw) -> RenderedInput:
    return RenderedInput(question=question, xml='<evidence><image ref="d:p0"/>text</evidence>',
                         images=(_image(color, counter),), **kw)


def test_miss_then_hit_returns_the_stored_reply(tmp_path):
    inner = CountingReader()
    reader = CachedReader(inner, tmp_path / "c.sqlite")
    first = reader.read(_input())
    second = reader.read(_input())
    assert inner.calls == ["q1"]
    assert not first.cached and second.cached
    assert (second.answer, second.raw) == (first.answer, first.raw)
    assert (reader.hits, reader.misses) == (1, 1)
    assert reader.cache.journal_mode() == "wal"


def test_key_ignores_bookkeeping_fields_but_not_content(tmp_path):
    reader = CachedReader(CountingReader(), tmp_path / "c.sqlite")
    base = reader.key(_input())
    assert reader.key(_input(node_ids=("x",), text_tokens=99)) == base  # not part of what the model sees
    assert reader.key(_input(question="q2")) != base
    assert reader.key(RenderedInput(question="q1", xml="<evidence>other</evidence>",
                                    images=_input().images)) != base


def test_key_changes_with_one_pixel(tmp_path):
    reader = CachedReader(CountingReader(), tmp_path / "c.sqlite")
    assert reader.key(_input(color=(255, 255, 255))) != reader.key(_input(color=(255, 255, 254)))


def test_text_only_reader_key_ignores_pixels_and_never_loads_them(tmp_path):
    loads: list = []
    reader = CachedReader(CountingReader(uses_images=False), tmp_path / "c.sqlite")
    assert reader.key(_input(color=(0, 0, 0), counter=loads)) == reader.key(_input(color=(9, 9, 9)))
    assert loads == []


def test_key_changes_with_prompt_version_and_model(tmp_path):
    path = tmp_path / "c.sqlite"
    keys = {CachedReader(CountingReader(), path).key(_input()),
            CachedReader(CountingReader(prompt_version=PROMPT_VERSION + "-next"), path).key(_input()),
            CachedReader(CountingReader(model_id="m2"), path).key(_input())}
    assert len(keys) == 3
    old = CachedReader(CountingReader(), path)
    old.read(_input())
    bumped_inner = CountingReader(prompt_version=PROMPT_VERSION + "-next")
    assert not CachedReader(bumped_inner, path).read(_input()).cached
    assert bumped_inner.calls == ["q1"]


def test_identity_image_keys_skip_rendering_but_follow_the_request(tmp_path):
    loads: list = []
    reader = CachedReader(CountingReader(), tmp_path / "c.sqlite", image_key="identity")
    key = reader.key(_input(color=(0, 0, 0), counter=loads))
    assert loads == [] and key == reader.key(_input(color=(9, 9, 9)))
    bigger = _input()
    bigger = RenderedInput(question=bigger.question, xml=bigger.xml,
                           images=(RenderedImage("d:p0", 0, (0, 0, 1, 1), "page", 32, 24, _loader=lambda: None),))
    assert reader.key(bigger) != key
    with pytest.raises(ValueError):
        CachedReader(CountingReader(), tmp_path / "c.sqlite", image_key="nope")


def test_a_miss_loads_each_image_once(tmp_path):
    loads: list = []
    CachedReader(CountingReader(), tmp_path / "c.sqlite").read(_input(counter=loads))
    assert len(loads) == 1  # hashed for the key, then the same pixels reach the reader


def test_failures_are_not_cached(tmp_path):
    class ErrorReader(CountingReader):
        def read(self, rendered):
            self.calls.append(rendered.question)
            return ReaderOutput(answer=None, raw="", error="server down")

    inner = ErrorReader()
    reader = CachedReader(inner, tmp_path / "c.sqlite")
    reader.read(_input())
    reader.read(_input())
    assert inner.calls == ["q1", "q1"] and len(reader.cache) == 0


def _child(script: str, path: Path) -> subprocess.CompletedProcess:
    code = FAKE_READER_SRC + textwrap.dedent(script)
    return subprocess.run([sys.executable, "-c", code, str(path)], cwd=REPO, capture_output=True, text=True,
                          timeout=120, check=True)


CHILD_READ = '''
    import json, sys
    from PIL import Image
    from mage_gym.readers.base import RenderedImage, RenderedInput
    from mage_gym.readers.cache import CachedReader
    img = RenderedImage(node_id="d:p0", page=0, bbox=(0, 0, 1, 1), kind="page", width=16, height=12,
                        _loader=lambda: Image.new("RGB", (16, 12), (255, 255, 255)))
    inner = CountingReader()
    reader = CachedReader(inner, sys.argv[1])
    qs = sys.argv[2:] or ["q1"]
    outs = [reader.read(RenderedInput(question=q, xml='<evidence><image ref="d:p0"/>text</evidence>',
                                      images=(img,))) for q in qs]
    print(json.dumps({"calls": inner.calls, "cached": [o.cached for o in outs]}))
'''


def test_hit_across_processes(tmp_path):
    path = tmp_path / "c.sqlite"
    child = json.loads(_child(CHILD_READ, path).stdout)
    assert child == {"calls": ["q1"], "cached": [False]}
    inner = CountingReader()
    out = CachedReader(inner, path).read(_input())
    assert out.cached and out.answer == "ans:q1" and inner.calls == []
    again = json.loads(_child(CHILD_READ, path).stdout)  # and back: a new process hits too
    assert again == {"calls": [], "cached": [True]}


def test_concurrent_processes_write_without_losing_entries(tmp_path):
    path = tmp_path / "c.sqlite"
    ResponseCache(path).journal_mode()  # create the file in WAL mode first
    code = FAKE_READER_SRC + textwrap.dedent(CHILD_READ)
    procs = [subprocess.Popen([sys.executable, "-c", code, str(path), *[f"{tag}{i}" for i in range(40)]],
                              cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for tag in ("a", "b")]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    assert len(ResponseCache(path)) == 80


def test_interrupted_run_resumes_without_repeating_calls(tmp_path):
    path = tmp_path / "c.sqlite"
    inputs = [_input(question=f"q{i}") for i in range(5)]
    crashing = CountingReader(fail_on={"q3"})
    with pytest.raises(ReaderError):
        CachedReader(crashing, path).read_many(inputs)  # the run dies at q3
    assert crashing.calls == ["q0", "q1", "q2", "q3"]
    resumed_inner = CountingReader()
    resumed = CachedReader(resumed_inner, path).read_many(inputs)
    assert resumed_inner.calls == ["q3", "q4"]
    assert [o.cached for o in resumed] == [True, True, True, False, False]
    assert [o.answer for o in resumed] == [f"ans:q{i}" for i in range(5)]


def test_read_many_can_return_errors_in_place(tmp_path):
    reader = CachedReader(CountingReader(fail_on={"q1"}), tmp_path / "c.sqlite")
    outs = reader.read_many([_input(question=f"q{i}") for i in range(3)], return_errors=True)
    assert [o.answer for o in outs] == ["ans:q0", None, "ans:q2"]
    assert outs[1].error and "backend went away" in outs[1].error
