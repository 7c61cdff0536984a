# Quickstart: `make demo` and `make test` each build .venv from scratch when it is missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: demo test test-browser lint format clean sample-data

# PIP_EXTRA: more pip options, e.g. PIP_EXTRA="--extra-index-url https://download.pytorch.org/whl/cpu" for
# torch's CPU build on Linux, where the default index serves the CUDA build (README, "Installing").
PIP_EXTRA ?=

$(STAMP): pyproject.toml constraints.txt
	@echo "Building $(VENV): contrast-audit, sentence-transformers and torch (about 2.5 GB on disk; pip lists each package)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --progress-bar off $(PIP_EXTRA) -c constraints.txt -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/contrast-audit scan sample_data/pairs.jsonl --batch-size 128 --seed 42 --top 15

test: $(STAMP)
	$(BIN)/python -m pytest -q

# The HTML report in headless Chromium: installs chromium with apt-get (Debian, as root) when it is not
# on PATH, then runs the browser test, which fails rather than skips here. `make test` never installs
# anything; without chromium it skips that test and says so in its summary.
test-browser: $(STAMP)
	@if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then \
		echo "make test-browser: installing chromium with apt-get (needs root)"; \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium; \
	fi
	CONTRAST_AUDIT_BROWSER_TEST=require $(BIN)/python -m pytest -q tests/report/test_browser.py

lint: $(STAMP)
	$(BIN)/ruff check contrast_audit tests bench sample_data
	$(BIN)/ruff format --check contrast_audit tests bench sample_data

format: $(STAMP)
	$(BIN)/ruff format contrast_audit tests bench sample_data

sample-data:
	$(PYTHON) sample_data/generate.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
