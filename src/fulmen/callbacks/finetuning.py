"""``BaseFinetuning`` and ``BackboneFinetuning``: train a new head first, then unfreeze the backbone into the
running optimizer, and resume such a run exactly.

The parameter groups added while training are remembered by parameter name in the callback's state. On
resume the optimizer that ``configure_optimizers`` built has only its first groups; ``on_fit_start`` rebuilds
the saved groups (the trainer restores the optimizer's state right after it), so the restored state fits.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Generator, Iterable
from typing import TYPE_CHECKING, Any

import torch
from torch.nn import Module, ModuleDict
from torch.nn.modules.batchnorm import _BatchNorm
from torch.optim import Optimizer

from fulmen.core.hooks import Callback
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.imports import _TORCHVISION_AVAILABLE as _TORCHVISION_AVAILABLE
from fulmen.utilities.rank_zero import rank_zero_info, rank_zero_warn

if TYPE_CHECKING:
    from fulmen.core.module import LightningModule
    from fulmen.trainer import Trainer

Modules = Module | Iterable[Module | Iterable[Any]]


def multiplicative(epoch: int) -> float:
    """BackboneFinetuning's default: the backbone's learning rate grows by 1.5x per epoch."""
    return 1.5


class BaseFinetuning(Callback):
    """Subclass and implement ``freeze_before_training(pl_module)`` (freeze what should start frozen) and
    ``finetune_function(pl_module, current_epoch, optimizer)`` (called at every training epoch start for
    each optimizer; unfreeze there with ``unfreeze_and_add_param_group``). The 1.x form
    ``finetune_function(pl_module, epoch, optimizer, optimizer_idx)`` is called with the index."""

    def __init__(self) -> None:
        self._internal_optimizer_metadata: dict[int, list[dict[str, Any]]] = {}
        self._restarting = False

    # -- state -----------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"internal_optimizer_metadata": self._internal_optimizer_metadata}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._restarting = True
        # 1.x stored the metadata itself as the callback state
        metadata = state_dict.get("internal_optimizer_metadata", state_dict)
        self._internal_optimizer_metadata = {int(k): v for k, v in metadata.items()}

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not self._restarting:
            return
        named = dict(pl_module.named_parameters())
        for idx, optimizer in enumerate(trainer.optimizers):
            saved = self._internal_optimizer_metadata.get(idx)
            if saved is None:
                continue
            fresh = len(optimizer.param_groups)  # the groups configure_optimizers made; the rest were added
            for group in saved:
                missing = [n for n in group["params"] if n not in named]
                if missing:
                    raise MisconfigurationException(
                        f"{type(self).__name__} cannot rebuild optimizer {idx}'s parameter groups from the "
                        f"checkpoint: the module has no parameters named {missing[:3]}. Resume with the module "
                        "the checkpoint was written from."
                    )
            optimizer.param_groups = self._apply_mapping_to_param_groups(saved, named)  # the trainer loads the saved optimizer state into these next
            # the added groups were unfrozen when the checkpoint was written; freeze_before_training froze
            # them again in setup (Lightning leaves them frozen, so the resumed run stops training them)
            for group in saved[fresh:]:
                for name in group["params"]:
                    named[name].requires_grad = True
        self._restarting = False

    def _store(self, pl_module: LightningModule, idx: int, before: int, groups: list[dict[str, Any]]) -> None:
        names = {id(p): n for n, p in pl_module.named_parameters()}

        def by_name(group: dict[str, Any]) -> dict[str, Any]:
            return {**group, "params": [names[id(p)] for p in group["params"]]}

        if idx not in self._internal_optimizer_metadata:
            self._internal_optimizer_metadata[idx] = [by_name(g) for g in groups]
        elif before != len(groups):
            self._internal_optimizer_metadata[idx].extend(by_name(g) for g in groups[before:])

    # -- hooks -----------------------------------------------------------------------------------------
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        self.freeze_before_training(pl_module)

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        legacy = _takes_optimizer_idx(self.finetune_function)
        for idx, optimizer in enumerate(trainer.optimizers):
            before = len(optimizer.param_groups)
            if legacy:
                self.finetune_function(pl_module, trainer.current_epoch, optimizer, idx)  # type: ignore[call-arg]
            else:
                self.finetune_function(pl_module, trainer.current_epoch, optimizer)
            self._store(pl_module, idx, before, optimizer.param_groups)

    def freeze_before_training(self, pl_module: LightningModule) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement freeze_before_training(pl_module).")

    def finetune_function(self, pl_module: LightningModule, epoch: int, optimizer: Optimizer) -> None:
        raise NotImplementedError(
            f"{type(self).__name__} must implement finetune_function(pl_module, epoch, optimizer)."
        )

    # -- helpers ---------------------------------------------------------------------------------------
    @staticmethod
    def _apply_mapping_to_param_groups(param_groups: list[dict[str, Any]], mapping: dict[Any, Any]) -> list[dict[str, Any]]:
        """``param_groups`` with each entry of their ``params`` replaced by ``mapping[entry]``: names to parameters
        (``dict(module.named_parameters())``) or back. Libraries rebuild an optimizer's groups with it."""
        return [{**{k: v for k, v in g.items() if k != "params"}, "params": [mapping[p] for p in g["params"]]}
                for g in param_groups]  # fmt: skip

    @staticmethod
    def flatten_modules(modules: Modules) -> list[Module]:
        """The leaf modules (and modules holding parameters of their own) under ``modules``."""
        if isinstance(modules, ModuleDict):
            modules = modules.values()
        if isinstance(modules, Iterable) and not isinstance(modules, Module):
            found: list[Module] = []
            for m in modules:
                found.extend(BaseFinetuning.flatten_modules(m))
            return found
        assert isinstance(modules, Module)
        return [m for m in modules.modules() if not list(m.children()) or m._parameters]

    @staticmethod
    def filter_params(modules: Modules, train_bn: bool = True, requires_grad: bool = True) -> Generator[torch.nn.Parameter, None, None]:
        for module in BaseFinetuning.flatten_modules(modules):
            if isinstance(module, _BatchNorm) and not train_bn:
                continue
            for param in module.parameters(recurse=False):
                if param.requires_grad == requires_grad:
                    yield param

    @staticmethod
    def make_trainable(modules: Modules) -> None:
        for module in BaseFinetuning.flatten_modules(modules):
            if isinstance(module, _BatchNorm):
                module.track_running_stats = True
            for param in module.parameters(recurse=False):
                param.requires_grad = True

    @staticmethod
    def freeze_module(module: Module) -> None:
        if isinstance(module, _BatchNorm):
            module.track_running_stats = False
        for param in module.parameters(recurse=False):
            param.requires_grad = False

    @staticmethod
    def freeze(modules: Modules, train_bn: bool = True) -> None:
        """Freeze ``modules``; BatchNorm layers stay trainable when ``train_bn``."""
        for module in BaseFinetuning.flatten_modules(modules):
            if isinstance(module, _BatchNorm) and train_bn:
                BaseFinetuning.make_trainable(module)
            else:
                BaseFinetuning.freeze_module(module)

    @staticmethod
    def filter_on_optimizer(optimizer: Optimizer, params: Iterable[torch.nn.Parameter]) -> list[torch.nn.Parameter]:
        """``params`` less those the optimizer already has (they are then skipped, with a warning)."""
        present = {id(p) for group in optimizer.param_groups for p in group["params"]}
        params = list(params)
        kept = [p for p in params if id(p) not in present]
        if len(kept) != len(params):
            rank_zero_warn(
                "Some parameters to unfreeze are already in the optimizer and are skipped. To unfreeze them "
                "into their own parameter group, build the optimizer from the trainable parameters only: "
                f"{type(optimizer).__name__}(filter(lambda p: p.requires_grad, self.parameters()), ...)."
            )
        return kept

    @staticmethod
    def unfreeze_and_add_param_group(
        modules: Modules, optimizer: Optimizer, lr: float | None = None, initial_denom_lr: float = 10.0,
        train_bn: bool = True,
    ) -> None:  # fmt: skip
        """Unfreeze ``modules`` and add their parameters to ``optimizer`` as a new group with learning rate
        ``lr`` (default: the first group's divided by ``initial_denom_lr``)."""
        BaseFinetuning.make_trainable(modules)
        group_lr = optimizer.param_groups[0]["lr"] / initial_denom_lr if lr is None else float(lr)
        params = BaseFinetuning.filter_on_optimizer(
            optimizer, BaseFinetuning.filter_params(modules, train_bn=train_bn, requires_grad=True)
        )
        if params:
            optimizer.add_param_group({"params": params, "lr": group_lr})


def _takes_optimizer_idx(fn: Callable[..., Any]) -> bool:
    try:
        return len(inspect.signature(fn).parameters) >= 4
    except (TypeError, ValueError):
        return False


class BackboneFinetuning(BaseFinetuning):
    """Freeze ``pl_module.backbone`` until ``unfreeze_backbone_at_epoch``, then train it in its own parameter
    group: starting at ``backbone_initial_lr`` (default: the head's rate times ``backbone_initial_ratio_lr``),
    multiplied by ``lambda_func(epoch + 1)`` each later epoch, and (``should_align``) never above the head's
    rate."""

    def __init__(
        self,
        unfreeze_backbone_at_epoch: int = 10,
        lambda_func: Callable[[int], float] = multiplicative,
        backbone_initial_ratio_lr: float = 10e-2,
        backbone_initial_lr: float | None = None,
        should_align: bool = True,
        initial_denom_lr: float = 10.0,
        train_bn: bool = True,
        verbose: bool = False,
        rounding: int = 12,
    ) -> None:
        super().__init__()
        self.unfreeze_backbone_at_epoch = unfreeze_backbone_at_epoch
        self.lambda_func = lambda_func
        self.backbone_initial_ratio_lr = backbone_initial_ratio_lr
        self.backbone_initial_lr = backbone_initial_lr
        self.should_align = should_align
        self.initial_denom_lr = initial_denom_lr
        self.train_bn = train_bn
        self.verbose = verbose
        self.rounding = rounding
        self.previous_backbone_lr: float | None = None

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "previous_backbone_lr": self.previous_backbone_lr}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.previous_backbone_lr = state_dict.get("previous_backbone_lr")
        super().load_state_dict({"internal_optimizer_metadata": state_dict.get("internal_optimizer_metadata", {})})

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        # checked before freezing it (Lightning checks in on_fit_start, after setup failed on the attribute)
        if not isinstance(getattr(pl_module, "backbone", None), Module):
            raise MisconfigurationException(
                f"BackboneFinetuning needs the module to have a `backbone` attribute that is an nn.Module; "
                f"{type(pl_module).__name__} has none. Assign the part to fine-tune to `self.backbone`."
            )
        super().setup(trainer, pl_module, stage)

    def freeze_before_training(self, pl_module: LightningModule) -> None:
        self.freeze(pl_module.backbone)

    def finetune_function(self, pl_module: LightningModule, epoch: int, optimizer: Optimizer) -> None:
        head_lr = optimizer.param_groups[0]["lr"]
        if epoch == self.unfreeze_backbone_at_epoch:
            lr = self.backbone_initial_lr if self.backbone_initial_lr is not None else head_lr * self.backbone_initial_ratio_lr
            self.previous_backbone_lr = lr
            self.unfreeze_and_add_param_group(
                pl_module.backbone, optimizer, lr, train_bn=self.train_bn, initial_denom_lr=self.initial_denom_lr
            )
        elif epoch > self.unfreeze_backbone_at_epoch and self.previous_backbone_lr is not None:
            lr = self.lambda_func(epoch + 1) * self.previous_backbone_lr
            if self.should_align and lr > head_lr:
                lr = head_lr
            optimizer.param_groups[-1]["lr"] = lr
            self.previous_backbone_lr = lr
        else:
            return
        if self.verbose:
            rank_zero_info(
                f"Epoch {epoch}: the backbone's learning rate is {round(lr, self.rounding)}, the head's "
                f"{round(head_lr, self.rounding)}."
            )
