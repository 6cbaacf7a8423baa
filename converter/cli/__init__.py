"""The command line: one argparse grammar for every subcommand, and printing for people.

All work is done by ``api``. Human output (progress bars, summaries, warnings, errors) goes to
stderr, and to ``--log-filename`` when given; stdout carries only what a command produces as data.
One module per command (each defines ``add``); ``main`` lists them and imports the one that runs, ``common``
holds the options they share, ``report`` the messages, ``signals`` how signals end a command.
Forms accepted (the last one is ``chakra_converter``'s, so its scripts only swap the executable)::

    chakra-convert-fast [convert] INPUT OUTPUT [--jobs N] [options]
    chakra-convert-fast convert --host HOST --device DEVICE OUTPUT [options]
    chakra-convert-fast link --host HOST --device DEVICE OUTPUT
    chakra-convert-fast convert-all DIRECTORY OUTDIR [options]
    chakra-convert-fast repair INPUT OUTPUT
    chakra-convert-fast check FILE.et ... [--comm-groups F] [--json]
    chakra-convert-fast [--log-filename F] PyTorch --input INPUT --output OUTPUT [--simulate]
"""

from .common import PROG
from .main import COMMANDS, build_parser, main

__all__ = ["COMMANDS", "PROG", "build_parser", "main"]
