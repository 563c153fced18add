#!/usr/bin/env python
"""`keras-attn export` as a script: python scripts/export.py --help."""
import sys

from keras_attn.cli import main

if __name__ == "__main__":
    sys.exit(main(["export", *sys.argv[1:]]))
