"""SQuAD-format text through ``datasets``, encoded for causal LM (GPT-2) or masked LM (BERT).

Only the question and context text are used: the pipeline pretrains from scratch, so the
answers matter only to keep the files valid SQuAD v1.1. The default is a small invented sample
shipped in ``profiler/data/`` so that everything works offline.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from datasets import Dataset
    from transformers import PreTrainedTokenizerBase

SAMPLE_PATH = Path(__file__).parent / "data" / "squad_sample.json"
SAMPLE = "sample"
HUB_SQUAD = "squad"
MLM_PROBABILITY = 0.15


def _flatten(batch: dict[str, list[Any]]) -> dict[str, list[str]]:
    """SQuAD v1.1 articles -> one row per question, paired with its paragraph."""
    questions: list[str] = []
    contexts: list[str] = []
    for paragraphs in batch["paragraphs"]:
        for paragraph in paragraphs:
            for qa in paragraph["qas"]:
                questions.append(qa["question"])
                contexts.append(paragraph["context"])
    return {"question": questions, "context": contexts}


def load_squad(source: str | None = None) -> Dataset:
    """Rows of ``question`` and ``context`` from the sample, a local SQuAD JSON, or the hub.

    ``None`` / ``"sample"``: the shipped sample; ``"squad"``: the real dataset (needs the hub);
    anything else: a path to a SQuAD v1.1 JSON file (``{"data": [{"paragraphs": ...}]}``).
    """
    import datasets

    datasets.disable_progress_bars()
    if source == HUB_SQUAD:
        ds = datasets.load_dataset("squad", split="train")
        return ds.select_columns(["question", "context"])
    path = SAMPLE_PATH if source in (None, SAMPLE) else Path(source)
    if not path.is_file():
        raise FileNotFoundError(f"SQuAD file not found: {path}")
    raw = datasets.load_dataset("json", data_files=str(path), field="data", split="train")
    return raw.map(_flatten, batched=True, remove_columns=raw.column_names)


def texts_of(ds: Dataset) -> list[str]:
    """All distinct text of the dataset, for training a vocabulary."""
    return list(dict.fromkeys([*ds["question"], *ds["context"]]))


def encode(ds: Dataset, model: str, tokenizer: PreTrainedTokenizerBase, seq_len: int) -> Dataset:
    """Fixed-length token ids: every step has the same shapes, so traced steps are comparable.

    GPT-2 reads ``question + " " + context``; BERT reads ``[CLS] question [SEP] context [SEP]``.
    """

    def gpt2(batch: dict[str, list[str]]) -> dict[str, Any]:
        text = [f"{q} {c}" for q, c in zip(batch["question"], batch["context"], strict=True)]
        ids: dict[str, Any] = tokenizer(text, max_length=seq_len, truncation=True, padding="max_length")
        return ids

    def bert(batch: dict[str, list[str]]) -> dict[str, Any]:
        ids: dict[str, Any] = tokenizer(
            batch["question"],
            batch["context"],
            max_length=seq_len,
            truncation="longest_first",
            padding="max_length",
            return_token_type_ids=True,
            return_special_tokens_mask=True,
        )
        return ids

    encoded = ds.map(bert if model == "bert" else gpt2, batched=True, remove_columns=ds.column_names)
    return encoded.with_format("torch")


def mask_tokens(
    input_ids: torch.Tensor,
    special_tokens_mask: torch.Tensor,
    tokenizer: PreTrainedTokenizerBase,
    generator: torch.Generator,
    probability: float = MLM_PROBABILITY,
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's masking: pick 15% of real tokens; 80% -> [MASK], 10% -> random, 10% unchanged.

    Returns the corrupted ids and labels that are -100 wherever no prediction is asked.
    """
    ids = input_ids.clone()
    chosen = torch.bernoulli(torch.full(ids.shape, probability), generator=generator).bool()
    chosen &= ~special_tokens_mask.bool()
    labels = torch.where(chosen, input_ids, torch.full_like(input_ids, -100))
    to_mask = chosen & torch.bernoulli(torch.full(ids.shape, 0.8), generator=generator).bool()
    ids[to_mask] = tokenizer.mask_token_id
    to_random = chosen & ~to_mask & torch.bernoulli(torch.full(ids.shape, 0.5), generator=generator).bool()
    ids[to_random] = torch.randint(len(tokenizer), ids.shape, generator=generator)[to_random]
    return ids, labels


class Collator:
    """Turns encoded rows into model inputs with labels (shifted inside the GPT-2 model)."""

    def __init__(self, model: str, tokenizer: PreTrainedTokenizerBase, seed: int) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.generator = torch.Generator().manual_seed(seed)

    def __call__(self, rows: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        batch = {key: torch.stack([row[key] for row in rows]) for key in rows[0]}
        if self.model != "bert":  # causal LMs (GPT-2, Mixtral)
            batch["labels"] = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
            return batch
        special = batch.pop("special_tokens_mask")
        batch["input_ids"], batch["labels"] = mask_tokens(batch["input_ids"], special, self.tokenizer, self.generator)
        return batch


def batches(
    encoded: Dataset, collator: Collator, batch_size: int, rank: int, world_size: int, seed: int
) -> Iterator[dict[str, torch.Tensor]]:
    """Endless per-rank batches: a disjoint shard per rank, reshuffled every epoch."""
    from torch.utils.data import DataLoader, DistributedSampler

    sampler: DistributedSampler[Any] = DistributedSampler(
        encoded, num_replicas=world_size, rank=rank, shuffle=True, seed=seed
    )
    loader = DataLoader(encoded, batch_size=batch_size, sampler=sampler, collate_fn=collator, drop_last=True)
    if len(loader) == 0:
        raise ValueError(f"{len(encoded)} examples over {world_size} rank(s) give no full batch of {batch_size}")
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        yield from loader
        epoch += 1
