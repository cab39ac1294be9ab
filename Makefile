# Two commands: `make run` installs and starts ragmux on its embedded default;
# `make test` installs what the tests need and runs the whole suite.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: run test install install-test browser ocr screenshots bench-prose

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

# OCR of scanned PDFs and images runs Debian's Tesseract with its English model (ingestion.parsing.ocr).
ocr:
	@if [ ! -x /usr/bin/tesseract ] || [ ! -f /usr/share/tesseract-ocr/5/tessdata/eng.traineddata ]; then \
		if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq tesseract-ocr tesseract-ocr-eng; \
	fi
