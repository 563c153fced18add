#!/usr/bin/env python
"""`keras-attn evaluate` as a script: python scripts/evaluate.py --help."""
import sys

from keras_attn.cli import main

if __name__ == "__main__":
    sys.exit(main(["evaluate", *sys.argv[1:]]))
