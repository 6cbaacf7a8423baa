"""SQuAD loading and encoding, with the network switched off."""

from __future__ import annotations

import json
from pathlib import Path

import datasets  # noqa: F401 - a missing dependency fails, never skips
import pytest
import torch
import transformers  # noqa: F401 - a missing dependency fails, never skips

from chakra_convert_fast.profiler import data, tokenizers

pytestmark = [pytest.mark.torch, pytest.mark.usefixtures("offline")]


def squad_doc(paragraphs: list[tuple[str, list[str]]]) -> dict[str, object]:
    """A minimal SQuAD v1.1 document; each answer is the context's first three characters."""

    def qa(i: int, j: int, question: str, context: str) -> dict[str, object]:
        return {"id": f"{i}-{j}", "question": question, "answers": [{"text": context[:3], "answer_start": 0}]}

    paras = [{"context": c, "qas": [qa(i, j, q, c) for j, q in enumerate(qs)]} for i, (c, qs) in enumerate(paragraphs)]
    return {"version": "1.1", "data": [{"title": "t", "paragraphs": paras}]}


def test_sample_is_valid_squad_v1_1() -> None:
    doc = json.loads(data.SAMPLE_PATH.read_text(encoding="utf-8"))
    assert doc["version"] == "1.1"
    paragraphs = [p for article in doc["data"] for p in article["paragraphs"]]
    qas = [qa for p in paragraphs for qa in p["qas"]]
    assert len(paragraphs) >= 24
    assert len({qa["id"] for qa in qas}) == len(qas)
    for p in paragraphs:
        for qa in p["qas"]:
            for answer in qa["answers"]:
                start = answer["answer_start"]
                assert p["context"][start : start + len(answer["text"])] == answer["text"]


def test_sample_loads_by_default() -> None:
    ds = data.load_squad()
    assert ds.column_names == ["question", "context"]
    assert len(ds) == 99
    assert ds[0]["question"].endswith("?")


def test_local_squad_file(tmp_path: Path) -> None:
    path = tmp_path / "mini.json"
    path.write_text(json.dumps(squad_doc([("Alpha beta.", ["A?", "B?"]), ("Gamma.", ["C?"])])))
    ds = data.load_squad(str(path))
    assert ds["question"] == ["A?", "B?", "C?"]
    assert ds["context"] == ["Alpha beta.", "Alpha beta.", "Gamma."]


def test_missing_file_is_reported(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"nope\.json"):
        data.load_squad(str(tmp_path / "nope.json"))


def test_gpt2_reads_question_then_context() -> None:
    ds = data.load_squad().select(range(4))
    tok = tokenizers.gpt2_tokenizer()
    encoded = data.encode(ds, "gpt2", tok, 32)
    assert encoded[:]["input_ids"].shape == (4, 32)
    text = tok.decode(encoded[0]["input_ids"][encoded[0]["attention_mask"].bool()])
    assert isinstance(text, str) and text.startswith(ds[0]["question"] + " " + ds[0]["context"][:10])
    batch = data.Collator("gpt2", tok, 0)([encoded[i] for i in range(4)])
    assert (batch["labels"][batch["attention_mask"] == 0] == -100).all()


def test_bert_reads_cls_question_sep_context_sep() -> None:
    ds = data.load_squad().select(range(4))
    tok = tokenizers.bert_tokenizer(data.texts_of(data.load_squad()))
    row = data.encode(ds, "bert", tok, 128)[0]
    tokens = tok.convert_ids_to_tokens(row["input_ids"][row["attention_mask"].bool()].tolist())
    seps = [i for i, t in enumerate(tokens) if t == "[SEP]"]
    assert tokens[0] == "[CLS]" and len(seps) == 2 and seps[1] == len(tokens) - 1
    assert tok.decode(row["input_ids"][1 : seps[0]]) == ds[0]["question"].lower()
    assert set(row["token_type_ids"][: seps[0] + 1].tolist()) == {0}
    assert set(row["token_type_ids"][seps[0] + 1 : seps[1] + 1].tolist()) == {1}


def test_masking_picks_fifteen_percent_and_spares_special_tokens() -> None:
    tok = tokenizers.bert_tokenizer(["some words to train on", "and some more words"])
    ids = torch.randint(5, len(tok), (64, 256))
    special = torch.zeros_like(ids)
    special[:, 0] = 1
    masked, labels = data.mask_tokens(ids, special, tok, torch.Generator().manual_seed(0))
    chosen = labels != -100
    assert 0.13 < chosen[:, 1:].float().mean().item() < 0.17
    assert not chosen[:, 0].any() and (masked[:, 0] == ids[:, 0]).all()
    assert (labels[chosen] == ids[chosen]).all()
    share_masked = (masked[chosen] == tok.mask_token_id).float().mean().item()
    assert 0.75 < share_masked < 0.85


def test_ranks_read_disjoint_shards() -> None:
    ds = data.load_squad()
    tok = tokenizers.gpt2_tokenizer()
    encoded = data.encode(ds, "gpt2", tok, 16)
    firsts = []
    for rank in (0, 1):
        stream = data.batches(encoded, data.Collator("gpt2", tok, 0), 4, rank, 2, seed=0)
        firsts.append({tuple(row.tolist()) for row in next(stream)["input_ids"]})
    assert not firsts[0] & firsts[1]


def test_too_little_data_for_a_batch_is_reported() -> None:
    encoded = data.encode(data.load_squad().select(range(3)), "gpt2", tokenizers.gpt2_tokenizer(), 16)
    with pytest.raises(ValueError, match="no full batch"):
        next(data.batches(encoded, data.Collator("gpt2", tokenizers.gpt2_tokenizer(), 0), 4, 0, 1, 0))
