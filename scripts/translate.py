#!/usr/bin/env python
"""`keras-attn translate` as a script: python scripts/translate.py --help."""
import sys

from keras_attn.cli import main

if __name__ == "__main__":
    sys.exit(main(["translate", *sys.argv[1:]]))
