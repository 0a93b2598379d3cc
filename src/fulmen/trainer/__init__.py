from fulmen.trainer.trainer import Trainer

__all__ = ["Trainer"]
