"""Episodes: the record, benchmark loaders, splits, gold mapping.

Import what you need from here; loaders are imported lazily by
:func:`load_dataset`, so ``import mage_gym.data`` stays cheap.
"""
from mage_gym.data.episode import Episode, Region
from mage_gym.data.gold import GoldEvidence, GoldStats, resolve_gold, resolve_gold_detailed
from mage_gym.data.io import DatasetError, DatasetNotFoundError, episode_from_dict, episode_to_dict
from mage_gym.data.registry import DATASETS, default_root, load_dataset, load_dataset_with_report
from mage_gym.data.report import DatasetLoad, LoadReport
from mage_gym.data.splits import assign_split, limit_episodes, select_split

__all__ = [
    "Episode", "Region", "GoldEvidence", "GoldStats", "resolve_gold", "resolve_gold_detailed",
    "DatasetError", "DatasetNotFoundError", "episode_from_dict", "episode_to_dict",
    "DATASETS", "default_root", "load_dataset", "load_dataset_with_report", "DatasetLoad", "LoadReport",
    "assign_split", "limit_episodes", "select_split",
]
