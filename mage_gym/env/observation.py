"""The numeric Dict observation for learned policies (what SB3's MultiInputPolicy accepts).

Keys:
- ``nodes`` float32 [K, F]: one row per slot (zeros for empty slots), columns
  :data:`NODE_FEATURES`: static graph features (type one-hot, page position,
  bbox, area, section depth, heading level, content size, table flag, OCR
  flag, page density), question relevance (fused and per retriever,
  percentiles), question-aware columns (best element relevance on the node's
  page, type matches the question's cues, page prints a page label the
  question names; :mod:`mage_gym.env.question_cues`), state one-hot,
  relation to the working set by edge kind, activation position, whether the
  node's page is activated, the relevance of the best working-set node
  linking to it (``linker_rel``: 1 - its rank / n in the episode's fused
  relevance order, 0 when no working-set node links to it), then one column
  computed per step for the filled slots only: the distance from its page to
  the nearest active page (``active_page_distance``, log-scaled by the
  document's length: 0 on an active page, 1 at the far end or when no page
  is active);
- ``slot_mask`` float32 [K]: 1 where the slot holds a node;
- ``budget`` float32 [4]: remaining round activations / m, activations / M,
  opens / B, rounds / T;
- ``progress`` float32 [2]: round / T and step / step cap;
- ``question`` float32 [384]: the question embedding (zero-padded or cut to 384);
- ``text`` (opt-in, off by default): the text view for LLM agents, a
  :class:`UnicodeText` string (any Unicode character; cut at
  :data:`TEXT_MAX_CHARS`).

Everything is in [0, 1] except the question vector ([-1, 1]). No gold field
(answer, evidence, format, flags) is an input to any of these. The default
keys are :data:`NUMERIC_KEYS`, exactly what SB3's ``MultiInputPolicy`` accepts;
an env built with ``observation_keys=NUMERIC_KEYS + ("text",)`` adds the text
(NLE's ``observation_keys`` idea).
"""
from __future__ import annotations

import string
from typing import Sequence

import numpy as np
from gymnasium import spaces

from mage_gym.cache import Cache
from mage_gym.env.graph_index import STATIC_FEATURES, GraphIndex
from mage_gym.env.question_cues import QUESTION_FEATURES, question_columns
from mage_gym.env.relevance import N_RELEVANCE, EpisodeRelevance
from mage_gym.env.state import DYN_LINKER, DYN_PAGEACT, N_DYN, STATE_NAMES, EvidenceState
from mage_gym.graph.schema import EDGE_KINDS

QUESTION_DIM = 384
NODE_FEATURES: tuple[str, ...] = (
    STATIC_FEATURES
    + ("rel_fused",) + tuple(f"rel_component_{i}" for i in range(1, N_RELEVANCE))
    + QUESTION_FEATURES
    + tuple(f"state_{s}" for s in STATE_NAMES)
    + tuple(f"linked_by_{k}" for k in EDGE_KINDS)
    + ("activation_position", "page_activated")
    + ("linker_rel", "active_page_distance")
)
N_STATIC = len(STATIC_FEATURES)
_REL0 = N_STATIC
_Q0 = _REL0 + N_RELEVANCE
_STATE0 = _Q0 + len(QUESTION_FEATURES)  # columns before this one are per-episode constants (node_table)
_LINK0 = _STATE0 + len(STATE_NAMES)
_ACTPOS = _LINK0 + len(EDGE_KINDS)
_PAGEACT = _ACTPOS + 1
_LINKER = _PAGEACT + 1
_PAGEDIST = _LINKER + 1  # the one column built per step (not kept by the state)
N_FEATURES = len(NODE_FEATURES)
# the state's dynamic table starts at the unvisited column, in the same order as NODE_FEATURES
assert _PAGEDIST - _STATE0 == N_DYN and _PAGEACT - _STATE0 == DYN_PAGEACT
assert _LINKER - _STATE0 == DYN_LINKER and N_FEATURES == _PAGEDIST + 1


NUMERIC_KEYS: tuple[str, ...] = ("nodes", "slot_mask", "budget", "progress", "question")
TEXT_KEY = "text"
#: Conversations add these (an env whose episodes include conversations observes them by default):
#: ``turn`` float32 [2] (turn index / (turns - 1), 1 on a follow-up question) and ``prev_question``
#: float32 [384] (the previous question's embedding; zeros on the first turn).
TURN_KEY, PREV_QUESTION_KEY = "turn", "prev_question"
CONVERSATION_KEYS: tuple[str, ...] = (TURN_KEY, PREV_QUESTION_KEY)
OBSERVATION_KEYS: tuple[str, ...] = NUMERIC_KEYS + CONVERSATION_KEYS + (TEXT_KEY,)
#: Upper bound of the ``text`` key (a text view is a few to a few tens of thousands of characters).
TEXT_MAX_CHARS = 1_000_000
_SAMPLE_CHARS = string.ascii_letters + string.digits + string.punctuation + " \n" + "éßøπ–—…€中文"


class UnicodeText(spaces.Text):
    """A :class:`gymnasium.spaces.Text` that holds any Unicode string up to ``max_length`` characters.

    Why: ``Text`` checks every character against a finite charset, and real
    documents carry any character (accents, CJK, symbols, ligatures), so a
    text observation would leave its space. ``sample`` draws from a small
    mixed charset and at most 1,024 characters (samples are for tests, not
    for covering the space).
    """

    def __init__(self, max_length: int = TEXT_MAX_CHARS, *, min_length: int = 0,
                 seed: int | np.random.Generator | None = None) -> None:
        super().__init__(max_length, min_length=min_length, charset=_SAMPLE_CHARS, seed=seed)

    def contains(self, x: object) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def sample(self, mask=None, probability=None) -> str:  # type: ignore[override]
        if mask is None and probability is None:
            length = int(self.np_random.integers(self.min_length, min(self.max_length, 1024) + 1))
            return "".join(self.np_random.choice(self.character_list, size=length))
        return super().sample(mask=mask, probability=probability)

    @property
    def is_np_flattenable(self) -> bool:
        return False  # characters have no index outside the sample charset

    def __repr__(self) -> str:
        return f"UnicodeText({self.min_length}, {self.max_length})"

    def __eq__(self, other: object, /) -> bool:
        return isinstance(other, UnicodeText) and (self.min_length, self.max_length) == (
            other.min_length, other.max_length)


def check_observation_keys(keys: Sequence[str] | None) -> tuple[str, ...]:
    """The keys an env observes, in a fixed order (None: the numeric keys, as SB3 expects)."""
    if keys is None:
        return NUMERIC_KEYS
    keys = tuple(str(k) for k in keys)
    unknown = sorted(set(keys) - set(OBSERVATION_KEYS))
    if unknown or not keys:
        raise ValueError(f"observation_keys must be a non-empty subset of {OBSERVATION_KEYS}, got {keys}")
    return tuple(k for k in OBSERVATION_KEYS if k in keys)


def observation_space(K: int, keys: Sequence[str] = NUMERIC_KEYS) -> spaces.Dict:
    all_spaces = {
        "nodes": spaces.Box(0.0, 1.0, shape=(K, N_FEATURES), dtype=np.float32),
        "slot_mask": spaces.Box(0.0, 1.0, shape=(K,), dtype=np.float32),
        "budget": spaces.Box(0.0, 1.0, shape=(4,), dtype=np.float32),
        "progress": spaces.Box(0.0, 1.0, shape=(2,), dtype=np.float32),
        "question": spaces.Box(-1.0, 1.0, shape=(QUESTION_DIM,), dtype=np.float32),
        TURN_KEY: spaces.Box(0.0, 1.0, shape=(2,), dtype=np.float32),
        PREV_QUESTION_KEY: spaces.Box(-1.0, 1.0, shape=(QUESTION_DIM,), dtype=np.float32),
    }
    if TEXT_KEY in keys:
        all_spaces[TEXT_KEY] = UnicodeText(TEXT_MAX_CHARS)
    return spaces.Dict({k: v for k, v in all_spaces.items() if k in keys})


def text_observation(view: str) -> str:
    """The text view as an observation value (cut, with a marker, in the unlikely case it exceeds the bound)."""
    if len(view) <= TEXT_MAX_CHARS:
        return view
    marker = "\n<!-- cut at TEXT_MAX_CHARS -->"
    return view[: TEXT_MAX_CHARS - len(marker)] + marker


def turn_features(turn: int, n_turns: int) -> np.ndarray:
    """float32 [2]: position in the conversation, and whether this is a follow-up question."""
    return np.array([turn / max(1, n_turns - 1), float(turn > 0)], dtype=np.float32)


#: The question features of an episode relevance (held weakly). Why: the relevance object is shared by every
#: reset of the episode in the process, and ``np.clip`` alone costs more than the rest of a warm reset's
#: bookkeeping. 1,536 bytes an entry.
_QUESTION_FEATURES: Cache[np.ndarray] = Cache("env.question_features", 1024)


def question_features(rel: EpisodeRelevance) -> np.ndarray:
    """float32 [QUESTION_DIM], read-only: the question vector, cut or zero-padded, clipped to [-1, 1].

    Read-only because it is shared (cached per relevance object): observations copy it.
    """
    return _QUESTION_FEATURES.get(rel, None, lambda: _question_features(rel))


def _question_features(rel: EpisodeRelevance) -> np.ndarray:
    out = np.zeros(QUESTION_DIM, dtype=np.float32)
    v = rel.query.vector
    if v is not None:
        v = np.asarray(v, dtype=np.float32).ravel()[:QUESTION_DIM]
        out[: len(v)] = v
    out = np.clip(out, -1.0, 1.0)
    out.setflags(write=False)
    return out


#: The per-episode constant columns of the node table, per (episode relevance, graph index): both are shared by
#: the environments of a process, so one table serves all of them (float32 [n_nodes, _STATE0] each).
_TABLES: Cache[np.ndarray] = Cache("env.node_tables", 16)


def node_table(state: EvidenceState, rel: EpisodeRelevance) -> np.ndarray:
    """float32 [n, static + relevance + question cues]: the per-episode constant columns, gathered per step."""
    gi = state.gi
    return _TABLES.get(rel, gi, lambda: _node_table(gi, rel))  # the key holds the index: its id stays unique


def _node_table(gi: GraphIndex, rel: EpisodeRelevance) -> np.ndarray:
    table = np.empty((gi.n_nodes, _STATE0), dtype=np.float32)
    table[:, :N_STATIC] = gi.static
    table[:, _REL0:_Q0] = rel.features
    table[:, _Q0:_STATE0] = question_columns(gi, rel.query.text, rel.features[:, 0])
    return table


def build_observation(state: EvidenceState, table: np.ndarray, slots: np.ndarray, n: int,
                      question: np.ndarray) -> dict[str, np.ndarray]:
    """Fresh arrays every call (Gymnasium forbids reusing returned buffers).

    ``table`` is :func:`node_table` of the episode; ``n`` the number of filled
    slots. Dynamic columns come from ``state.dyn`` (kept current by the state),
    so this is two row gathers, plus :func:`active_page_distance` over the
    filled slots. Row gathers use ``take`` (faster than fancy indexing of a
    2-D array for a few dozen rows; for 1-D gathers fancy indexing is
    faster); the one ``budget`` + ``progress`` array is split into two views
    that nothing else holds.
    """
    K = len(slots)
    b = state.budget
    c = state.counters
    if n == K:  # the usual case on a real document: every row is written below
        nodes = np.empty((K, N_FEATURES), dtype=np.float32)
        slot_mask = np.empty(K, dtype=np.float32)
        slot_mask.fill(1.0)  # (np.ones is a Python-level wrapper around these two calls)
    else:
        nodes = np.zeros((K, N_FEATURES), dtype=np.float32)
        slot_mask = np.zeros(K, dtype=np.float32)
        slot_mask[:n] = 1.0
    if n:
        s = slots[:n]
        rows = nodes[:n]
        rows[:, :_STATE0] = table.take(s, axis=0)
        rows[:, _STATE0:_PAGEDIST] = state.dyn.take(s, axis=0)
        rows[:, _PAGEDIST] = active_page_distance(state, s)
    m, M, B, T = b.m, b.M, b.B, b.T  # the state's *_left properties, inlined (this runs every step)
    scalars = np.array((
        max(0, m - c.round_acts) / m,
        max(0, M - c.acts_used) / M if M else 0.0,
        max(0, B - c.opens_used) / B if B else 0.0,
        max(0, T - c.round) / T,
        min(1.0, c.round / T), min(1.0, c.steps / b.max_steps),
    ), dtype=np.float32)
    return {"nodes": nodes, "slot_mask": slot_mask, "budget": scalars[:4], "progress": scalars[4:],
            "question": question.copy()}


def active_page_distance(state: EvidenceState, nodes: np.ndarray) -> np.ndarray:
    """float32 [len(nodes)]: log1p(pages to the nearest active page) / log1p(n_pages - 1), in [0, 1].

    Why log-scaled: see :func:`~mage_gym.env.state.log_distance_table`. 1
    when no page is active. The state keeps the scaled distance per page
    (updated on page activations and prunes only), so this is two gathers.
    """
    return state.page_dist[state.gi.node_page[nodes]]
