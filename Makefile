# Quickstart: `make demo` and `make test` each build .venv from scratch when it is missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: demo test lint format clean sample-data

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/contrast-audit scan sample_data/pairs.jsonl --batch-size 128 --seed 42 --top 15

test: $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check contrast_audit tests bench sample_data
	$(BIN)/ruff format --check contrast_audit tests bench sample_data

format: $(STAMP)
	$(BIN)/ruff format contrast_audit tests bench sample_data

sample-data:
	$(PYTHON) sample_data/generate.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
