"""``python -m zipccl.demo``: the same as ``python -m zipccl demo``."""

import argparse
import sys

from .cli import configure, run

if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m zipccl.demo",
                                     description="zipccl demo: gloo vs zipccl GPT training")
    configure(parser)
    sys.exit(run(parser.parse_args()))
