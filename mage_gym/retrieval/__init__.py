"""Page and element retrieval: BM25, dense MiniLM, ColPali/ColQwen, fused."""
from mage_gym.retrieval.base import Query, Retriever, Scores

__all__ = ["Query", "Retriever", "Scores"]
