"""Data sources for the GAN problem: samples pre-loaded into one tensor, or a torch Dataset read by workers."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from evogan.adversarial.contracts import DataSource
from evogan.lazy import lazy

if TYPE_CHECKING:
    import torch
    from torch.utils.data import Dataset as TorchDataset
else:  # imported on first use: `evogan validate` and `components` read options without them
    torch = lazy("torch", globals())


class TensorSource(DataSource):
    """All samples in one tensor on the training device: batches are index gathers, no loader overhead.

    ``rows`` restricts the source to those rows (a cell's share under data dieting) without copying the
    samples: every cell's subset shares the one tensor.
    """

    def __init__(
        self,
        samples: torch.Tensor,
        labels: torch.Tensor | None = None,
        num_classes: int | None = None,
        *,
        rows: torch.Tensor | None = None,
    ) -> None:
        self.samples = samples
        self.labels = labels
        self.num_classes = num_classes
        self.sample_shape = tuple(samples.shape[1:])
        self.rows = None if rows is None else rows.to(samples.device)

    def __len__(self) -> int:
        return self.samples.shape[0] if self.rows is None else self.rows.shape[0]

    def subset(self, indices: torch.Tensor) -> TensorSource:
        rows = indices.to(self.samples.device)
        if self.rows is not None:
            rows = self.rows.index_select(0, rows)
        return TensorSource(self.samples, self.labels, self.num_classes, rows=rows)

    def _indices(self, n: int, generator: torch.Generator) -> torch.Tensor:
        return self._rows(torch.randperm(len(self), generator=generator)[:n])

    def _rows(self, positions: torch.Tensor) -> torch.Tensor:
        """Rows of ``samples`` at ``positions`` of this source (the identity without a subset)."""
        return positions if self.rows is None else self.rows.index_select(0, positions.to(self.rows.device))

    def batches(self, batch_size: int, count: int, *, generator: torch.Generator) -> Iterator[torch.Tensor]:
        per_pass = len(self) // batch_size
        total = count or per_pass
        done = 0
        while done < total:
            order = self._rows(torch.randperm(len(self), generator=generator)).to(self.samples.device)
            for start in range(0, per_pass * batch_size, batch_size):
                if done == total:
                    return
                yield self.samples.index_select(0, order[start : start + batch_size])
                done += 1

    def sample(self, n: int, *, generator: torch.Generator) -> torch.Tensor:
        # Without replacement when the data allows it, so small samples have no duplicates.
        if n <= len(self):
            index = self._indices(n, generator)
        else:
            index = self._rows(torch.randint(len(self), (n,), generator=generator))
        return self.samples.index_select(0, index.to(self.samples.device))


class LoaderSource(DataSource):
    """A torch Dataset too large to pre-load (CelebA): batches come from a DataLoader with workers.

    The sampler's order is drawn from the cell's generator, so runs stay reproducible.
    """

    def __init__(
        self,
        dataset: TorchDataset,  # items are images, or (image, label) pairs
        sample_shape: tuple[int, ...],
        device: torch.device,
        workers: int = 2,
    ) -> None:
        self.dataset = dataset
        self.sample_shape = sample_shape
        self.device = device
        self.workers = workers

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def subset(self, indices: torch.Tensor) -> LoaderSource:
        from torch.utils.data import Subset

        return LoaderSource(Subset(self.dataset, indices.tolist()), self.sample_shape, self.device, self.workers)

    @staticmethod
    def _images(item: object) -> torch.Tensor:
        return item[0] if isinstance(item, list | tuple) else item  # type: ignore[return-value]

    def batches(self, batch_size: int, count: int, *, generator: torch.Generator) -> Iterator[torch.Tensor]:
        from torch.utils.data import DataLoader, RandomSampler

        total = count or len(self) // batch_size
        seed = int(torch.randint(2**62, (1,), generator=generator))
        sampler_generator = torch.Generator().manual_seed(seed)
        sampler = RandomSampler(self.dataset, generator=sampler_generator)  # type: ignore[arg-type]
        loader = DataLoader(
            self.dataset,
            batch_size=batch_size,
            sampler=sampler,
            drop_last=True,
            num_workers=self.workers,
            persistent_workers=False,
        )
        done = 0
        while done < total:
            for item in loader:
                if done == total:
                    return
                yield self._images(item).to(self.device, non_blocking=True)
                done += 1

    def sample(self, n: int, *, generator: torch.Generator) -> torch.Tensor:
        index = torch.randperm(len(self), generator=generator)[:n].tolist()
        return torch.stack([self._images(self.dataset[i]) for i in index]).to(self.device)
