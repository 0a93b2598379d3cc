from fulmen.trainer.trainer import Trainer
from fulmen.utilities.seed import seed_everything

__all__ = ["Trainer", "seed_everything"]
