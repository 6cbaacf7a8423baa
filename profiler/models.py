"""Model shapes and construction from configs: nothing is ever downloaded.

Presets keep CI traces small (``tiny``) while ``base`` reproduces the real GPT-2 (124M) and
BERT-base shapes, so a trace from a GPU server has the operator mix the simulators expect.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import PreTrainedModel

MODELS = ("gpt2", "bert", "mixtral")
#: Models trained as causal LMs on the GPT-2 tokenizer (the others: BERT's masked LM).
CAUSAL = ("gpt2", "mixtral")
#: Models whose MLP is a mixture of experts, which ``--ep`` shards.
MOE_MODELS = ("mixtral",)
#: Models whose MLP is a mixture of experts (``--ep``): (model, size) -> (experts, experts per token).
MOE_PRESETS: dict[tuple[str, str], tuple[int, int]] = {("mixtral", "tiny"): (4, 2), ("mixtral", "small"): (8, 2)}
SIZES = ("tiny", "small", "base")
# The real model names are accepted as size names for the matching model.
SIZE_ALIASES = {("gpt2", "gpt2"): "base", ("bert", "bert-base"): "base"}
SIZE_CHOICES = (*SIZES, "auto", "gpt2", "bert-base")


@dataclass(frozen=True)
class Shape:
    """The architecture knobs a user can override on the command line."""

    n_layer: int
    hidden: int
    n_head: int
    intermediate: int
    max_positions: int
    seq_len: int
    vocab_size: int = 0  # embedding rows at least; 0: the tokenizer's size

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def knobs(cls) -> tuple[str, ...]:
        """The field names, which are also the command-line overrides (``--n-layer`` ...)."""
        return tuple(f.name for f in fields(cls))


PRESETS: dict[tuple[str, str], Shape] = {
    ("gpt2", "tiny"): Shape(n_layer=2, hidden=64, n_head=2, intermediate=256, max_positions=128, seq_len=64),
    ("gpt2", "small"): Shape(4, 256, 4, 1024, 512, 128),
    ("gpt2", "base"): Shape(12, 768, 12, 3072, 1024, 512, vocab_size=50257),
    ("bert", "tiny"): Shape(n_layer=2, hidden=64, n_head=2, intermediate=256, max_positions=128, seq_len=64),
    ("bert", "small"): Shape(4, 256, 4, 1024, 512, 128),
    # A WordPiece vocabulary trained on little text is small; the real shape keeps 30,522 rows.
    ("bert", "base"): Shape(12, 768, 12, 3072, 512, 384, vocab_size=30522),
    # Mixtral's architecture (grouped-query attention, RMSNorm, rotary positions, a sparse MoE of
    # SwiGLU experts) at sizes a CPU trains; there is no ``base`` (the real one is 47B parameters).
    ("mixtral", "tiny"): Shape(n_layer=2, hidden=64, n_head=2, intermediate=128, max_positions=128, seq_len=64),
    ("mixtral", "small"): Shape(4, 256, 4, 512, 512, 128),
}


def check_size(model: str, size: str) -> None:
    """A real model's name is a size only for that model (``--model bert --size gpt2`` is a slip)."""
    if size not in (*SIZES, "auto") and (model, size) not in SIZE_ALIASES:
        raise ValueError(f"size {size!r} does not apply to model {model!r}")
    if size == "base" and (model, size) not in PRESETS:
        raise ValueError(f"model {model!r} has no 'base' size here (tiny or small)")


def resolve_size(model: str, size: str, on_gpu: bool) -> str:
    """Map ``auto`` and the real model names onto a preset name.

    ``auto`` means the real shape on GPUs (the Docker job) and ``small`` on CPU processes.
    """
    if size == "auto":
        return "base" if on_gpu and (model, "base") in PRESETS else "small"
    if size in SIZES:
        return size
    check_size(model, size)
    return SIZE_ALIASES[(model, size)]


def resolve_shape(model: str, size: str, overrides: dict[str, int | None]) -> Shape:
    """The preset for ``(model, size)`` with the non-None overrides applied and checked."""
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}; expected one of {MODELS}")
    shape = replace(PRESETS[(model, size)], **{k: v for k, v in overrides.items() if v is not None})
    if shape.hidden % shape.n_head:
        raise ValueError(f"hidden ({shape.hidden}) must be a multiple of n_head ({shape.n_head})")
    if shape.seq_len > shape.max_positions:
        raise ValueError(f"seq_len ({shape.seq_len}) exceeds max_positions ({shape.max_positions})")
    if min(v for k, v in shape.as_dict().items() if k != "vocab_size") < 1:
        raise ValueError(f"every shape value must be positive: {shape}")
    return shape


#: A vocabulary trained here is padded to a multiple of this (as Megatron-LM's
#: ``--make-vocab-size-divisible-by``): the WordPiece trainer breaks ties differently from one
#: process to the next (1,660 or 1,662 pieces on the shipped sample), and a capture's shapes, so
#: its gradient all-reduce bytes, must not depend on that.
TRAINED_VOCAB_MULTIPLE = 64


def embedding_rows(shape: Shape, tokenizer_size: int, *, trained: bool = False) -> int:
    """The model's vocabulary: every token id must fit, and ``base`` keeps the real model's size;
    a vocabulary ``trained`` for this run is padded to a multiple of ``TRAINED_VOCAB_MULTIPLE``."""
    if trained:
        tokenizer_size = -(-tokenizer_size // TRAINED_VOCAB_MULTIPLE) * TRAINED_VOCAB_MULTIPLE
    return max(shape.vocab_size, tokenizer_size)


def build_config(
    model: str, shape: Shape, vocab_size: int, special_ids: dict[str, int], moe: tuple[int, int] = (4, 2)
) -> Any:
    """A transformers config with randomly initialised weights in mind (pretraining from scratch)."""
    if model == "mixtral":
        from transformers import MixtralConfig

        experts, top_k = moe
        return MixtralConfig(
            vocab_size=vocab_size,
            hidden_size=shape.hidden,
            intermediate_size=shape.intermediate,
            num_hidden_layers=shape.n_layer,
            num_attention_heads=shape.n_head,
            num_key_value_heads=shape.n_head,
            max_position_embeddings=shape.max_positions,
            num_local_experts=experts,
            num_experts_per_tok=top_k,
            bos_token_id=special_ids["bos"],
            eos_token_id=special_ids["eos"],
            pad_token_id=special_ids["pad"],
            use_cache=False,
        )
    if model == "gpt2":
        from transformers import GPT2Config

        # loss_type: a config attribute that GPT2Config's signature does not list
        return GPT2Config(  # type: ignore[call-arg]
            vocab_size=vocab_size,
            n_positions=shape.max_positions,
            n_embd=shape.hidden,
            n_layer=shape.n_layer,
            n_head=shape.n_head,
            n_inner=shape.intermediate,
            bos_token_id=special_ids["bos"],
            eos_token_id=special_ids["eos"],
            pad_token_id=special_ids["pad"],
            loss_type="ForCausalLM",  # named, or transformers warns on every rank at the first step
        )
    from transformers import BertConfig

    return BertConfig(
        vocab_size=vocab_size,
        hidden_size=shape.hidden,
        num_hidden_layers=shape.n_layer,
        num_attention_heads=shape.n_head,
        intermediate_size=shape.intermediate,
        max_position_embeddings=shape.max_positions,
        pad_token_id=special_ids["pad"],
    )


def build_model(
    model: str, shape: Shape, vocab_size: int, special_ids: dict[str, int], moe: tuple[int, int] = (4, 2)
) -> PreTrainedModel:
    """GPT-2 or Mixtral with an LM head (causal LM) or BERT with an MLM head, freshly initialised."""
    config = build_config(model, shape, vocab_size, special_ids, moe)
    if model == "mixtral":
        from transformers import MixtralForCausalLM

        return MixtralForCausalLM(config)
    if model == "gpt2":
        from transformers import GPT2LMHeadModel

        return GPT2LMHeadModel(config)
    from transformers import BertForMaskedLM

    return BertForMaskedLM(config)


def count_parameters(module: Any) -> int:
    """Distinct parameters (tied embeddings count once, as in the 124M of GPT-2)."""
    return sum(p.numel() for p in module.parameters())
