"""Capture Chakra-ready PyTorch traces from GPT-2 / BERT DDP pretraining on SQuAD text.

Step 1 of the pipeline: ``chakra-profile`` (``profiler.cli``) launches the ranks,
``profiler.train`` is the per-rank entry point (also usable under a user's own ``torchrun``).
Importing this package stays cheap: torch and transformers load only where a rank needs them.
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
