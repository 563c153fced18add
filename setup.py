"""Packaging for keras_attn."""
import pathlib
import re

from setuptools import find_packages, setup

HERE = pathlib.Path(__file__).parent
VERSION = re.search(
    r'__version__ = "([^"]+)"', (HERE / "keras_attn" / "__init__.py").read_text()
).group(1)

setup(
    name="keras_attn",
    version=VERSION,
    description="Attention layers, Transformer and Bahdanau translators for Keras 3, "
    "trained with model.fit and exported to TF Serving and TFLite.",
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    packages=find_packages(include=["keras_attn", "keras_attn.*"]),
    # the page of keras-attn serve; the serving contract's snapshot (keras_attn.export.contract)
    # webapp/: the web export's JavaScript and the lock file that pins LiteRT.js (npm ci).
    package_data={"keras_attn.serve": ["static/*.html"],
                  "keras_attn.export": ["signatures.json", "webapp/*.js", "webapp/*.html",
                                        "webapp/*.json"]},
    # Keras 3.15 requires Python 3.11; TensorFlow 2.21 and tensorflow-text 2.21 publish
    # wheels for 3.10 to 3.13. Tested on 3.11.
    python_requires=">=3.11",
    install_requires=[
        "tensorflow==2.21.*",
        "tensorflow-text==2.21.*",
        # Learns the Tatoeba subword models and reads their pieces; tokenizing runs on
        # tensorflow-text's FastSentencepieceTokenizer ops.
        "sentencepiece>=0.2",
        "tensorboard",
        # Public Keras APIs only; no upper bound until a test shows a release that breaks.
        "keras>=3.15",
        "numpy",
        "sacrebleu>=2.3",
        "matplotlib>=3.7",
        "ai-edge-litert",
        # keras-attn serve: an ASGI app (Starlette) under uvicorn; python-multipart reads
        # multipart form bodies. uvicorn takes httptools' HTTP parser and uvloop's event
        # loop when they are installed (the load benchmark's figures are with them).
        "starlette",
        "uvicorn",
        "httptools",
        "uvloop; sys_platform != 'win32'",
        "python-multipart",
        # keras-attn serve's LibreTranslate routes: POST /detect (langid: a naive Bayes
        # language identifier with its model in the package, ~2 s to load, no download),
        # GET /metrics (prometheus-client), .docx/.odt files rewritten with their XML
        # prefixes kept (lxml), request limits shared through --shared-storage redis://
        # (redis).
        "langid>=1.1.6",
        # A run's languages (keras_attn.core.languages): BCP 47 tags in their standard form
        # (ISO 639-3 "fra" is "fr") and CLDR's English names for any code; the [data] extra
        # is language_data, the names' tables (in the package, no download).
        "langcodes[data]>=3.4",
        "prometheus-client",
        "lxml",
        "redis>=4",
    ],
    extras_require={
        # import-linter: the packages' import contracts (tests/integration/test_architecture.py);
        # torch: the reference of the parity tests (tests/support/block_checks.py); jax: the backend
        # tests; ctranslate2: the CTranslate2 export tests; keras-hub: the benchmark suite's
        # references; tensorflow-serving-api: the gRPC client tests; httpx: Starlette's
        # TestClient; libretranslatepy: the published LibreTranslate client the serve tests
        # drive; selenium: the web page's test in headless Chromium (tests/serve/test_browser.py,
        # with Debian's chromium and chromium-driver: CI's browser pass installs them and
        # runs it); openapi-spec-validator: GET /spec checked; python-docx and odfpy: the
        # .docx and .odt files of /translate_file written and read by other code than the
        # server's (tests/serve/test_serve_api.py); psutil: the memory of a served process tree
        # (benchmarks.serve_load, tests/serve/test_serve_load.py). All must run, not skip.
        # torch==2.13.0 is met by 2.13.0+cpu, which the README's test command installs from
        # PyTorch's CPU index first (from PyPI alone it is the CUDA build); jax[cpu] is the
        # CPU build.
        "test": ["pytest>=7", "pytest-xdist>=3.2", "hypothesis>=6", "import-linter>=2.1", "torch==2.13.0",
                 "jax[cpu]>=0.8", "ctranslate2>=4.5,<5", "keras-hub",
                 "tensorflow-serving-api==2.21.*", "httpx", "libretranslatepy",
                 "selenium>=4.11", "openapi-spec-validator", "python-docx", "odfpy", "psutil"],
        "ctranslate2": ["ctranslate2>=4.5,<5"],
        # pysbd: the reference of the retired segmentation study (research/).
        "bench": ["keras-hub", "pysbd", "psutil"],
        "serving": ["tensorflow-serving-api==2.21.*"],
        # The documentation site (mkdocs.yml): MkDocs with the Material theme, and
        # mkdocstrings for the API reference read from the docstrings.
        # tests/integration/test_docs.py builds it with --strict (skipped without these unless
        # KERAS_ATTN_REQUIRE_DOCS=1).
        "docs": ["mkdocs>=1.6,<2", "mkdocs-material>=9.5", "mkdocstrings[python]>=0.26"],
    },
    entry_points={"console_scripts": ["keras-attn=keras_attn.cli:main"]},
)
