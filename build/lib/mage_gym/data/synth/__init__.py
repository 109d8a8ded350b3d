"""Procedural long-document generator: the project's embedded default data.

``generate_corpus(out_dir, n_docs, seed, cfg)`` writes realistic multi-page
reports (numbered sections, running headers, paragraphs, lists, ruled tables,
raster charts, figures, footnotes, cross-references, printed page labels,
appendices and notes) and questions whose gold answers and gold boxes come
from what the generator drew, including two-hop *bridge* questions (see
:mod:`.bridge`). Corpora record the generator version and a seed role
(:mod:`.provenance`). ``load_synth(root)``
reads them back as :class:`~mage_gym.data.episode.Episode` records.
Composite corpora (:class:`~mage_gym.data.composite.CompositeEpisode`):
cross-document questions over groups of reports sharing entities
(:mod:`.multidoc`) and conversations whose later turns refer back
(:mod:`.conversation`), both over the same generated documents.

Why it exists: real benchmarks are small and their gold is page-level or
noisy; a generator gives unlimited training episodes with exact element-level
gold, deliberate near-duplicate distractors and difficulty knobs.

Episode JSON helpers live in :mod:`mage_gym.data.io` (``episode_to_dict`` /
``episode_from_dict``); they are re-exported here under the names
``episode_to_json`` / ``episode_from_json``.
"""
from __future__ import annotations

from mage_gym.data.io import episode_from_dict as episode_from_json
from mage_gym.data.io import episode_to_dict as episode_to_json
from mage_gym.data.synth.config import (
    BRIDGE_TYPES,
    PRESETS,
    QUESTION_KINDS,
    REFERENCE_PATTERNS,
    SynthConfig,
    SynthConfigError,
    preset,
    preset_role,
)
from mage_gym.data.synth.conversation import (
    ConversationConfig,
    generate_conversation_corpus,
    load_synth_conversation,
)
from mage_gym.data.synth.corpus import (
    CorpusInfo,
    DocResult,
    build_document,
    default_synth_root,
    generate_corpus,
    generate_document,
    load_synth,
    read_manifest,
)
from mage_gym.data.synth.multidoc import MultiDocConfig, generate_multidoc_corpus, load_synth_multidoc
from mage_gym.data.synth.provenance import (
    GENERATOR_VERSION,
    SEED_RANGES,
    SeedRoleError,
    check_seed,
    require_role,
    role_of_seed,
)

__all__ = [
    "PRESETS", "QUESTION_KINDS", "BRIDGE_TYPES", "REFERENCE_PATTERNS", "SynthConfig", "SynthConfigError", "preset",
    "preset_role", "GENERATOR_VERSION", "SEED_RANGES", "SeedRoleError", "check_seed", "require_role", "role_of_seed",
    "CorpusInfo", "DocResult",
    "generate_corpus", "generate_document", "build_document", "load_synth", "read_manifest", "default_synth_root",
    "MultiDocConfig", "generate_multidoc_corpus", "load_synth_multidoc",
    "ConversationConfig", "generate_conversation_corpus", "load_synth_conversation",
    "episode_to_json", "episode_from_json",
]
