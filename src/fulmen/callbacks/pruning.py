"""``ModelPruning``: prune weights during training with ``torch.nn.utils.prune`` (masks that keep the pruned
values at zero), optionally rewinding the survivors to their initial values (the lottery ticket hypothesis)."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.nn.utils import prune

from fulmen.core.hooks import Callback
from fulmen.core.module import LightningModule
from fulmen.utilities.apply_func import apply_to_collection as apply_to_collection
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.rank_zero import rank_zero_debug as rank_zero_debug
from fulmen.utilities.rank_zero import rank_zero_info
from fulmen.utilities.rank_zero import rank_zero_only as rank_zero_only

if TYPE_CHECKING:
    from fulmen.trainer import Trainer

_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "l1_unstructured": prune.l1_unstructured,
    "random_unstructured": prune.random_unstructured,
    "ln_structured": prune.ln_structured,
    "random_structured": prune.random_structured,
}
_GLOBAL_METHODS: dict[str, type[prune.BasePruningMethod]] = {
    "l1_unstructured": prune.L1Unstructured,
    "random_unstructured": prune.RandomUnstructured,
}
_CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)


_Resolved = tuple[Callable[..., Any], str, type[prune.BasePruningMethod] | None, dict[str, Any]]


def _resolve_pruning_fn(
    pruning_fn: Callable[..., Any] | str, use_global_unstructured: bool, pruning_dim: int | None,
    pruning_norm: int | None,
) -> _Resolved:
    """``ModelPruning``'s ``pruning_fn`` checked against its other arguments: (the function that prunes one
    parameter, its name, the ``BasePruningMethod`` that ranks all parameters together when global, the keyword
    arguments of a structured method)."""
    if isinstance(pruning_fn, str):
        return _resolve_named(pruning_fn, use_global_unstructured, pruning_dim, pruning_norm)
    if isinstance(pruning_fn, type) and issubclass(pruning_fn, prune.BasePruningMethod):
        return pruning_fn.apply, pruning_fn.__name__, pruning_fn, {}
    if callable(pruning_fn):
        if use_global_unstructured:
            raise MisconfigurationException(
                "ModelPruning with use_global_unstructured=True needs pruning_fn to be a string or a "
                f"BasePruningMethod subclass; got {pruning_fn!r}."
            )
        return pruning_fn, getattr(pruning_fn, "__name__", repr(pruning_fn)), None, {}
    raise MisconfigurationException(f"ModelPruning(pruning_fn={pruning_fn!r}) must be a string or a callable.")


def _resolve_named(
    pruning_fn: str, use_global_unstructured: bool, pruning_dim: int | None, pruning_norm: int | None
) -> _Resolved:
    """A ``pruning_fn`` given by name (``"l1_unstructured"`` ...): see ``_resolve_pruning_fn``."""
    key = pruning_fn.lower()
    if key not in _FUNCTIONS:
        raise MisconfigurationException(
            f"ModelPruning(pruning_fn={pruning_fn!r}) is not supported. Use one of {sorted(_FUNCTIONS)}, a "
            "function of torch.nn.utils.prune, or a BasePruningMethod subclass."
        )
    kwargs: dict[str, Any] = {}
    if key.endswith("_structured"):
        if use_global_unstructured:
            raise MisconfigurationException(
                f"ModelPruning(pruning_fn={pruning_fn!r}, use_global_unstructured=True): global pruning ranks "
                "single values, so only unstructured methods work. Set use_global_unstructured=False."
            )
        if pruning_dim is None:
            raise MisconfigurationException(f"ModelPruning(pruning_fn={pruning_fn!r}) needs pruning_dim=.")
        kwargs["dim"] = pruning_dim
        if key == "ln_structured":
            if pruning_norm is None:
                raise MisconfigurationException("ModelPruning(pruning_fn='ln_structured') needs pruning_norm=.")
            kwargs["n"] = pruning_norm
    global_method = _GLOBAL_METHODS[key] if use_global_unstructured else None
    return _FUNCTIONS[key], key, global_method, kwargs


class ModelPruning(Callback):
    """Prune ``parameters_to_prune`` (``(module, "weight" | "bias")`` pairs; default: every such parameter
    of the model) at the end of each training epoch (or validation epoch, ``prune_on_train_epoch_end=False``).

    ``pruning_fn``: ``"l1_unstructured"``, ``"random_unstructured"``, ``"ln_structured"`` (with
    ``pruning_dim`` and ``pruning_norm``), ``"random_structured"`` (with ``pruning_dim``), a function of
    ``torch.nn.utils.prune``, or a ``BasePruningMethod`` subclass. ``use_global_unstructured`` ranks all the
    parameters together (unstructured methods only). ``amount`` (a fraction, a count, or a function of the
    epoch) and ``apply_pruning`` (a bool or a function of the epoch) say how much and when.
    ``use_lottery_ticket_hypothesis`` resets the remaining weights to their values when fit started (or to
    fresh random ones with ``resample_parameters``). ``make_pruning_permanent`` removes the masks when
    training ends, and saves checkpoints with plain (masked) weights that load into the unpruned model.
    ``verbose``: 1 logs the overall sparsity after each pruning, 2 also per layer."""

    PARAMETER_NAMES = ("weight", "bias")

    def __init__(
        self,
        pruning_fn: Callable[..., Any] | str,
        parameters_to_prune: Sequence[tuple[nn.Module, str]] = (),
        parameter_names: list[str] | None = None,
        use_global_unstructured: bool = True,
        amount: int | float | Callable[[int], int | float] = 0.5,
        apply_pruning: bool | Callable[[int], bool] = True,
        make_pruning_permanent: bool = True,
        use_lottery_ticket_hypothesis: bool | Callable[[int], bool] = True,
        resample_parameters: bool = False,
        pruning_dim: int | None = None,
        pruning_norm: int | None = None,
        verbose: int = 0,
        prune_on_train_epoch_end: bool = True,
    ) -> None:
        self._use_global_unstructured = use_global_unstructured
        self._parameters_to_prune = list(parameters_to_prune)
        self._use_lottery_ticket_hypothesis = use_lottery_ticket_hypothesis
        self._resample_parameters = resample_parameters
        self._prune_on_train_epoch_end = prune_on_train_epoch_end
        self._parameter_names = parameter_names or list(self.PARAMETER_NAMES)
        self._original_layers: dict[int, nn.Module] = {}
        for name in self._parameter_names:
            if name not in self.PARAMETER_NAMES:
                raise MisconfigurationException(
                    f"ModelPruning(parameter_names={self._parameter_names!r}): {name!r} is neither 'weight' nor 'bias'."
                )
        self._pruning_fn: Callable[..., Any]
        self._pruning_fn, self._fn_name, self._global_method, self._kwargs = _resolve_pruning_fn(
            pruning_fn, use_global_unstructured, pruning_dim, pruning_norm
        )
        if isinstance(amount, bool) or not (isinstance(amount, (int, float)) or callable(amount)):
            raise MisconfigurationException(
                f"ModelPruning(amount={amount!r}) must be an int (a count), a float (a fraction) or a function of "
                "the epoch."
            )
        self.amount = amount
        self._apply_pruning = apply_pruning
        self._make_pruning_permanent = make_pruning_permanent
        if verbose not in (0, 1, 2):
            raise MisconfigurationException(f"ModelPruning(verbose={verbose!r}) must be 0, 1 or 2.")
        self._verbose = verbose

    # -- what is pruned ----------------------------------------------------------------------------------
    def filter_parameters_to_prune(self, parameters_to_prune: Sequence[tuple[nn.Module, str]] = ()) -> Sequence[tuple[nn.Module, str]]:
        """Override to choose among the candidates."""
        return parameters_to_prune

    @staticmethod
    def sanitize_parameters_to_prune(
        pl_module: LightningModule,
        parameters_to_prune: Sequence[tuple[nn.Module, str]] = (),
        parameter_names: Sequence[str] = (),
    ) -> Sequence[tuple[nn.Module, str]]:
        """The ``(module, name)`` pairs to prune: ``parameters_to_prune`` checked against the model, or when
        it is empty every ``nn.Parameter`` named in ``parameter_names`` (default ``PARAMETER_NAMES``) of the
        model's modules (containers aside).

        Raises:
            MisconfigurationException: a module of ``parameters_to_prune`` is not in the model or lacks the
                parameter, or ``parameters_to_prune`` is not a list or tuple of ``(nn.Module, str)`` pairs.
        """
        names = parameter_names or ModelPruning.PARAMETER_NAMES
        current_modules = [m for m in pl_module.modules() if not isinstance(m, _CONTAINERS)]
        if not parameters_to_prune:
            return [(m, name) for name in names for m in current_modules
                    if isinstance(getattr(m, name, None), nn.Parameter)]  # fmt: skip
        if not (
            isinstance(parameters_to_prune, (list, tuple))
            and all(isinstance(p, (list, tuple)) and len(p) == 2 for p in parameters_to_prune)
            and all(isinstance(m, nn.Module) and isinstance(name, str) for m, name in parameters_to_prune)
        ):
            raise MisconfigurationException(
                "The provided `parameters_to_prune` should either be list of tuple"
                " with 2 elements: (nn.Module, parameter_name_to_prune) or None"
            )
        missing_modules = [m for m, _ in parameters_to_prune if not any(m is c for c in current_modules)]
        missing_parameters = [name for m, name in parameters_to_prune
                              if any(m is c for c in current_modules) and not hasattr(m, name)]  # fmt: skip
        if missing_modules or missing_parameters:
            raise MisconfigurationException(
                "Some provided `parameters_to_prune` don't exist in the model."
                f" Found missing modules: {missing_modules} and missing parameters: {missing_parameters}"
            )
        return parameters_to_prune

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        candidates = self.sanitize_parameters_to_prune(
            pl_module, self._parameters_to_prune, parameter_names=self._parameter_names
        )
        self._parameters_to_prune = list(self.filter_parameters_to_prune(candidates))
        if self._use_lottery_ticket_hypothesis:  # the values the survivors are rewound to
            self._original_layers = {id(m): copy.deepcopy(m) for m, _ in self._parameters_to_prune}

    # -- pruning ---------------------------------------------------------------------------------------
    def apply_pruning(self, amount: int | float) -> None:
        before = self._stats() if self._verbose else None
        if self._global_method is not None:
            prune.global_unstructured(self._parameters_to_prune, pruning_method=self._global_method, amount=amount)
        else:
            for module, name in self._parameters_to_prune:
                self._pruning_fn(module, name=name, amount=amount, **self._kwargs)
        if before is not None:
            self._log_sparsity(before, self._stats())

    def apply_lottery_ticket_hypothesis(self) -> None:
        """Rewind the unpruned weights to their values when fit started (or resample them)."""
        for module, name in self._parameters_to_prune:
            original = self._original_layers.get(id(module))
            if original is None:
                continue
            if self._resample_parameters:
                original = copy.deepcopy(original)
                reset = getattr(original, "reset_parameters", None)
                if callable(reset):
                    reset()
            source = getattr(original, name)
            target = getattr(module, f"{name}_orig", None)
            if target is None:
                target = getattr(module, name)
            with torch.no_grad():
                target.copy_(source.to(target.device))

    def make_pruning_permanent(self, module: nn.Module) -> None:
        """Remove the masks: the pruned zeros become part of the weights."""
        for sub in module.modules():
            for hook in [h for h in sub._forward_pre_hooks.values() if isinstance(h, prune.BasePruningMethod)]:
                prune.remove(sub, hook._tensor_name)

    def _run(self, epoch: int) -> None:
        should = self._apply_pruning(epoch) if callable(self._apply_pruning) else self._apply_pruning
        amount = self.amount(epoch) if callable(self.amount) else self.amount
        if not should or not amount:
            return
        self.apply_pruning(amount)
        lottery = self._use_lottery_ticket_hypothesis
        if lottery(epoch) if callable(lottery) else lottery:
            self.apply_lottery_ticket_hypothesis()

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._prune_on_train_epoch_end:
            self._run(trainer.current_epoch)

    def on_validation_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not self._prune_on_train_epoch_end and not trainer.sanity_checking:
            self._run(trainer.current_epoch)

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._make_pruning_permanent:
            self.make_pruning_permanent(pl_module)

    def on_save_checkpoint(self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]) -> None:
        if not self._make_pruning_permanent:
            return
        state = checkpoint["state_dict"]
        plain: dict[str, Any] = {}
        for key, value in state.items():
            if key.endswith("_mask"):
                continue
            if key.endswith("_orig") and f"{key[:-5]}_mask" in state:
                plain[key[:-5]] = (value * state[f"{key[:-5]}_mask"]).detach()
            else:
                plain[key] = value
        checkpoint["state_dict"] = plain  # loads into the unpruned model

    # -- reporting -------------------------------------------------------------------------------------
    def _stats(self) -> list[tuple[int, int]]:
        return [(int((getattr(m, n) == 0).sum()), getattr(m, n).numel()) for m, n in self._parameters_to_prune]

    def _log_sparsity(self, before: list[tuple[int, int]], after: list[tuple[int, int]]) -> None:
        total = sum(n for _, n in after)
        zeros_before, zeros_after = sum(z for z, _ in before), sum(z for z, _ in after)
        rank_zero_info(
            f"Applied `{self._fn_name}`. Pruned: {zeros_before}/{total} ({zeros_before / total:.2%}) -> "
            f"{zeros_after}/{total} ({zeros_after / total:.2%})"
        )
        if self._verbose == 2:
            for (module, name), (z0, n), (z1, _) in zip(self._parameters_to_prune, before, after):
                rank_zero_info(
                    f"Applied `{self._fn_name}` to `{type(module).__name__}.{name}` with amount={self.amount}. "
                    f"Pruned: {z0} ({z0 / n:.2%}) -> {z1} ({z1 / n:.2%})"
                )
