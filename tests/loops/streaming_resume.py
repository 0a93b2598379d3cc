"""A fit over a real streaming data source, SIGKILLed and resumed; driven by test_streaming_resume.py.

Usage: ``python streaming_resume.py OUT SOURCE RUN [--kill STEP] [--ckpt PATH]`` with SOURCE one of ``hf``
(Hugging Face ``datasets``: an IterableDataset streamed from local parquet files, in a plain DataLoader),
``hf-stateful`` (the same through torchdata's ``StatefulDataLoader`` with 2 workers) or ``litdata``
(``StreamingDataset`` / ``StreamingDataLoader`` over OUT/litdata, written by ``litdata.optimize``). The data
is in OUT; each read appends the sample's index to OUT/reads-RUN/<pid>, each trained batch to
OUT/trained-RUN; the final weights go to OUT/weights-RUN.pt.
"""

from __future__ import annotations

import argparse
import os
import signal
from pathlib import Path
from typing import Any

import torch

import fulmen
from fulmen.callbacks import Callback, ModelCheckpoint

SAMPLES, BATCH, FILES = 64, 4, 4


def write_parquet(out: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    (out / "parquet").mkdir(parents=True)
    per = SAMPLES // FILES
    for f in range(FILES):
        index = list(range(f * per, (f + 1) * per))
        table = pa.table({"index": index, "x": [[float(i % 7) - 3.0, float(i % 5), 1.0, float(i) / SAMPLES] for i in index]})
        pq.write_table(table, out / "parquet" / f"part-{f}.parquet", row_group_size=8)


def _litdata_sample(index: int) -> dict[str, Any]:
    return {"index": index, "x": torch.tensor([float(index % 7) - 3.0, float(index % 5), 1.0, index / SAMPLES])}


def write_litdata(out: Path) -> None:
    import litdata

    litdata.optimize(fn=_litdata_sample, inputs=list(range(SAMPLES)), output_dir=str(out / "litdata"),
                     chunk_bytes="1KB", num_workers=1)  # fmt: skip


class _Reads:
    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def __call__(self, sample: dict[str, Any]) -> dict[str, Any]:
        with open(self.folder / str(os.getpid()), "a") as log:
            log.write(f"{int(sample['index'])}\n")
        return sample


def _loader(source: str, out: Path, reads: _Reads) -> Any:
    if source.startswith("hf"):
        os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
        from datasets import load_dataset

        files = sorted(str(p) for p in (out / "parquet").iterdir())
        dataset = load_dataset("parquet", data_files=files, split="train", streaming=True).map(reads)
        dataset = dataset.with_format("torch")
        if source == "hf":
            return torch.utils.data.DataLoader(dataset, batch_size=BATCH)
        from torchdata.stateful_dataloader import StatefulDataLoader

        return StatefulDataLoader(dataset, batch_size=BATCH, num_workers=2)
    import litdata

    class Logged(litdata.StreamingDataset):
        def __getitem__(self, index: Any) -> Any:
            return reads(super().__getitem__(index))

    return litdata.StreamingDataLoader(Logged(str(out / "litdata")), batch_size=BATCH)


class Model(fulmen.LightningModule):
    def __init__(self, trained: Path) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 2)
        self.trained = trained

    def training_step(self, batch, batch_idx):
        with open(self.trained, "a") as log:
            log.write(" ".join(str(int(i)) for i in batch["index"]) + "\n")
        return self.layer(batch["x"].float()).square().mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


class Epochs(Callback):
    """Hugging Face streams are told the epoch (their docs ask for it: a restored position applies until then)."""

    def on_train_epoch_start(self, trainer, pl_module):
        dataset = trainer.train_dataloader.dataset
        if hasattr(dataset, "set_epoch"):
            dataset.set_epoch(trainer.current_epoch)


class Kill(Callback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("source", choices=["hf", "hf-stateful", "litdata"])
    parser.add_argument("run")
    parser.add_argument("--kill", type=int)
    parser.add_argument("--ckpt")
    args = parser.parse_args()
    fit(args.out, args.source, args.run, args.kill, args.ckpt)


def fit(out: Path, source: str, run: str, kill: int | None = None, ckpt: str | None = None) -> None:
    """One run (in this process; the test runs the one it kills in a process of its own)."""
    reads = out / f"reads-{run}"
    reads.mkdir(exist_ok=True)
    fulmen.seed_everything(0)
    model = Model(out / f"trained-{run}")
    callbacks: list[Callback] = [
        Epochs(),
        ModelCheckpoint(dirpath=out / f"ckpt-{run}", every_n_train_steps=1, save_top_k=-1, save_last=True),
        ModelCheckpoint(dirpath=out / f"epochs-{run}", every_n_epochs=1, save_top_k=-1, save_on_train_epoch_end=True),
    ]  # fmt: skip
    if kill is not None:
        callbacks.insert(0, Kill(kill))
    trainer = fulmen.Trainer(max_epochs=2, logger=False, enable_progress_bar=False, enable_model_summary=False,
                             callbacks=callbacks, default_root_dir=out)  # fmt: skip
    trainer.fit(model, _loader(source, out, _Reads(reads)), ckpt_path=ckpt)
    torch.save(model.state_dict(), out / f"weights-{run}.pt")


if __name__ == "__main__":
    main()
