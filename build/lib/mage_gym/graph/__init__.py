"""The offline evidence graph: parse a document once, cache the graph, load it in milliseconds.

Importing this package is cheap (numpy only): parsers, the text encoder and
torch are imported when a graph is actually *built*, never when one is loaded
from the cache.
"""
from mage_gym.graph.build import build_from_parsed, build_graph, failed_pages, load_graph
from mage_gym.graph.edges import EdgeConfig, build_edges
from mage_gym.graph.errors import (
    CorruptDocumentError,
    DocumentError,
    EmptyDocumentError,
    EncryptedDocumentError,
    MissingDocumentError,
    PageLimitWarning,
    UnsupportedSourceError,
)
from mage_gym.graph.graph import EvidenceGraph
from mage_gym.graph.prepare import EmbedConfig
from mage_gym.graph.schema import (
    EDGE_KINDS,
    ELEMENT_TYPES,
    NODE_TYPES,
    VISUAL_TYPES,
    DocumentSource,
    Edge,
    Element,
    Page,
    PageFailure,
    ParsedDocument,
    ParsedElement,
    ParsedPage,
    element_id,
    page_id,
)
from mage_gym.graph.store import GRAPH_VERSION, GraphNotBuiltError, default_cache_dir

__all__ = [
    "build_graph", "load_graph", "build_from_parsed", "failed_pages", "PageFailure", "build_edges", "EdgeConfig",
    "EmbedConfig",
    "EvidenceGraph", "GRAPH_VERSION", "GraphNotBuiltError", "default_cache_dir",
    "DocumentSource", "Page", "Element", "Edge", "ParsedDocument", "ParsedPage", "ParsedElement",
    "EDGE_KINDS", "ELEMENT_TYPES", "NODE_TYPES", "VISUAL_TYPES", "page_id", "element_id",
    "DocumentError", "EncryptedDocumentError", "CorruptDocumentError", "EmptyDocumentError",
    "UnsupportedSourceError", "MissingDocumentError", "PageLimitWarning",
]
