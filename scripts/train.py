#!/usr/bin/env python
"""`keras-attn train` as a script: python scripts/train.py --help."""
import sys

from keras_attn.cli import main

if __name__ == "__main__":
    sys.exit(main(["train", *sys.argv[1:]]))
