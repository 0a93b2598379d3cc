"""Utilities users import by name: ``rank_zero_only``, ``seed_everything``, ``AttributeDict``."""

from fulmen.utilities.apply_func import apply_to_collection, move_data_to_device
from fulmen.utilities.enums import LightningEnum
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.parsing import AttributeDict, is_picklable
from fulmen.utilities.rank_zero import rank_zero_info, rank_zero_only, rank_zero_warn
from fulmen.utilities.seed import seed_everything
from fulmen.utilities.warnings import disable_possible_user_warnings

__all__ = [
    "AttributeDict",
    "LightningEnum",
    "MisconfigurationException",
    "apply_to_collection",
    "disable_possible_user_warnings",
    "is_picklable",
    "move_data_to_device",
    "rank_zero_info",
    "rank_zero_only",
    "rank_zero_warn",
    "seed_everything",
]
