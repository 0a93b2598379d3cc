"""Utilities users import by name: ``rank_zero_only``, ``seed_everything``, ``AttributeDict``, ``grad_norm``,
``CombinedLoader`` ...; each lives in the module named after its job and is re-exported here."""

from fulmen.utilities.apply_func import apply_to_collection, move_data_to_device
from fulmen.utilities.combined_loader import CombinedLoader
from fulmen.utilities.data import suggested_max_num_workers
from fulmen.utilities.distributed import is_shared_filesystem
from fulmen.utilities.enums import GradClipAlgorithmType, LightningEnum
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.grads import grad_norm
from fulmen.utilities.parameter_tying import find_shared_parameters, set_shared_parameters
from fulmen.utilities.parsing import AttributeDict, is_picklable
from fulmen.utilities.rank_zero import rank_zero_deprecation, rank_zero_info, rank_zero_only, rank_zero_warn
from fulmen.utilities.seed import seed_everything
from fulmen.utilities.throughput import measure_flops
from fulmen.utilities.warnings import disable_possible_user_warnings

__all__ = [
    "AttributeDict",
    "CombinedLoader",
    "GradClipAlgorithmType",
    "LightningEnum",
    "MisconfigurationException",
    "apply_to_collection",
    "disable_possible_user_warnings",
    "find_shared_parameters",
    "grad_norm",
    "is_picklable",
    "is_shared_filesystem",
    "measure_flops",
    "move_data_to_device",
    "rank_zero_deprecation",
    "rank_zero_info",
    "rank_zero_only",
    "rank_zero_warn",
    "seed_everything",
    "set_shared_parameters",
    "suggested_max_num_workers",
]

from fulmen.utilities.imports import lazy_exports as _lazy_exports

# its submodules read as attributes (``fulmen.trainer.states``) without their own import, as after Lightning's
# package imports
__getattr__, __dir__ = _lazy_exports(__name__, {})
