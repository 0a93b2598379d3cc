"""The code examples of the optimization pages (seed 002) and of seed 001's model toggling and grads-to-None
sections, written once against a framework namespace ``pl`` so that the same user code runs under fulmen
and under lightning.pytorch.

Each class is the page's example with ``pytorch_lightning`` replaced by ``pl`` and the bodies the page
elides filled in (``compute_loss``, the networks, the missing ``manual_backward``/``step`` lines). The
comments of the page are kept where they say what the code must do.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.utils.data import DataLoader, TensorDataset

N_BATCHES = 8  # per epoch
BATCH = 4


def data(seed: int = 0) -> DataLoader:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(N_BATCHES * BATCH, 6, generator=g)
    y = (x[:, :3].sum(1, keepdim=True) > 0).float()
    return DataLoader(TensorDataset(x, y), batch_size=BATCH, shuffle=False)


def net() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def compute_loss(model: torch.nn.Module, batch: Any) -> Tensor:
    x, y = batch
    return torch.nn.functional.binary_cross_entropy_with_logits(model(x), y)


def examples(pl: Any) -> dict[str, type]:
    """name -> LightningModule subclass, built on ``pl`` (fulmen or lightning.pytorch)."""

    class Base(pl.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(1)
            self.net = net()

        def forward(self, x):
            return self.net(x)

        def compute_loss(self, batch):
            return compute_loss(self, batch)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)

    # -- seed 002: "Here is a minimal example of manual optimization." --------------------------------
    class MyModel(Base):
        def __init__(self):
            super().__init__()
            # Important: This property activates manual optimization.
            self.automatic_optimization = False

        def training_step(self, batch, batch_idx):
            opt = self.optimizers()
            opt.zero_grad()
            loss = self.compute_loss(batch)
            self.manual_backward(loss)
            opt.step()

    # -- seed 002: gradient accumulation with one optimizer -------------------------------------------
    n = 3

    class ManualAccumulation(Base):
        # accumulate gradients over n batches
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch, batch_idx):
            opt = self.optimizers()

            loss = self.compute_loss(batch)
            self.manual_backward(loss)

            # accumulate gradients of n batches
            if (batch_idx + 1) % n == 0:
                opt.step()
                opt.zero_grad()

    # -- seed 002: "Use multiple optimizers (like GANs) [manual]" -------------------------------------
    class Generator(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 6))

        def forward(self, z):
            return self.net(z)

    class Discriminator(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))

        def forward(self, x):
            return self.net(x)

    class GANParts(pl.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(1)
            self.G = Generator()
            self.D = Discriminator()
            self._Z = torch.distributions.Normal(torch.zeros(4), torch.ones(4))
            self.criterion = torch.nn.BCEWithLogitsLoss()

        def sample_z(self, n) -> Tensor:
            sample = self._Z.sample((n,))
            return sample

        def sample_G(self, n) -> Tensor:
            z = self.sample_z(n)
            return self.G(z)

    class SimpleGAN(GANParts):
        def __init__(self):
            super().__init__()
            # Important: This property activates manual optimization.
            self.automatic_optimization = False

        def training_step(self, batch, batch_idx):
            # Implementation follows the PyTorch tutorial:
            g_opt, d_opt = self.optimizers()

            X, _ = batch
            batch_size = X.shape[0]

            real_label = torch.ones((batch_size, 1), device=self.device)
            fake_label = torch.zeros((batch_size, 1), device=self.device)

            g_X = self.sample_G(batch_size)

            # Optimize Discriminator #
            d_x = self.D(X)
            errD_real = self.criterion(d_x, real_label)

            d_z = self.D(g_X.detach())
            errD_fake = self.criterion(d_z, fake_label)

            errD = errD_real + errD_fake

            d_opt.zero_grad()
            self.manual_backward(errD)
            d_opt.step()

            # Optimize Generator #
            d_z = self.D(g_X)
            errG = self.criterion(d_z, real_label)

            g_opt.zero_grad()
            self.manual_backward(errG)
            g_opt.step()

            self.log_dict({"g_loss": errG, "d_loss": errD}, prog_bar=True)

        def configure_optimizers(self):
            g_opt = torch.optim.Adam(self.G.parameters(), lr=1e-2)  # the page's 1e-5 barely moves the weights
            d_opt = torch.optim.Adam(self.D.parameters(), lr=1e-2)
            return g_opt, d_opt

    # -- seed 001: model toggling: a GAN accumulating over two batches --------------------------------
    class ToggledGAN(GANParts):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch, batch_idx):
            # Implementation follows the PyTorch tutorial:
            # https://pytorch.org/tutorials/beginner/dcgan_faces_tutorial.html
            g_opt, d_opt = self.optimizers()

            X, _ = batch
            X.requires_grad = True
            batch_size = X.shape[0]

            real_label = torch.ones((batch_size, 1), device=self.device)
            fake_label = torch.zeros((batch_size, 1), device=self.device)

            # Sync and clear gradients
            # at the end of accumulation or
            # at the end of an epoch.
            is_last_batch_to_accumulate = (batch_idx + 1) % 2 == 0 or self.trainer.is_last_batch

            g_X = self.sample_G(batch_size)

            # Optimize Discriminator #
            with d_opt.toggle_model(sync_grad=is_last_batch_to_accumulate):
                d_x = self.D(X)
                errD_real = self.criterion(d_x, real_label)

                d_z = self.D(g_X.detach())
                errD_fake = self.criterion(d_z, fake_label)

                errD = errD_real + errD_fake

                self.manual_backward(errD)
                if is_last_batch_to_accumulate:
                    d_opt.step()
                    d_opt.zero_grad()

            # Optimize Generator #
            with g_opt.toggle_model(sync_grad=is_last_batch_to_accumulate):
                d_z = self.D(g_X)
                errG = self.criterion(d_z, real_label)

                self.manual_backward(errG)
                if is_last_batch_to_accumulate:
                    g_opt.step()
                    g_opt.zero_grad()

            self.log_dict({"g_loss": errG, "d_loss": errD}, prog_bar=True)

        def configure_optimizers(self):
            return torch.optim.Adam(self.G.parameters(), lr=1e-2), torch.optim.Adam(
                self.D.parameters(), lr=1e-2
            )

    # -- seed 002: "Learning rate scheduling [manual]": step every batch ------------------------------
    class SchedulerEveryStep(Base):
        # step every batch
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch, batch_idx):
            # do forward, backward, and optimization
            opt = self.optimizers()
            opt.zero_grad()
            self.manual_backward(self.compute_loss(batch))
            opt.step()

            # single scheduler
            sch = self.lr_schedulers()
            sch.step()

        def configure_optimizers(self):
            opt = torch.optim.SGD(self.parameters(), lr=0.1)
            return [opt], [torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.9)]

    class TwoSchedulersEveryStep(Base):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch, batch_idx):
            opt = self.optimizers()
            opt.zero_grad()
            self.manual_backward(self.compute_loss(batch))
            opt.step()

            # multiple schedulers
            sch1, sch2 = self.lr_schedulers()
            sch1.step()
            sch2.step()

        def configure_optimizers(self):
            opt = torch.optim.SGD(self.parameters(), lr=0.1)
            # "epoch" intervals: the trainer must leave them alone under manual optimization
            return [opt], [
                torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5),
                {
                    "scheduler": torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1 / (1 + s)),
                    "interval": "step",
                },
            ]

    # -- seed 002: step every n batches / every n epochs -----------------------------------------------
    class SchedulerEveryN(Base):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch, batch_idx):
            # do forward, backward, and optimization
            opt = self.optimizers()
            opt.zero_grad()
            self.manual_backward(self.compute_loss(batch))
            opt.step()

            sch1, sch2 = self.lr_schedulers()

            # step every n batches
            if (batch_idx + 1) % n == 0:
                sch1.step()

            # step every n epochs
            if self.trainer.is_last_batch and (self.trainer.current_epoch + 1) % 2 == 0:
                sch2.step()

        def configure_optimizers(self):
            opt = torch.optim.SGD(self.parameters(), lr=0.1)
            return [opt], [
                torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.9),
                torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5),
            ]

    # -- seed 002: "Use closure for LBFGS-like optimizers" ---------------------------------------------
    class LBFGSClosure(Base):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False

        def configure_optimizers(self):
            return torch.optim.LBFGS(self.parameters(), lr=0.5, max_iter=4)

        def training_step(self, batch, batch_idx):
            opt = self.optimizers()

            def closure():
                loss = self.compute_loss(batch)
                opt.zero_grad()
                self.manual_backward(loss)
                return loss

            opt.step(closure=closure)  # elided by the page

    # -- seed 002: "Access your own optimizer [manual]" ------------------------------------------------
    class OwnOptimizer(Base):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch, batch_idx):
            optimizer = self.optimizers()

            # optimizer is a LightningOptimizer wrapping the optimizer.
            # To access it, do the following.
            # However, it won't work on TPU, AMP, etc...
            optimizer = optimizer.optimizer
            optimizer.zero_grad()
            self.manual_backward(self.compute_loss(batch))
            optimizer.step()

    # -- seed 001: "Set Grads to None" -----------------------------------------------------------------
    class GradsToNone(Base):
        def training_step(self, batch, batch_idx):
            return self.compute_loss(batch)

        def optimizer_zero_grad(self, epoch, batch_idx, optimizer):
            optimizer.zero_grad(set_to_none=True)

    # -- seed 002: learning-rate warm-up, the 2.x signature of optimizer_step --------------------------
    class WarmupV2(Base):
        def __init__(self, learning_rate: float = 0.1):
            super().__init__()
            self.save_hyperparameters()

        def training_step(self, batch, batch_idx):
            return self.compute_loss(batch)

        def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure):
            # skip the first 500 steps
            if self.trainer.global_step < 500:
                lr_scale = min(1.0, float(self.trainer.global_step + 1) / 500.0)
                for pg in optimizer.param_groups:
                    pg["lr"] = lr_scale * self.hparams.learning_rate

            # update params
            optimizer.step(closure=optimizer_closure)

    return {
        name: cls
        for name, cls in locals().items()
        if isinstance(cls, type) and issubclass(cls, pl.LightningModule) and name not in ("Base", "GANParts")
    }


def fit(
    pl: Any, model: Any, max_epochs: int = 3, callbacks: list[Any] | None = None, **trainer_kwargs: Any
) -> Any:
    trainer = pl.Trainer(
        max_epochs=max_epochs,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        devices=1,
        callbacks=callbacks or [],
        **trainer_kwargs,
    )
    trainer.fit(model, data())
    return trainer


def weights(model: torch.nn.Module) -> dict[str, Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}
